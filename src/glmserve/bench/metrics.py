"""Streaming benchmark metrics: client timestamps + server token counts -> latency and tok/s.

Pure: no I/O, no clocks. The client (``glmserve.bench.client``) records, per request, the
``perf_counter`` time of every streamed chunk and the server's cumulative token count after it;
this module turns those records into the numbers ``glmserve bench`` reports. Definitions (the
README copies them):

* **Token counts** come from the server (native ``meta_info.completion_tokens``, OpenAI
  ``usage.completion_tokens``), never from counting chunks or re-tokenizing text: a chunk may
  carry several tokens (stream intervals, speculative decoding). When an API gives only the final
  total (OpenAI streams without logprobs), the total is spread evenly over the content chunks.
* **Send time** is when the request headers were written to the socket; **client queue time** is
  send time minus dispatch time (when a slot handed the request to the HTTP client), so a slow
  client or a starved connection pool shows up there and not inside TTFT.
* **TTFT** = time of the first chunk carrying a token - send time.
* **E2E** = time of the last token-carrying chunk - send time.
* **Chunks of one read**: chunks that came out of one socket read carry one timestamp; the
  client read them late (the server sent them at different steps), so they count as one chunk
  with the read's last token count. Otherwise a late first read shrinks E2E - TTFT while the
  late tokens still count in n - n_first, and a stream's decode tok/s exceeds the server's.
* **ITL**: the gap between two consecutive token-carrying chunks, split evenly over the new
  tokens in the later chunk (a 4-token chunk after 40 ms gives four 10 ms ITLs). Tokens that
  arrive in the first chunk have no gap and no ITL.
* **TPOT** = (E2E - TTFT) / (n - n_first), where n is the server's completion token count and
  n_first the tokens that arrived in the first chunk. With one token per chunk this is the usual
  (E2E - TTFT) / (n - 1); with k tokens per chunk it stays exact instead of being biased by
  (k - 1) intervals. Undefined (None) when every token came in the first chunk.
* **Decode tok/s of a stream** = 1 / TPOT. The decode-mode headline is the median over streams.
* **Aggregate output tok/s** counts tokens over the *steady window* only, excluding ramp-up and
  tail. Window start = the send time of the last request of the first wave (the first
  ``concurrency`` requests, by send time): from then on every slot holds a request. Window
  end = the first stream end after the last request was sent: from then on a finishing slot
  is not refilled. In a closed loop the window thus spans whole request cycles (prefill and
  decode), so it measures what the server sustains with ``concurrency`` requests in flight.
  Token arrival times inside a chunk are spread evenly over the chunk gap (as for ITL) and a
  token counts when its arrival time lies in the window. If the window is empty (no stream
  ended after the last send), the whole span from first send to last token is used and the
  result says ``window_kind="full"``.
* **Errors**: a request that failed (HTTP error, stream cut, stall deadline) counts in
  ``errors``; its tokens still count toward aggregate throughput (the server produced them),
  but its latencies are excluded from the percentiles.
* **Percentiles** (default p50/p90/p95/p99, ``--percentiles`` picks others) use linear
  interpolation between order statistics (numpy's default), over the successful streams (ITL:
  over all their tokens); ``std`` is the population standard deviation (numpy's default, as
  bench_serving reports it).
* **Full-run figures** (bench_serving's definitions) use the *full* window, first send to last
  stream end: request throughput = completed / window, input/output/total token throughput =
  tokens of the completed requests / window, **goodput** = completed requests meeting every
  SLO (``ttft_ms``, ``tpot_ms``, ``itl_ms``, ``e2e_ms`` upper bounds) / window, and **achieved
  concurrency** = the sum of the requests' time in flight (send to end) / window, i.e. the
  mean number of requests in flight. **Achieved request rate** = (sent - 1) / (last send -
  first send). ``windows`` in each level names the window every throughput figure uses.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from glmserve.commalist import comma_list

PERCENTILES: tuple[float, ...] = (50, 90, 95, 99)
PER_REQUEST_KEYS = ("send_ms", "ttft_ms", "tpot_ms", "e2e_ms", "itl_ms", "input_tokens",
                    "output_tokens", "error")  # fmt: skip
SLO_KEYS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


@dataclass
class StreamRecord:
    """What the client saw of one request. Times are ``time.perf_counter()`` seconds.

    ``chunk_tokens[i]`` is the server's cumulative completion-token count after chunk ``i``
    (``chunk_times[i]``); only chunks that carried tokens are recorded.
    """

    dispatch: float
    send: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    completion_tokens: int | None = None  # the server's final count
    prompt_tokens: int | None = None
    end: float | None = None  # stream closed ([DONE] or error)
    error: str | None = None
    tokens_estimated: bool = False  # per-chunk counts spread from a final total
    # Prompt tokens the server served from its prefix cache: native ``meta_info.cached_tokens``
    # or OpenAI ``usage.prompt_tokens_details.cached_tokens`` (None: the server did not say).
    cached_tokens: int | None = None
    # The reply's token ids (native ``output_ids``), kept only when set to [] before the
    # request (multi-turn: the next turn's prompt carries the server's real reply).
    output_ids: list[int] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def n_tokens(self) -> int:
        """Tokens the server produced for this stream as far as the client knows."""
        if self.completion_tokens is not None:
            return self.completion_tokens
        return self.chunk_tokens[-1] if self.chunk_tokens else 0


@dataclass
class StreamMetrics:
    """Per-request latencies in seconds (None where undefined)."""

    ttft: float | None
    e2e: float | None
    tpot: float | None
    itls: list[float]
    n_tokens: int
    queue: float | None

    @property
    def decode_tok_s(self) -> float | None:
        return 1.0 / self.tpot if self.tpot else None


@dataclass
class SteadyWindow:
    start: float
    end: float
    kind: str  # "steady" | "full" | "empty"

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass
class LevelMetrics:
    """Everything reported for one concurrency level (times in milliseconds)."""

    concurrency: int
    requests: int
    completed: int
    errors: int
    output_tokens: int
    output_tok_s: float | None
    window_s: float
    window_kind: str
    window_start: float  # perf_counter bounds of the steady window (for cross-checks)
    window_end: float
    duration_s: float
    ttft_ms: dict[str, float | None]
    itl_ms: dict[str, float | None]
    tpot_ms: dict[str, float | None]
    e2e_ms: dict[str, float | None]
    queue_ms: dict[str, float | None]
    decode_tok_s: dict[str, float | None]
    error_samples: list[str] = field(default_factory=list)
    # Full-window figures (bench_serving's definitions; see the module docstring).
    request_throughput: float | None = None
    input_tok_s: float | None = None
    output_tok_s_full: float | None = None
    total_tok_s: float | None = None
    input_tokens: int = 0
    goodput: float | None = None  # requests/s meeting every SLO; None without SLOs
    good_requests: int | None = None
    slo: dict[str, float] = field(default_factory=dict)
    achieved_concurrency: float | None = None
    max_concurrency_seen: int = 0
    achieved_request_rate: float | None = None
    windows: dict[str, str] = field(default_factory=dict)
    per_request: dict[str, list] | None = None


def close_unfinished(records: Sequence[StreamRecord], now: float) -> None:
    """Records still open when a level ends (Ctrl-C, the run stopped) are failed requests:
    "interrupted" unless they already failed otherwise, ended now, so none is counted ok."""
    for rec in records:
        if rec.end is None:
            rec.error = rec.error or "interrupted"
            rec.end = now


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile (0..100) with linear interpolation; None for no values."""
    if not values:
        return None
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within 0..100, got {p}")
    xs = sorted(values)
    pos = (len(xs) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def pkey(p: float) -> str:
    """The JSON key of percentile ``p``: 50 -> "p50", 99.9 -> "p99.9"."""
    return f"p{p:g}"


def std(values: Sequence[float]) -> float | None:
    """Population standard deviation (numpy's ``std`` default); None for no values."""
    if not values:
        return None
    m = sum(values) / len(values)
    return math.sqrt(sum((x - m) ** 2 for x in values) / len(values))


def summarize(
    values: Sequence[float], scale: float = 1.0, percentiles: Sequence[float] = PERCENTILES
) -> dict[str, float | None]:
    """``{"p50":..,"p90":..,"p95":..,"p99":..,"mean":..,"std":..}`` of ``values * scale``.

    Every value is None when ``values`` is empty.
    """
    out: dict[str, float | None] = {}
    for p in percentiles:
        v = percentile(values, p)
        out[pkey(p)] = None if v is None else v * scale
    out["mean"] = (sum(values) / len(values)) * scale if values else None
    sd = std(values)
    out["std"] = None if sd is None else sd * scale
    return out


def parse_percentiles(text: str, flag: str = "--percentiles") -> tuple[float, ...]:
    """``"50,90,95,99"`` -> (50.0, 90.0, 95.0, 99.0); ValueError names the bad item (an empty
    item is ``glmserve.commalist``'s ConfigError naming ``flag``)."""
    out = []
    for item in comma_list(text, flag, "50,90,99"):  # "50,,99": a typo, refused
        p = float(item)
        if not 0 < p <= 100:  # 100 is the maximum (bench_serving reports a max ITL)
            raise ValueError(f"percentile {item.strip()} is not within (0, 100]")
        out.append(p)
    if not out:
        raise ValueError("no percentile given")
    return tuple(sorted(set(out)))


def parse_slo(text: str, flag: str = "--slo") -> dict[str, float]:
    """``"ttft_ms=200,tpot_ms=50"`` -> {"ttft_ms": 200.0, "tpot_ms": 50.0}; ValueError says why
    (a non-finite or non-positive bound, a key given twice)."""
    out: dict[str, float] = {}
    for item in comma_list(text, flag, "ttft_ms=200,tpot_ms=50"):
        key, sep, val = item.partition("=")
        key = key.strip()
        if not sep or key not in SLO_KEYS:
            raise ValueError(
                f"{item.strip()!r}: expected KEY=MS with KEY one of {', '.join(SLO_KEYS)}"
            )
        try:
            bound = float(val)
        except ValueError:
            raise ValueError(f"{key}: expected milliseconds, got {val.strip()!r}") from None
        # NaN compares false with every latency: a NaN bound counted every request as good
        if not math.isfinite(bound) or bound <= 0:
            raise ValueError(f"{key}: the bound must be a positive number of ms, got {val.strip()}")
        if key in out:
            raise ValueError(f"{key} given twice")
        out[key] = bound
    return out


def meets_slo(m: StreamMetrics, slo: dict[str, float]) -> bool:
    """A successful stream meets every SLO bound (ms). ``itl_ms`` bounds the stream's worst
    gap; ``tpot_ms`` is vacuous for a stream with no decode step (as in bench_serving)."""
    values = {
        "ttft_ms": m.ttft,
        "tpot_ms": m.tpot if m.tpot is not None else 0.0,
        "itl_ms": max(m.itls) if m.itls else 0.0,
        "e2e_ms": m.e2e,
    }
    for key, bound in slo.items():
        v = values.get(key)
        if v is None or v * 1000.0 > bound:
            return False
    return True


def spread_total(chunk_count: int, total: int) -> list[int]:
    """Cumulative per-chunk token counts when only the stream's ``total`` is known.

    Spreads ``total`` as evenly as integers allow, earlier chunks never ahead of later ones:
    the approximation used for OpenAI-style streams that carry no per-chunk counts.
    """
    if chunk_count <= 0:
        return []
    return [round(total * (i + 1) / chunk_count) for i in range(chunk_count)]


def _clean_chunks(rec: StreamRecord) -> tuple[list[float], list[int]]:
    """Chunks with strictly increasing cumulative counts, capped at the server's final count.

    Chunks stamped with the same time came out of one socket read: the client was late for
    all but the last of them, whose emission times are unknown, so they merge into one chunk
    carrying the read's last count (a late first read otherwise shrank the decode span while
    its tokens still counted: 68.7 tok/s reported for a 51.9 tok/s config).
    """
    times: list[float] = []
    counts: list[int] = []
    last = 0
    cap = rec.completion_tokens
    for t, c in zip(rec.chunk_times, rec.chunk_tokens, strict=False):
        if cap is not None:
            c = min(c, cap)
        if c > last:
            if times and t == times[-1]:
                counts[-1] = c
            else:
                times.append(t)
                counts.append(c)
            last = c
    if cap is not None and times and counts[-1] < cap and rec.ok:
        # The server says more tokens were produced than the chunks showed (a final chunk
        # with only meta_info): they arrived with the last chunk.
        counts[-1] = cap
    return times, counts


def stream_metrics(rec: StreamRecord) -> StreamMetrics:
    """TTFT, E2E, TPOT and ITLs of one stream, per the module definitions."""
    queue = rec.send - rec.dispatch if rec.send is not None else None
    times, counts = _clean_chunks(rec)
    n = counts[-1] if counts else 0
    if rec.send is None or not times:
        return StreamMetrics(None, None, None, [], n, queue)
    ttft = times[0] - rec.send
    e2e = times[-1] - rec.send
    n_first = counts[0]
    tpot = (e2e - ttft) / (n - n_first) if n > n_first else None
    itls: list[float] = []
    for i in range(1, len(times)):
        k = counts[i] - counts[i - 1]
        gap = times[i] - times[i - 1]
        itls.extend([gap / k] * k)
    return StreamMetrics(ttft, e2e, tpot, itls, n, queue)


def token_times(rec: StreamRecord) -> list[float]:
    """Arrival time of every token: first-chunk tokens at its time, later ones spread evenly."""
    times, counts = _clean_chunks(rec)
    out: list[float] = []
    prev_t: float | None = None
    prev_c = 0
    for t, c in zip(times, counts, strict=True):
        k = c - prev_c
        if prev_t is None:
            out.extend([t] * k)
        else:
            gap = t - prev_t
            out.extend(prev_t + gap * (j + 1) / k for j in range(k))
        prev_t, prev_c = t, c
    return out


def steady_window(records: Sequence[StreamRecord], concurrency: int) -> SteadyWindow:
    """The interval where all ``concurrency`` slots were decoding (see module docstring)."""
    sent = sorted((r for r in records if r.send is not None), key=lambda r: r.send or 0.0)
    all_tok = [t for r in sent for t in token_times(r)]
    if not sent or not all_tok:
        return SteadyWindow(0.0, 0.0, "empty")
    full = SteadyWindow(min(r.send for r in sent if r.send is not None), max(all_tok), "full")
    first_wave = sent[: max(1, concurrency)]
    start = first_wave[-1].send or 0.0
    last_send = sent[-1].send or 0.0
    ends = [_last_time(r) for r in sent]
    after = [e for e in ends if e is not None and e >= last_send]
    if not after:
        return full
    end = min(after)
    if end <= start:
        return full
    return SteadyWindow(start, end, "steady")


def _last_time(rec: StreamRecord) -> float | None:
    if rec.end is not None:
        return rec.end
    return rec.chunk_times[-1] if rec.chunk_times else None


def tokens_in_window(records: Iterable[StreamRecord], start: float, end: float) -> int:
    """Tokens whose arrival time lies in ``[start, end]``."""
    n = 0
    for r in records:
        ts = token_times(r)
        n += bisect_right(ts, end) - bisect_left(ts, start)
    return n


def aggregate_tok_s(
    records: Sequence[StreamRecord], concurrency: int
) -> tuple[float | None, SteadyWindow]:
    """Aggregate output tok/s over the steady window, and the window used."""
    win = steady_window(records, concurrency)
    if win.seconds <= 0:
        return None, win
    return tokens_in_window(records, win.start, win.end) / win.seconds, win


def max_in_flight(records: Sequence[StreamRecord]) -> int:
    """The most requests in flight (sent, not yet ended) at any one time."""
    events = []
    for r in records:
        last = _last_time(r)
        if r.send is not None and last is not None:
            events += [(r.send, 1), (last, -1)]
    best = cur = 0
    for _, d in sorted(events, key=lambda e: (e[0], e[1])):
        cur += d
        best = max(best, cur)
    return best


def _full_figures(
    records: Sequence[StreamRecord], ok: list[StreamMetrics], duration: float, slo: dict
) -> dict:
    """bench_serving-style figures over the full window (see the module docstring)."""
    done = [r for r in records if r.ok]
    out_tok = sum(r.n_tokens for r in done)
    in_tok = sum(r.prompt_tokens or 0 for r in done)
    sends = sorted(r.send for r in records if r.send is not None)
    busy = sum(
        last - r.send for r in records if r.send is not None and (last := _last_time(r)) is not None
    )
    rate = (
        (len(sends) - 1) / (sends[-1] - sends[0])
        if len(sends) > 1 and sends[-1] > sends[0]
        else None
    )

    def per_s(x: float) -> float | None:
        return x / duration if duration > 0 else None

    good = sum(1 for m in ok if meets_slo(m, slo)) if slo else None
    return {
        "request_throughput": per_s(len(done)),
        "input_tok_s": per_s(in_tok),
        "output_tok_s_full": per_s(out_tok),
        "total_tok_s": per_s(in_tok + out_tok),
        "input_tokens": in_tok,
        "goodput": per_s(good) if good is not None else None,
        "good_requests": good,
        "slo": dict(slo),
        "achieved_concurrency": per_s(busy),
        "max_concurrency_seen": max_in_flight(records),
        "achieved_request_rate": rate,
    }


def per_request_arrays(records: Sequence[StreamRecord]) -> dict[str, list]:
    """One entry per request, in send order (times in ms; send relative to the first send)."""
    recs = sorted(records, key=lambda r: r.send if r.send is not None else r.dispatch)
    t0 = min((r.send for r in recs if r.send is not None), default=0.0)
    ms = 1000.0
    out: dict[str, list] = {k: [] for k in PER_REQUEST_KEYS}
    for r in recs:
        m = stream_metrics(r)
        out["send_ms"].append(None if r.send is None else (r.send - t0) * ms)
        out["ttft_ms"].append(None if m.ttft is None else m.ttft * ms)
        out["tpot_ms"].append(None if m.tpot is None else m.tpot * ms)
        out["e2e_ms"].append(None if m.e2e is None else m.e2e * ms)
        out["itl_ms"].append([x * ms for x in m.itls])
        out["input_tokens"].append(r.prompt_tokens)
        out["output_tokens"].append(r.n_tokens)
        out["error"].append(r.error)
    return out


def level_metrics(
    records: Sequence[StreamRecord],
    concurrency: int,
    percentiles: Sequence[float] = PERCENTILES,
    slo: dict[str, float] | None = None,
    per_request: bool = False,
    window: str = "steady",
) -> LevelMetrics:
    """Summarize one level: percentiles over successful streams, errors, tok/s.

    ``window="steady"`` (closed loop) measures ``output_tok_s`` over the steady window;
    ``window="full"`` (open loop, where there is no first wave to wait for) over the full one.
    """
    ok = [stream_metrics(r) for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    if window == "steady":
        tok_s, win = aggregate_tok_s(records, concurrency)
    else:
        win = full_window(records)
        n_win = tokens_in_window(records, win.start, win.end)
        tok_s = n_win / win.seconds if win.seconds > 0 else None
    starts = [r.send for r in records if r.send is not None] or [r.dispatch for r in records]
    lasts = [t for r in records if (t := _last_time(r)) is not None]
    duration = (max(lasts) - min(starts)) if starts and lasts else 0.0
    samples: list[str] = []
    for r in failed:
        if r.error and r.error not in samples:
            samples.append(r.error)
    ms = 1000.0
    pct = tuple(sorted({*percentiles, 50}))  # p50 is every headline's figure
    full = _full_figures(records, ok, max(0.0, duration), slo or {})
    windows = {k: "full" for k in ("request_throughput", "input_tok_s", "output_tok_s_full",
                                   "total_tok_s", "goodput", "achieved_concurrency")}  # fmt: skip
    windows["output_tok_s"] = win.kind
    windows["decode_tok_s"] = "per-stream"
    return LevelMetrics(
        **full,
        windows=windows,
        per_request=per_request_arrays(records) if per_request else None,
        concurrency=concurrency,
        requests=len(records),
        completed=len(ok),
        errors=len(failed),
        output_tokens=sum(r.n_tokens for r in records),
        output_tok_s=tok_s,
        window_s=win.seconds,
        window_kind=win.kind,
        window_start=win.start,
        window_end=win.end,
        duration_s=max(0.0, duration),
        ttft_ms=summarize([m.ttft for m in ok if m.ttft is not None], ms, pct),
        itl_ms=summarize([x for m in ok for x in m.itls], ms, pct),
        tpot_ms=summarize([m.tpot for m in ok if m.tpot is not None], ms, pct),
        e2e_ms=summarize([m.e2e for m in ok if m.e2e is not None], ms, pct),
        queue_ms=summarize([m.queue for m in ok if m.queue is not None], ms, pct),
        decode_tok_s=summarize([d for m in ok if (d := m.decode_tok_s) is not None], 1.0, pct),
        error_samples=samples[:5],
    )


def full_window(records: Sequence[StreamRecord]) -> SteadyWindow:
    """First send to last token: the window of an open-loop level (no first wave to wait for)."""
    sends = [r.send for r in records if r.send is not None]
    toks = [t for r in records for t in token_times(r)]
    if not sends or not toks:
        return SteadyWindow(0.0, 0.0, "empty")
    return SteadyWindow(min(sends), max(toks), "full")
