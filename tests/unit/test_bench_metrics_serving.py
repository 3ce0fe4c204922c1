"""Issue 14 metrics on hand-built timestamps: full-window throughputs, goodput, std and
percentiles, achieved concurrency and request rate, per-request arrays, and the open-loop
arrival schedule (its inter-arrival distribution checked statistically)."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from scipy import stats

from glmserve.bench.loops import arrival_offsets
from glmserve.bench.metrics import (
    StreamRecord,
    level_metrics,
    meets_slo,
    parse_percentiles,
    parse_slo,
    stream_metrics,
    summarize,
)


def stream(send: float, ttft: float, itl: float, n: int, prompt: int = 10) -> StreamRecord:
    times = [send + ttft + i * itl for i in range(n)]
    return StreamRecord(
        dispatch=send,
        send=send,
        chunk_times=times,
        chunk_tokens=list(range(1, n + 1)),
        completion_tokens=n,
        prompt_tokens=prompt,
        end=times[-1],
    )


def test_summarize_reports_std_and_requested_percentiles():
    s = summarize([1.0, 2.0, 3.0, 4.0], 1000.0, (50, 95, 99.9))
    assert s["p50"] == pytest.approx(2500.0)
    assert s["p95"] == pytest.approx(1000.0 * (3 + 0.85))  # linear interpolation
    assert s["p99.9"] == pytest.approx(1000.0 * (3 + 0.997))
    assert s["std"] == pytest.approx(1000.0 * statistics.pstdev([1, 2, 3, 4]))
    assert summarize([1.0, 2.0])["p95"] is not None  # p95 is in the default set


def test_full_window_throughputs_on_hand_built_requests():
    # Two requests: [0, 0.1+0.9=1.0] and [1.0, 1.0+0.1+0.9=2.0]; 10 tokens, 10 prompt tokens.
    recs = [stream(0.0, 0.1, 0.1, 10), stream(1.0, 0.1, 0.1, 10)]
    lm = level_metrics(recs, 1)
    assert lm.duration_s == pytest.approx(2.0)
    assert lm.request_throughput == pytest.approx(1.0)
    assert lm.output_tok_s_full == pytest.approx(10.0)
    assert lm.input_tok_s == pytest.approx(10.0)
    assert lm.total_tok_s == pytest.approx(20.0)
    assert lm.achieved_concurrency == pytest.approx(1.0)  # one request always in flight
    assert lm.max_concurrency_seen == 1
    assert lm.achieved_request_rate == pytest.approx(1.0)
    assert lm.windows["request_throughput"] == "full"
    assert lm.windows["output_tok_s"] in ("steady", "full")
    assert lm.goodput is None  # no SLO given


def test_achieved_concurrency_counts_overlap():
    recs = [stream(0.0, 0.1, 0.1, 10), stream(0.0, 0.1, 0.1, 10), stream(0.5, 0.1, 0.1, 6)]
    lm = level_metrics(recs, 3)
    # busy time 1.0 + 1.0 + 0.6 over the window 0..1.1
    assert lm.achieved_concurrency == pytest.approx(2.6 / 1.1)
    assert lm.max_concurrency_seen == 3


def test_goodput_counts_requests_meeting_every_slo():
    fast = stream(0.0, 0.05, 0.01, 11)  # TTFT 50 ms, TPOT 10 ms
    slow_first = stream(0.0, 0.5, 0.01, 11)  # TTFT 500 ms
    slow_decode = stream(0.0, 0.05, 0.05, 11)  # TPOT 50 ms
    failed = StreamRecord(dispatch=0.0, send=0.0, error="cut")
    recs = [fast, slow_first, slow_decode, failed]
    lm = level_metrics(recs, 4, slo={"ttft_ms": 100, "tpot_ms": 20})
    assert lm.good_requests == 1
    assert lm.goodput == pytest.approx(1 / lm.duration_s)
    assert lm.slo == {"ttft_ms": 100, "tpot_ms": 20}
    only_ttft = level_metrics(recs, 4, slo={"ttft_ms": 100})
    assert only_ttft.good_requests == 2
    assert meets_slo(stream_metrics(fast), {"itl_ms": 10.5, "e2e_ms": 151})
    assert not meets_slo(stream_metrics(fast), {"e2e_ms": 149})


def test_per_request_arrays_are_opt_in_and_in_send_order():
    recs = [stream(1.0, 0.2, 0.1, 3), stream(0.0, 0.1, 0.1, 2)]
    assert level_metrics(recs, 2).per_request is None
    pr = level_metrics(recs, 2, per_request=True).per_request
    assert pr["send_ms"] == pytest.approx([0.0, 1000.0])
    assert pr["ttft_ms"] == pytest.approx([100.0, 200.0])
    assert pr["output_tokens"] == [2, 3]
    assert pr["itl_ms"][1] == pytest.approx([100.0, 100.0])


def test_open_window_spans_first_send_to_last_token():
    recs = [stream(0.0, 0.1, 0.1, 10), stream(0.5, 0.1, 0.1, 10)]
    lm = level_metrics(recs, 0, window="full")
    assert lm.window_kind == "full"
    assert (lm.window_start, lm.window_end) == pytest.approx((0.0, 1.5))
    assert lm.output_tok_s == pytest.approx(20 / 1.5)


def test_slo_and_percentile_flags_parse_or_say_why():
    assert parse_slo("ttft_ms=200,tpot_ms=50") == {"ttft_ms": 200.0, "tpot_ms": 50.0}
    with pytest.raises(ValueError, match="ttft"):
        parse_slo("ttft=200")
    with pytest.raises(ValueError, match="positive"):
        parse_slo("ttft_ms=0")
    assert parse_percentiles("99,50,95") == (50.0, 95.0, 99.0)
    with pytest.raises(ValueError, match="within"):
        parse_percentiles("100.5")
    assert parse_percentiles("50,100") == (50.0, 100.0)  # 100: the maximum (max ITL)


def test_poisson_arrivals_are_exponential_with_the_asked_rate():
    a = arrival_offsets(2000, 20.0, 1.0, seed=7)
    gaps = [b - x for x, b in itertools.pairwise(a)]
    assert a[0] == 0.0
    assert (len(a) - 1) / a[-1] == pytest.approx(20.0, rel=1e-9)  # offered rate exact
    # Kolmogorov-Smirnov against Exp(mean 1/20): a wrong shape (constant, uniform) fails it
    assert stats.kstest(gaps, "expon", args=(0, 1 / 20)).pvalue > 0.01
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, abs=0.08)


def test_gamma_burstiness_changes_the_shape_not_the_rate():
    k = 0.25  # bursty: coefficient of variation 1/sqrt(k) = 2
    a = arrival_offsets(4000, 10.0, k, seed=3)
    gaps = [b - x for x, b in itertools.pairwise(a)]
    assert statistics.mean(gaps) == pytest.approx(0.1, rel=1e-9)
    assert stats.kstest(gaps, "gamma", args=(k, 0, 0.1 / k)).pvalue > 0.01
    assert stats.kstest(gaps, "expon", args=(0, 0.1)).pvalue < 1e-6  # not Poisson
    cv = statistics.pstdev(gaps) / statistics.mean(gaps)
    assert cv == pytest.approx(1 / math.sqrt(k), rel=0.1)


def test_unscaled_schedule_is_bench_servings_sample():
    raw = arrival_offsets(200, 20.0, 1.0, seed=1, exact=False)
    assert (len(raw) - 1) / raw[-1] != pytest.approx(20.0, rel=1e-3)
    assert arrival_offsets(5, math.inf, 1.0, 0) == [0.0] * 5
