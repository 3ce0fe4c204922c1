"""Run-to-run variation of the simulator's speed, so glmserve's noise logic (repeats,
confidence intervals, "within noise") is tested against a known spread.

A real GPU server varies run to run with clocks, thermals and co-tenants; the cost model alone
is too steady (four benches of one config compared at 1.00-1.01x). Two options, off by default:

* ``--sim-run-variation SD``: every *run* is slowed by a factor ``exp(|N(0, SD)|)`` (the log
  of the factor is half-normal: SD 0.05 slows 95% of runs by 0 to ~10%, 4% on average, with a
  spread of ~3%). A run is a busy period of the
  engine that follows at least ``RUN_GAP_S`` of idleness: a bench's repeat (or level) starts
  from an idle server, while the requests within one keep it busy (a single-stream decode
  bench sends the next request within a millisecond or so of the last one's end).
* ``--sim-step-jitter SD``: each step's duration is multiplied by ``exp(|N(0, SD)|)``.

Both only slow a step down, never speed it up: the cost model is the fastest the simulated
server can go, so a bench figure above it is always a measurement error, never noise (with a
symmetric factor, a run drawn at exp(-2 SD) ran 10% faster than the model at SD 0.05 and a
client could not tell that from a false reading).

``--sim-variation-seed N`` fixes the random sequence (the k-th run's factor is the same on
every server started with that seed); without it each server draws its own.
"""

from __future__ import annotations

import math
import random

RUN_GAP_S = 0.1


class Variation:
    """The current run's factor and each step's jitter (both multiply a step's duration and
    are >= 1)."""

    def __init__(self, run_sd: float = 0.0, step_sd: float = 0.0, seed: int | None = None) -> None:
        self.run_sd = run_sd
        self.step_sd = step_sd
        self.rng = random.Random(seed)
        self.runs = 0
        self.factor = 1.0
        self.enabled = run_sd > 0 or step_sd > 0
        if self.enabled:
            self.new_run()

    def new_run(self) -> None:
        self.runs += 1
        self.factor = math.exp(abs(self.rng.gauss(0.0, self.run_sd))) if self.run_sd > 0 else 1.0

    def idle(self, seconds: float) -> None:
        """The engine woke after ``seconds`` idle: a new run when that was long enough."""
        if self.enabled and seconds >= RUN_GAP_S:
            self.new_run()

    def step(self) -> float:
        """The multiplier of one step's duration (>= 1: a step is never shorter than the
        cost model's)."""
        if not self.enabled:
            return 1.0
        jitter = math.exp(abs(self.rng.gauss(0.0, self.step_sd))) if self.step_sd > 0 else 1.0
        return self.factor * jitter

    def describe(self) -> dict[str, float | int]:
        return {"run_sd": self.run_sd, "step_sd": self.step_sd, "runs": self.runs,
                "factor": self.factor}  # fmt: skip
