"""``--stall-budget PHASE=SECONDS`` and ``--stall-timeout`` values, checked once for every
verb that watches a start-up (launch, sweep, tune): a bad value is a one-line ConfigError."""

from __future__ import annotations

import math

from glmserve.diagnose import State, stall_phase
from glmserve.errors import ConfigError


def parse_stall_budgets(items: list[str], flag: str = "--stall-budget") -> dict[State, float]:
    """``["load=3600", "warmup=120"]`` -> per-phase stall budgets; a bad item is a one-line
    ConfigError naming the flag."""
    out: dict[State, float] = {}
    for item in items:
        name, eq, value = item.partition("=")
        try:
            if not eq:
                raise ValueError("want PHASE=SECONDS")
            try:
                seconds = float(value)
            except ValueError:
                seconds = math.nan
            if not 0 < seconds < math.inf:
                raise ValueError(f"seconds must be a positive number, got {value!r}")
            out[stall_phase(name)] = seconds
        except ValueError as exc:
            raise ConfigError(f"{flag} {item}: {exc}") from None
    return out


def check_stall_timeout(seconds: float | None, flag: str = "--stall-timeout") -> float | None:
    """``seconds`` if it is a usable stall budget (None = the per-phase defaults), else a
    one-line ConfigError naming the flag: 0, a negative number or nan would otherwise be
    dropped in silence and the user's hang would wait the default budget instead."""
    if seconds is not None and not 0 < seconds < math.inf:
        raise ConfigError(
            f"{flag} {seconds:g}: seconds must be a positive number (leave it out for the "
            "per-phase defaults)"
        )
    return seconds
