"""Ground truth from the simulator's ``GET /sim/trace``, to check what ``bench`` measures.

The simulator records, per request, the ``time.perf_counter`` time at which each token's chunk
was written to the socket (``emit_times``). On one Linux machine perf_counter is
CLOCK_MONOTONIC in every process, so these times share the client's time base and the same
definitions as ``glmserve.bench.metrics`` can be applied to them directly. Pure: trace dict in,
numbers out (used by the accuracy tests and ``benchmarks/bench_client_capacity.py``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any

from glmserve.bench.metrics import StreamRecord, percentile, stream_metrics


def trace_records(trace: dict[str, Any], since: float | None = None) -> list[StreamRecord]:
    """Each traced request as the ideal client would have recorded it (zero network delay).

    Chunks are the distinct emission times; send time is the server's arrival time. With
    ``since``, requests that arrived earlier (e.g. warmup) are left out.
    """
    out = []
    for req in (trace.get("requests") or {}).values():
        arrival = float(req.get("arrival") or 0.0)
        if since is not None and arrival < since:
            continue
        emits = [float(t) for t in req.get("emit_times") or []]
        times: list[float] = []
        counts: list[int] = []
        for i, t in enumerate(emits):
            if times and t == times[-1]:
                counts[-1] = i + 1
            else:
                times.append(t)
                counts.append(i + 1)
        out.append(
            StreamRecord(
                dispatch=arrival,
                send=arrival,
                chunk_times=times,
                chunk_tokens=counts,
                completion_tokens=int(req.get("completion_tokens") or len(emits)),
                end=times[-1] if times else arrival,
            )
        )
    return out


def truth_decode_tok_s(trace: dict[str, Any], since: float | None = None) -> float | None:
    """Median over traced requests of the per-stream decode tok/s (1 / TPOT)."""
    rates = [
        d for r in trace_records(trace, since) if (d := stream_metrics(r).decode_tok_s) is not None
    ]
    return percentile(rates, 50)


def truth_itl_p50(trace: dict[str, Any], since: float | None = None) -> float | None:
    """Median inter-token latency (seconds) over all traced tokens."""
    itls = [x for r in trace_records(trace, since) for x in stream_metrics(r).itls]
    return percentile(itls, 50)


def truth_tokens_in_window(trace: dict[str, Any], start: float, end: float) -> int:
    """Tokens the server emitted (wrote to a socket) within ``[start, end]``."""
    n = 0
    for req in (trace.get("requests") or {}).values():
        emits = req.get("emit_times") or []
        n += bisect_right(emits, end) - bisect_left(emits, start)
    return n


def truth_tok_s(trace: dict[str, Any], start: float, end: float) -> float | None:
    """Aggregate output tok/s the server really emitted over ``[start, end]``."""
    if end <= start:
        return None
    return truth_tokens_in_window(trace, start, end) / (end - start)


def mean_decode_batch(trace: dict[str, Any], start: float, end: float) -> float | None:
    """Average batch of the decode steps that ended within ``[start, end]`` (load check)."""
    batches = [
        int(s["batch"])
        for s in trace.get("steps") or []
        if s.get("kind") == "decode" and start <= float(s["end"]) <= end
    ]
    return sum(batches) / len(batches) if batches else None
