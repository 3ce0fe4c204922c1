"""Medians and 95% intervals over a bench's repeats (pure).

Every figure of a repeated bench is the **median** of its repeats with a **95% percentile
bootstrap interval** of that median (``BOOT`` resamples of the repeats with replacement, a
fixed seed, so a stored result re-renders the same). A speedup is the ratio of two medians
with the bootstrap interval of that ratio (each side resampled independently). With 5
repeats the interval of one median is about [min, max] of the repeats; with 3 it is exactly
that. One run has no interval: nothing can be said about its noise.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

BOOT = 4000
SEED = 22
CONF = 0.95
METHOD = "bootstrap-median-95"


def median(values: Sequence[float]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _pct(sorted_vals: list[float], q: float) -> float:
    i = min(len(sorted_vals) - 1, max(0, round(q * (len(sorted_vals) - 1))))
    return sorted_vals[i]


def median_ci(values: Sequence[float]) -> tuple[float, float] | None:
    """95% bootstrap interval of the median; None below two values."""
    vals = [float(v) for v in values if v is not None]
    if len(vals) < 2:
        return None
    rng = random.Random(SEED)
    n = len(vals)
    boots = sorted(statistics.median(rng.choices(vals, k=n)) for _ in range(BOOT))
    return _pct(boots, (1 - CONF) / 2), _pct(boots, 1 - (1 - CONF) / 2)


def ratio_ci(
    num: Sequence[float], den: Sequence[float]
) -> tuple[float | None, tuple[float, float] | None]:
    """(median(num) / median(den), its 95% bootstrap interval or None with one run a side)."""
    a = [float(v) for v in num if v is not None]
    b = [float(v) for v in den if v is not None and v > 0]
    if not a or not b:
        return None, None
    ratio = statistics.median(a) / statistics.median(b)
    if len(a) < 2 or len(b) < 2:
        return ratio, None
    rng = random.Random(SEED)
    boots = sorted(
        statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b)))
        for _ in range(BOOT)
    )
    return ratio, (_pct(boots, (1 - CONF) / 2), _pct(boots, 1 - (1 - CONF) / 2))


def within_noise(ci: tuple[float, float] | None) -> bool | None:
    """Whether a speedup interval includes 1.0 (None: no interval, nothing to say)."""
    if ci is None:
        return None
    return ci[0] <= 1.0 <= ci[1]


def overlaps(a: tuple[float, float] | None, b: tuple[float, float] | None) -> bool:
    """Two intervals share a point (an unknown one overlaps nothing)."""
    if a is None or b is None:
        return False
    return a[0] <= b[1] and b[0] <= a[1]
