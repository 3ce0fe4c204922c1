"""Pure tests for glmserve.bench.metrics: every definition on hand-built timestamp records."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from glmserve.bench.metrics import (
    StreamRecord,
    aggregate_tok_s,
    level_metrics,
    percentile,
    spread_total,
    steady_window,
    stream_metrics,
    summarize,
    token_times,
    tokens_in_window,
)


def uniform_stream(
    send: float, ttft: float, itl: float, n: int, per_chunk: int = 1, dispatch: float | None = None
) -> StreamRecord:
    """A stream whose tokens are emitted every ``itl`` after ``ttft``, delivered ``per_chunk``
    at a time (the chunk leaves with its last token), like the simulator does."""
    emit = [send + ttft + i * itl for i in range(n)]
    times, counts = [], []
    for c in range(per_chunk, n + per_chunk, per_chunk):
        c = min(c, n)
        times.append(emit[c - 1])
        counts.append(c)
    return StreamRecord(
        dispatch=send if dispatch is None else dispatch,
        send=send,
        chunk_times=times,
        chunk_tokens=counts,
        completion_tokens=n,
        end=times[-1] if times else send,
    )


def test_single_token_chunks_give_textbook_ttft_tpot_itl():
    m = stream_metrics(uniform_stream(10.0, 0.2, 0.05, 101))
    assert m.ttft == pytest.approx(0.2)
    assert m.e2e == pytest.approx(0.2 + 100 * 0.05)
    assert m.tpot == pytest.approx(0.05)
    assert m.decode_tok_s == pytest.approx(20.0)
    assert len(m.itls) == 100
    assert all(x == pytest.approx(0.05) for x in m.itls)
    assert m.n_tokens == 101


def test_tpot_matches_classic_formula_for_one_token_chunks():
    r = uniform_stream(0.0, 0.3, 0.02, 50)
    m = stream_metrics(r)
    assert m.tpot == pytest.approx((m.e2e - m.ttft) / (50 - 1))


@pytest.mark.parametrize("k", [2, 3, 4, 7])
def test_multi_token_chunks_keep_counts_and_rate(k):
    base = stream_metrics(uniform_stream(0.0, 0.1, 0.04, 64))
    chunked_rec = uniform_stream(0.0, 0.1, 0.04, 64, per_chunk=k)
    chunked = stream_metrics(chunked_rec)
    assert chunked.n_tokens == base.n_tokens == 64
    # the rate is exact, not biased by the tokens that came with the first chunk
    assert chunked.decode_tok_s == pytest.approx(base.decode_tok_s, rel=1e-9)
    # ITLs: one per token after the first chunk, each the chunk gap split evenly
    assert len(chunked.itls) == 64 - k
    assert sorted(chunked.itls)[len(chunked.itls) // 2] == pytest.approx(0.04)


def test_chunk_gap_is_split_evenly_over_its_tokens():
    r = StreamRecord(0.0, 0.0, [1.0, 1.4, 1.5], [1, 5, 6], completion_tokens=6, end=1.5)
    m = stream_metrics(r)
    assert m.itls == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.1])
    assert m.tpot == pytest.approx(0.5 / 5)


def test_server_count_wins_over_chunk_count():
    # a final meta-only chunk reported 10 tokens although the chunks showed 8
    r = StreamRecord(0.0, 0.0, [1.0, 2.0], [4, 8], completion_tokens=10, end=2.0)
    m = stream_metrics(r)
    assert m.n_tokens == 10
    assert m.tpot == pytest.approx(1.0 / 6)
    assert len(m.itls) == 6


def test_non_increasing_counts_are_ignored_not_negative():
    r = StreamRecord(0.0, 0.0, [1.0, 1.1, 1.2, 1.3], [1, 1, 2, 2], completion_tokens=2, end=1.3)
    m = stream_metrics(r)
    assert m.itls == pytest.approx([0.2])
    assert m.tpot == pytest.approx(0.2)


def test_single_token_stream_has_ttft_but_no_tpot():
    r = StreamRecord(0.0, 0.5, [0.9], [1], completion_tokens=1, end=0.9)
    m = stream_metrics(r)
    assert m.ttft == pytest.approx(0.4)
    assert m.tpot is None
    assert m.decode_tok_s is None
    assert m.itls == []


def test_all_tokens_in_first_chunk_has_no_tpot():
    m = stream_metrics(StreamRecord(0.0, 0.0, [1.0], [8], completion_tokens=8, end=1.0))
    assert m.n_tokens == 8
    assert m.tpot is None


def test_empty_stream_has_no_latencies():
    m = stream_metrics(StreamRecord(0.0, 0.1, [], [], completion_tokens=0, end=0.2))
    assert (m.ttft, m.e2e, m.tpot, m.itls, m.n_tokens) == (None, None, None, [], 0)
    assert m.queue == pytest.approx(0.1)


def test_never_sent_request_has_no_queue_time():
    m = stream_metrics(StreamRecord(1.0, None, error="connect failed"))
    assert m.queue is None and m.ttft is None


def test_queue_time_is_send_minus_dispatch():
    m = stream_metrics(uniform_stream(5.0, 0.1, 0.01, 3, dispatch=4.25))
    assert m.queue == pytest.approx(0.75)
    assert m.ttft == pytest.approx(0.1)  # measured from send, not dispatch


def test_token_times_spread_inside_chunks():
    r = StreamRecord(0.0, 0.0, [1.0, 2.0], [2, 6], completion_tokens=6, end=2.0)
    assert token_times(r) == pytest.approx([1.0, 1.0, 1.25, 1.5, 1.75, 2.0])


def test_spread_total_is_cumulative_and_exact():
    assert spread_total(4, 8) == [2, 4, 6, 8]
    assert spread_total(3, 10)[-1] == 10
    assert spread_total(0, 10) == []
    s = spread_total(7, 100)
    assert all(b >= a for a, b in itertools.pairwise(s))


def test_percentile_interpolates_like_numpy():
    xs = [1.0, 2.0, 3.0, 4.0]
    assert percentile(xs, 50) == pytest.approx(2.5)
    assert percentile(xs, 90) == pytest.approx(3.7)
    assert percentile(xs, 0) == 1.0 and percentile(xs, 100) == 4.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile(xs, 101)


def test_summarize_scales_and_handles_empty():
    s = summarize([0.1, 0.2, 0.3], 1000.0)
    assert s["p50"] == pytest.approx(200.0)
    assert s["mean"] == pytest.approx(200.0)
    assert summarize([]) == {"p50": None, "p90": None, "p95": None, "p99": None, "mean": None,
                             "std": None}  # fmt: skip


def closed_loop(concurrency: int, waves: int, ttft: float, itl: float, n: int, per_chunk: int = 1):
    """``concurrency`` slots, each sending ``waves`` requests back to back (slot i offset a bit)."""
    recs = []
    for slot in range(concurrency):
        t = slot * 0.001
        for _ in range(waves):
            r = uniform_stream(t, ttft, itl, n, per_chunk)
            recs.append(r)
            t = r.end + 0.0005
    return recs


def test_steady_window_excludes_ramp_and_tail():
    recs = closed_loop(8, 3, ttft=0.5, itl=0.01, n=100)
    win = steady_window(recs, 8)
    assert win.kind == "steady"
    assert win.start == pytest.approx(7 * 0.001)  # last first-wave request's send
    last_send = max(r.send for r in recs)
    assert win.end >= last_send
    assert win.end == pytest.approx(min(r.end for r in recs if r.end >= last_send))


def test_aggregate_counts_only_window_tokens():
    recs = closed_loop(4, 3, ttft=0.2, itl=0.01, n=50)
    tok_s, win = aggregate_tok_s(recs, 4)
    assert tok_s == pytest.approx(tokens_in_window(recs, win.start, win.end) / win.seconds)
    # in steady state each of the 4 slots delivers ~1 token per 10 ms, minus the prefill gaps
    per_req = 0.2 + 49 * 0.01
    expected = 4 * 50 / (per_req + 0.0005)
    assert tok_s == pytest.approx(expected, rel=0.05)


def test_aggregate_is_independent_of_chunking():
    one = aggregate_tok_s(closed_loop(16, 2, 0.05, 0.01, 64), 16)[0]
    four = aggregate_tok_s(closed_loop(16, 2, 0.05, 0.01, 64, per_chunk=4), 16)[0]
    assert four == pytest.approx(one, rel=0.01)


def test_single_wave_window_runs_from_last_first_token_to_first_end():
    recs = [uniform_stream(i * 0.01, 0.1, 0.01, 20) for i in range(4)]
    win = steady_window(recs, 4)
    assert win.kind == "steady"
    assert win.start == pytest.approx(0.03)
    assert win.end == pytest.approx(recs[0].end)


def test_window_falls_back_to_full_span_when_degenerate():
    # the last request sent never ended (no end time, no token): no clean tail start
    a = uniform_stream(0.0, 0.01, 0.01, 2)
    b = StreamRecord(1.0, 1.0, error="killed")
    win = steady_window([a, b], 2)
    assert win.kind == "full"
    assert win.start == 0.0 and win.end == pytest.approx(a.end)
    # a single request: the window is its whole life
    assert steady_window([a], 1).kind == "steady"


def test_window_empty_without_tokens():
    win = steady_window([StreamRecord(0.0, None, error="refused")], 4)
    assert win.kind == "empty"
    assert aggregate_tok_s([StreamRecord(0.0, None, error="x")], 1)[0] is None


def test_level_metrics_counts_errors_and_keeps_their_tokens():
    good = closed_loop(2, 2, 0.1, 0.01, 30)
    cut = uniform_stream(0.0, 0.1, 0.01, 10)
    cut.completion_tokens = None
    cut.error = "stream cut: RemoteProtocolError"
    never = StreamRecord(0.5, None, error="connect refused")
    lm = level_metrics([*good, cut, never], 2)
    assert lm.requests == 6
    assert lm.completed == 4
    assert lm.errors == 2
    assert lm.output_tokens == 4 * 30 + 10
    assert lm.error_samples == ["stream cut: RemoteProtocolError", "connect refused"]
    assert lm.ttft_ms["p50"] == pytest.approx(100.0)
    assert lm.tpot_ms["p50"] == pytest.approx(10.0)
    assert lm.itl_ms["p99"] == pytest.approx(10.0)
    assert lm.decode_tok_s["p50"] == pytest.approx(100.0)


def test_level_metrics_all_failed():
    lm = level_metrics([StreamRecord(0.0, None, error="refused")] * 3, 4)
    assert lm.errors == 3 and lm.completed == 0
    assert lm.output_tok_s is None
    assert lm.ttft_ms["p50"] is None
    assert lm.error_samples == ["refused"]


def test_level_metrics_empty():
    lm = level_metrics([], 1)
    assert lm.requests == 0 and lm.output_tok_s is None and lm.duration_s == 0.0


@given(
    n=st.integers(min_value=2, max_value=300),
    k=st.integers(min_value=1, max_value=8),
    itl=st.floats(min_value=1e-4, max_value=0.5),
    ttft=st.floats(min_value=0.0, max_value=5.0),
)
def test_property_rate_exact_for_any_chunking(n, k, itl, ttft):
    m = stream_metrics(uniform_stream(1.0, ttft, itl, n, per_chunk=k))
    assert m.n_tokens == n
    if n > k:
        assert m.decode_tok_s == pytest.approx(1.0 / itl, rel=1e-6)
        assert sum(m.itls) == pytest.approx(m.e2e - m.ttft, rel=1e-6, abs=1e-9)
    else:
        assert m.tpot is None
    assert len(token_times(uniform_stream(1.0, ttft, itl, n, per_chunk=k))) == n


def late_first_read_stream(itl: float = 0.02, n: int = 16, late_reads: int = 6) -> StreamRecord:
    """A server emitting one token every ``itl`` (50 tok/s) to a client whose event loop was
    busy when the first chunks arrived: the first ``late_reads`` chunks sat in the socket and
    came out of one read (one ``data_received``, so one timestamp), later ones on time."""
    emit = [0.1 + i * itl for i in range(n)]
    caught_up = emit[late_reads - 1]
    times = [caught_up] * late_reads + emit[late_reads:]
    counts = list(range(1, n + 1))
    return StreamRecord(
        dispatch=0.0, send=0.0, chunk_times=times, chunk_tokens=counts, completion_tokens=n,
        end=emit[-1],
    )  # fmt: skip


def test_chunks_of_one_late_read_do_not_inflate_decode_rate():
    """68.7 tok/s reported for a 51.9 tok/s config: a late first read compressed the stream's
    decode span while its tokens still counted. Chunks read together were emitted earlier,
    at unknown times: only the read's last (freshest) count is trusted at that stamp."""
    rec = late_first_read_stream()
    m = stream_metrics(rec)
    assert m.decode_tok_s == pytest.approx(50.0)  # the server's rate, not 15 / 0.2 s = 75
    assert all(x == pytest.approx(0.02) for x in m.itls)  # no zero gaps from the burst
    assert m.ttft == pytest.approx(0.2)  # the client first saw a token at the read
    lvl = level_metrics([rec], concurrency=1)
    assert lvl.decode_tok_s["p50"] == pytest.approx(50.0)
    assert lvl.output_tokens == 16
