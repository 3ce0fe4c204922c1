"""The rate sweep (guidellm's) and its saturation rule: which rates to offer, which were kept up.

``--rate-sweep N`` first measures the synchronous request rate (one request at a time) and the
throughput rate (everything at once), then offers N rates evenly spaced between them, open
loop. Each offered level is then judged by one explicit rule (``SATURATION``, recorded with the
sweep's result). A level offered R req/s is **saturated** when any of these holds:

* ``behind``: requests were *sent* at less than 90% of R (``achieved_request_rate``): the
  ``--max-concurrency`` cap was full, or the client could not keep the schedule;
* ``backlog``: requests *finished* at less than 90% of R (``completion_rate``, the departures'
  counterpart of ``achieved_request_rate``): more arrive than leave, so a queue builds up;
* ``ttft``: from its first quarter of requests (by send time) to its last, the median TTFT grew
  by more than half the first quarter's median E2E (``ttft_growth`` > 0.5): requests wait
  longer and longer before their first token. Under a load the server keeps up with this stays
  near 0 (step jitter is a small part of a request's service time); a growing queue adds whole
  service times;
* ``e2e``: the median E2E of its last quarter is more than 1.5x its first quarter's
  (``e2e_trend``): requests take longer and longer end to end.

A figure that could not be measured (too few requests) decides nothing. ``rate`` is the
highest offered rate below the lowest saturated one. The sweep uses fixed lengths by default
(see ``BenchSettings.range_ratio``): the latency trends compare requests of one shape. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from glmserve.bench.metrics import StreamRecord, percentile, stream_metrics

SATURATION: dict[str, float] = {
    "min_rate_fraction": 0.9,  # behind / backlog: sent or finished below 90% of the offer
    "max_ttft_growth": 0.5,  # ttft: median TTFT grew by > half a first-quarter E2E
    "max_e2e_trend": 1.5,  # e2e: last quarter's median E2E > 1.5x the first quarter's
}
MIN_TREND_REQUESTS = 8  # fewer: no quarters to compare


def sweep_rates(low: float, high: float, count: int) -> list[float]:
    """``count`` rates evenly spaced strictly between ``low`` and ``high`` (guidellm's sweep)."""
    if not high > low > 0:
        return [low] if low > 0 else []
    step = (high - low) / (count + 1)
    return [round(low + step * (i + 1), 4) for i in range(count)]


def level_plan(settings: Any, done: list[dict[str, Any]]) -> Iterator[tuple[int, Any]]:
    """The levels to run, in order: ``settings.level_points()``, then for a rate sweep the
    ``--rate-sweep`` rates between the synchronous and throughput levels' request throughput;
    ``done`` (the summaries so far) is read lazily, level by level."""
    points = settings.level_points()
    yield from points
    if not settings.rate_sweep or len(done) < 2:
        return
    low = done[0].get("request_throughput") or 0.0
    high = done[1].get("request_throughput") or 0.0
    for r in sweep_rates(low, high, settings.rate_sweep):
        yield points[1][0], r


def _quarters(records: Sequence[StreamRecord]) -> tuple[list[Any], list[Any]] | None:
    """Stream metrics of the first and last quarter of successful requests, by send time."""
    ok = sorted((r for r in records if r.ok and r.send is not None), key=lambda r: r.send or 0.0)
    if len(ok) < MIN_TREND_REQUESTS:
        return None
    q = len(ok) // 4
    return [stream_metrics(r) for r in ok[:q]], [stream_metrics(r) for r in ok[-q:]]


def _median(ms: list[Any], attr: str) -> float | None:
    return percentile([v for m in ms if (v := getattr(m, attr)) is not None], 50)


def e2e_trend(records: Sequence[StreamRecord]) -> float | None:
    """Median E2E of the last quarter of successful requests (by send time) over that of the
    first quarter: about 1 under a load the server keeps up with, growing when requests queue.
    None with fewer than 8 requests."""
    qs = _quarters(records)
    if qs is None:
        return None
    first, last = _median(qs[0], "e2e"), _median(qs[1], "e2e")
    return last / first if first and last is not None else None


def ttft_growth(records: Sequence[StreamRecord]) -> float | None:
    """(median TTFT of the last quarter - that of the first) / the first quarter's median E2E:
    how many service times the wait for a first token grew by. None with fewer than 8."""
    qs = _quarters(records)
    if qs is None:
        return None
    t0, t1, e2e = _median(qs[0], "ttft"), _median(qs[1], "ttft"), _median(qs[0], "e2e")
    return (t1 - t0) / e2e if t0 is not None and t1 is not None and e2e else None


def completion_rate(records: Sequence[StreamRecord]) -> float | None:
    """(completed - 1) / (last end - first end) of the successful requests: the rate at which
    they left, as ``achieved_request_rate`` is the rate at which they were sent."""
    ends = sorted(r.end for r in records if r.ok and r.end is not None)
    if len(ends) < 2 or ends[-1] <= ends[0]:
        return None
    return (len(ends) - 1) / (ends[-1] - ends[0])


def saturated_by(level: dict[str, Any], rule: dict[str, float] = SATURATION) -> list[str]:
    """Which parts of the rule (see the module docstring) an open-loop level breaks."""
    rate = level.get("request_rate")
    if not isinstance(rate, (int, float)) or not math.isfinite(rate):
        return []
    floor = rule["min_rate_fraction"] * rate
    checks = (
        ("behind", level.get("achieved_request_rate"), lambda v: v < floor),
        ("backlog", level.get("completion_rate"), lambda v: v < floor),
        ("ttft", level.get("ttft_growth"), lambda v: v > rule["max_ttft_growth"]),
        ("e2e", level.get("e2e_trend"), lambda v: v > rule["max_e2e_trend"]),
    )
    return [name for name, value, broken in checks if value is not None and broken(value)]


def saturation(levels: list[dict[str, Any]]) -> dict[str, Any]:
    """The sweep's verdict: each offered rate with its figures and what saturated it, the
    highest rate kept up with (``rate``), the throughput level's rate, and the rule used."""
    marks = []
    for lv in levels:
        rate = lv.get("request_rate")
        if not isinstance(rate, (int, float)):
            continue
        why = saturated_by(lv)
        marks.append({"rate": rate, "achieved_request_rate": lv.get("achieved_request_rate"),
                      "completion_rate": lv.get("completion_rate"),
                      "ttft_growth": lv.get("ttft_growth"), "e2e_trend": lv.get("e2e_trend"),
                      "saturated": bool(why), "saturated_by": why})  # fmt: skip
    marks.sort(key=lambda m: m["rate"])
    ok = None
    for m in marks:
        if m["saturated"]:
            break
        ok = m["rate"]
    thr = next((lv.get("request_throughput") for lv in levels if lv.get("request_rate") == "inf"),
               None)  # fmt: skip
    return {"rates": marks, "rate": ok, "max_request_throughput": thr, "rule": dict(SATURATION)}
