"""Time spans of a trace: nesting, overlap and the share of a window a time takes.

Decode steps, python frames and op spans are (start, end) intervals on one thread; the
questions asked of them (which frames are outermost, which lie inside another, how long their
union is, which op encloses a launch) are answered here in sorted sweeps, since a scan per
question would be quadratic on a GB trace.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from typing import Any

from glmserve.profiling.events import OpSpan


def share(part: float, window: float) -> float:
    """``part`` as a fraction of ``window`` (0 for an empty window)."""
    return part / window if window > 0 else 0.0


def union_length(spans: list[tuple[float, float]]) -> float:
    """Total length covered by sorted ``spans``, overlaps counted once."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total


def outermost(frames: list[tuple[Any, Any, float, float]]) -> list[tuple[float, float]]:
    """Spans of frames not nested in another frame of the same thread."""
    kept: list[tuple[float, float]] = []
    last: dict[tuple[Any, Any], float] = {}
    for pid, tid, ts, end in sorted(frames, key=lambda f: (f[2], -f[3])):
        if ts < last.get((pid, tid), float("-inf")):
            continue
        last[(pid, tid)] = end
        kept.append((ts, end))
    return sorted(kept)


def not_within(
    frames: list[tuple[Any, Any, float, float]], outer: list[tuple[Any, Any, float, float]]
) -> list[tuple[Any, Any, float, float]]:
    """``frames`` not nested in an ``outer`` frame of the same thread: a runner's replay
    called from forward_extend is part of that prefill, not a decode step."""
    spans: dict[tuple[Any, Any], list[tuple[float, float]]] = defaultdict(list)
    for pid, tid, ts, end in outer:
        spans[(pid, tid)].append((ts, end))
    starts: dict[tuple[Any, Any], list[float]] = {}
    ends: dict[tuple[Any, Any], list[float]] = {}
    for key, lst in spans.items():
        merged = outermost([(None, None, ts, end) for ts, end in lst])
        starts[key], ends[key] = [s for s, _ in merged], [e for _, e in merged]
    kept = []
    for f in frames:
        key = (f[0], f[1])
        i = bisect_right(starts.get(key, []), f[2]) - 1
        if i < 0 or ends[key][i] < f[3]:
            kept.append(f)
    return kept


class Enclosing:
    """Innermost op on a thread that encloses a timestamp (for correlation-only launches)."""

    def __init__(self, ops: list[OpSpan]) -> None:
        self._by_thread: dict[tuple[Any, Any], list[OpSpan]] = defaultdict(list)
        for op in ops:
            self._by_thread[(op.pid, op.tid)].append(op)
        for lst in self._by_thread.values():
            lst.sort(key=lambda o: (o.ts, -o.end))

    def find(self, pid: Any, tid: Any, ts: float) -> OpSpan | None:
        return self.find_all([(pid, tid, ts)])[0]

    def find_all(self, queries: list[tuple[Any, Any, float] | None]) -> list[OpSpan | None]:
        """Answer every query in one sweep per thread: O((ops + queries) log) in all, where
        a scan per query would be quadratic on a GB trace."""
        out: list[OpSpan | None] = [None] * len(queries)
        per_thread: dict[tuple[Any, Any], list[tuple[float, int]]] = defaultdict(list)
        for i, q in enumerate(queries):
            if q is not None:
                per_thread[(q[0], q[1])].append((q[2], i))
        for key, qs in per_thread.items():
            ops = self._by_thread.get(key, [])
            qs.sort()
            stack: list[OpSpan] = []
            j = 0
            for ts, i in qs:
                while j < len(ops) and ops[j].ts <= ts:
                    while stack and stack[-1].end < ops[j].ts:
                        stack.pop()
                    stack.append(ops[j])
                    j += 1
                while stack and stack[-1].end < ts:
                    stack.pop()
                out[i] = stack[-1] if stack else None
        return out
