"""The verdict's vocabulary: start-up states, crash categories, stall budgets and
:class:`Diagnosis` (with the STALLED/EXITED verdicts the watcher derives from time and PIDs)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

MAX_LINE_CHARS = 16_384  # longer lines are cut before matching (server_args lines are ~6K)
MAX_ROOT_CAUSE_CHARS = 600
# After READY an exception without a cascade marker within this many lines was survived.
_POST_READY_CANDIDATE_LINES = 200


class State(str, Enum):
    STARTING = "STARTING"
    LOADING_WEIGHTS = "LOADING_WEIGHTS"
    KV_ALLOCATED = "KV_ALLOCATED"
    CAPTURING_GRAPHS = "CAPTURING_GRAPHS"
    WARMUP = "WARMUP"
    READY = "READY"
    CRASHED = "CRASHED"
    STALLED = "STALLED"
    EXITED = "EXITED"


class Category(str, Enum):
    OOM = "OOM"
    ILLEGAL_MEMORY_ACCESS = "ILLEGAL_MEMORY_ACCESS"
    UNSUPPORTED_ARCH = "UNSUPPORTED_ARCH"
    UNSUPPORTED_KV_DTYPE = "UNSUPPORTED_KV_DTYPE"
    NCCL = "NCCL"
    WEIGHT_LOADING = "WEIGHT_LOADING"
    PORT_IN_USE = "PORT_IN_USE"
    BAD_ARGS = "BAD_ARGS"
    COMPILE_ERROR = "COMPILE_ERROR"
    PATCH_FAILED = "PATCH_FAILED"
    LAUNCH_FAILED = "LAUNCH_FAILED"  # the launch script died before SGLang started
    CRASH = "CRASH"


# Start-up order; the phase is the furthest one reached.
_ORDER = [
    State.STARTING,
    State.LOADING_WEIGHTS,
    State.KV_ALLOCATED,
    State.CAPTURING_GRAPHS,
    State.WARMUP,
    State.READY,
]
_RANK = {s: i for i, s in enumerate(_ORDER)}
TERMINAL_STATES = frozenset({State.CRASHED, State.STALLED, State.EXITED})

# Default seconds without progress before a phase counts as stalled (the README's "Stall
# budgets" table). Loading ~400 GB of GLM-5 weights from network storage and capturing graphs
# for many batch sizes on 8 ranks can take tens of minutes between log lines; warmup is one
# tiny request (SGLang itself gives up on it after 600 s), so it may not sit silent as long.
_STALL_BUDGET_S = {
    State.STARTING: 600.0,
    State.LOADING_WEIGHTS: 2400.0,
    State.KV_ALLOCATED: 900.0,
    State.CAPTURING_GRAPHS: 1800.0,
    State.WARMUP: 300.0,
}
# Names ``--stall-budget PHASE=SECONDS`` accepts besides the state names themselves.
STALL_PHASE_NAMES = {
    "starting": State.STARTING,
    "load": State.LOADING_WEIGHTS,
    "weights": State.LOADING_WEIGHTS,
    "kv": State.KV_ALLOCATED,
    "graphs": State.CAPTURING_GRAPHS,
    "warmup": State.WARMUP,
}


def phase_stall_budget(state: State | str) -> float:
    """Seconds without log progress after which ``state`` counts as stalled (inf if never)."""
    return _STALL_BUDGET_S.get(State(state), math.inf)


@dataclass(frozen=True)
class Evidence:
    """A line that would explain a crash that other facts (a dead process) prove."""

    line: int
    text: str
    category: Category
    hint: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "text": self.text,
            "category": self.category.value,
            "hint": self.hint,
        }


def stall_phase(name: str) -> State:
    """The start-up phase a ``--stall-budget`` name means (``load``, ``WARMUP``, ...)."""
    key = name.strip()
    if key.lower() in STALL_PHASE_NAMES:
        return STALL_PHASE_NAMES[key.lower()]
    try:
        state = State(key.upper())
    except ValueError:
        state = None
    if state is None or state not in _STALL_BUDGET_S:
        names = ", ".join(STALL_PHASE_NAMES)
        raise ValueError(f"unknown start-up phase {name!r} (one of {names})")
    return state


def stall_budget(
    phase: State | str,
    stall_timeout: float | None = None,
    per_phase: dict[State, float] | None = None,
) -> tuple[float, str]:
    """(seconds, where that number came from) for ``phase``: a ``--stall-budget`` for that
    phase, else ``--stall-timeout`` (every phase), else the default table. The source is
    what a STALLED hint names, so the user sees which budget fired."""
    state = State(phase)
    if per_phase and state in per_phase:
        name = next(k for k, v in STALL_PHASE_NAMES.items() if v is state)
        return per_phase[state], f"--stall-budget {name}={_secs(per_phase[state])}"
    if stall_timeout is not None and state in _STALL_BUDGET_S:
        return stall_timeout, f"--stall-timeout {_secs(stall_timeout)}"
    return phase_stall_budget(state), f"default for {state.value}"


def _secs(x: float) -> str:
    return f"{x:.0f}" if x >= 10 or x == int(x) else f"{x:.1f}"


@dataclass
class Diagnosis:
    """One verdict on a log. ``category``/``line``/``root_cause`` are set only when CRASHED."""

    state: State = State.STARTING
    category: Category | None = None
    line: int | None = None
    root_cause: str | None = None
    hint: str | None = None
    last_progress_line: int | None = None
    last_progress: str | None = None
    phase: State = State.STARTING
    patch_ranks_active: set[int | str] = field(default_factory=set)
    patches: list[str] = field(default_factory=list)
    tp_size: int | None = None
    ready_line: int | None = None
    exit_code: int | None = None
    stalled_s: float | None = None
    server_args: dict[str, str] = field(default_factory=dict)
    # Whether any line was SGLang output (its log prefix, server_args, a crash report, a
    # start-up marker): `diagnose` refuses input without one instead of calling it STARTING.
    sglang_log: bool = False
    # Evidence that explains a crash only if the process dies (SGLang's soft watchdog, a
    # warning-level error): not a crash while the server lives; :meth:`exited` promotes it.
    warning: Evidence | None = None

    @property
    def patch_active(self) -> str | None:
        """``"k/N"``: ranks that logged a patch activation out of tp_size (``k/?`` if unknown)."""
        k = len(self.patch_ranks_active)
        if self.tp_size:
            return f"{k}/{self.tp_size}" if (k or self.patches) else None
        return f"{k}/?" if k else None

    @property
    def crashed(self) -> bool:
        return self.state is State.CRASHED

    def stalled(
        self, seconds: float, budget: float | None = None, source: str | None = None
    ) -> Diagnosis:
        """The verdict once the watcher saw no progress for ``seconds`` (crashes stay).
        ``budget``/``source``: the stall budget that fired and where it came from (see
        :func:`stall_budget`); the hint names both."""
        if self.state in (State.CRASHED, State.EXITED, State.READY):
            return dataclasses.replace(self)
        if budget is None:
            budget, source = stall_budget(self.phase)
        where = (
            f"; last progress at line {self.last_progress_line}: {self.last_progress}"
            if self.last_progress_line
            else ""
        )
        hint = (
            f"no log progress for {_secs(seconds)}s in phase {self.phase.value} (stall budget "
            f"{_secs(budget)}s, {source}){where}. Check GPU activity (nvidia-smi), "
            "dump the stacks with `py-spy dump --pid <scheduler pid>`; a rank stuck in NCCL "
            "init usually means a peer died (NCCL_DEBUG=INFO shows which)."
        )
        return dataclasses.replace(
            self, state=State.STALLED, category=None, hint=hint, stalled_s=float(seconds)
        )

    def exited(self, rc: int | None) -> Diagnosis:
        """The verdict once the server process is gone with status ``rc`` (crashes stay).

        A death proves the crash that a :attr:`warning` (a soft watchdog timeout, an error
        logged at warning level) only suggested: that line becomes the root cause, unless the
        process ended cleanly (``rc == 0``)."""
        if self.state is State.CRASHED:
            return dataclasses.replace(self, exit_code=rc)
        if self.state is State.EXITED and self.root_cause:
            # the log itself says why it ended (slurmstepd: the scheduler cancelled the job)
            return dataclasses.replace(self, exit_code=rc)
        w = self.warning
        if w is not None and rc != 0:
            return dataclasses.replace(
                self,
                state=State.CRASHED,
                category=w.category,
                line=w.line,
                root_cause=w.text,
                hint=w.hint,
                exit_code=rc,
            )
        if rc is not None and rc in (137, -9):
            why = "killed by SIGKILL (the host OOM killer? check `dmesg | tail`)"
        elif rc is not None and rc < 0:
            why = f"killed by signal {-rc}"
        elif rc is not None and rc > 128:
            why = f"killed by signal {rc - 128}"
        elif rc is None:  # not our child (ssh, setsid): its status cannot be read
            why = "exit status not known"
        else:
            why = f"exit status {rc}"
        hint = (
            f"the server process ended ({why}) in phase {self.phase.value} without an error "
            "line the log recognises; read the log tail (`glmserve logs RUN -n 100`)."
        )
        return dataclasses.replace(self, state=State.EXITED, category=None, hint=hint, exit_code=rc)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view (the ``glmserve diagnose --json`` contract)."""
        return {
            "state": self.state.value,
            "category": self.category.value if self.category else None,
            "line": self.line,
            "root_cause": self.root_cause,
            "hint": self.hint,
            "phase": self.phase.value,
            "last_progress_line": self.last_progress_line,
            "last_progress": self.last_progress,
            "ready_line": self.ready_line,
            "tp_size": self.tp_size,
            "patches": list(self.patches),
            "patch_ranks_active": sorted(self.patch_ranks_active, key=str),
            "patch_active": self.patch_active,
            "exit_code": self.exit_code,
            "stalled_s": self.stalled_s,
            "sglang_log": self.sglang_log,
            "warning": self.warning.to_dict() if self.warning else None,
        }
