"""What the analysis reads from one Chrome-trace event, whichever exporter wrote it.

kineto's output varies by PyTorch release (categories spelled ``Kernel`` or ``kernel``,
timestamps quoted by some exporters, ids missing), so a field is coerced here or reads as
None, and the caller counts and skips the event: a field we do not know is not an error.
``OpSpan`` and ``KernelSpan`` are the little the accumulator keeps of an event, so memory
grows with the number of events but not with their JSON size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
# Older kineto (PyTorch 1.8-1.9) and other exporters spell the categories differently.
_CAT_ALIASES = {
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "runtime": "cuda_runtime",
    "driver": "cuda_driver",
    "operator": "cpu_op",
    "python": "python_function",
    "hip_runtime": "cuda_runtime",
}


@dataclass(slots=True)
class OpSpan:
    """One CPU op as kept from the trace: its span, thread, ``External id`` and shape args."""

    ts: float
    end: float
    pid: Any
    tid: Any
    name: str
    ext_id: int | None
    args: dict[str, Any]


# One GPU activity: ts, dur, name, category, External id, correlation, device.
KernelSpan = tuple[float, float, str, str, "int | None", "int | None", "int | None"]


def as_int(v: Any) -> int | None:
    """An id or rank: anything ``int()`` takes, else None."""
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError, OverflowError):
        return None


def as_num(v: Any) -> float | None:
    """A timestamp or duration: a number, or a numeric string (some exporters quote them)."""
    if isinstance(v, bool):
        return None
    if not isinstance(v, (int, float, str)):
        return None
    try:
        f = float(v)
    except (ValueError, OverflowError):  # "abc"; an int of 400 digits is past any float
        return None
    return f if f == f and abs(f) != float("inf") else None


# Chrome-trace times are microseconds: kineto's ``ts`` is since the epoch (1.7e15 in 2024) or
# since boot (5e12), a decode step's ``dur`` milliseconds. A ``ts`` past MAX_TS_US (year ~5100)
# or a ``dur`` past MAX_DUR_US (a day) is no profiler's: 1e308 overflowed ``ts + dur`` to inf and
# printed "idle nan%". Such an event is skipped and counted like one with no time at all.
MAX_TS_US = 1e17
MAX_DUR_US = 86_400e6


def as_ts(v: Any) -> float | None:
    """An event's ``ts``: a number (or numeric string) within +-MAX_TS_US, else None."""
    f = as_num(v)
    return f if f is not None and abs(f) <= MAX_TS_US else None


def as_dur(v: Any) -> float | None:
    """An event's ``dur``: a number (or numeric string) in [0, MAX_DUR_US], else None (a
    missing, null, negative or absurd duration)."""
    f = as_num(v)
    return f if f is not None and 0 <= f <= MAX_DUR_US else None


def category(raw: Any) -> str:
    """The event's ``cat`` in kineto's current lower-case spelling."""
    cat = str(raw).lower() if raw is not None else ""
    return _CAT_ALIASES.get(cat, cat)
