"""A tune's stored state: ``$GLMSERVE_HOME/tunes/<id>/tune.json`` (rewritten atomically after
every step, like sweeps) plus ``tune.md``. ``--resume <id>`` keeps finished trials and runs
the rest; a trial interrupted (Ctrl-C) or lost with its host runs again.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from glmserve.errors import RunNotFound
from glmserve.statedir import StateDir
from glmserve.tune.space import config_key, pareto_front

TUNE_VERSION = 1

PENDING, RUNNING, OK = "pending", "running", "ok"
CRASHED, STALLED, FAILED, SKIPPED, INTERRUPTED = (
    "crashed",
    "stalled",
    "failed",
    "skipped",
    "interrupted",
)
# --probe: the server's greedy output disagrees with the untuned profile's (bench.agreement):
# its speed is of another model, so the trial is excluded from best, Pareto and the profile.
WRONG_OUTPUT = "WRONG_OUTPUT"
# Kept by --resume. FAILED (a tool error) counts as finished too: the search moves on.
FINISHED = frozenset({OK, CRASHED, STALLED, FAILED, SKIPPED, WRONG_OUTPUT})


def trial_key(config: dict[str, str], concurrency: int) -> str:
    """A trial's name, unique in its tune: the config's flags and the load, ``a=1,b=2@c16``."""
    return f"{config_key(config)}@c{concurrency}"


@dataclass
class Trial:
    """One (config, load) point and its outcome."""

    config: dict[str, str]
    concurrency: int
    status: str = PENDING
    host: str | None = None
    run_id: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    diagnosis: dict[str, Any] | None = None
    error: str | None = None
    requeued_from: list[str] = field(default_factory=list)  # hosts lost while it ran
    started_at: float | None = None
    ended_at: float | None = None
    output: dict[str, Any] | None = None  # --probe: agreement with the untuned profile
    queued_s: float | None = None  # a Slurm job's wait in the queue (not part of the trial)

    @property
    def key(self) -> str:
        return trial_key(self.config, self.concurrency)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


@dataclass
class Tune:
    tune_id: str
    profile: str
    search: list[list[Any]]  # [[key, [values...]], ...]
    loads: list[int]
    objective: str
    slo: dict[str, float]
    budget: dict[str, Any] | None
    hosts: list[str]
    simulate: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    strategy: str = "grid"
    trials: list[Trial] = field(default_factory=list)
    lost_hosts: list[str] = field(default_factory=list)
    # --probe: the untuned profile's probe (outputs, sha256): every trial's output reference
    reference: dict[str, Any] | None = None
    status: str = RUNNING
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    version: int = TUNE_VERSION

    @property
    def space(self) -> list[tuple[str, list[str]]]:
        return [(str(k), [str(v) for v in vals]) for k, vals in self.search]

    def trial(self, config: dict[str, str], concurrency: int) -> Trial | None:
        key = trial_key(config, concurrency)
        return next((t for t in self.trials if t.key == key), None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        best = best_trial(self)
        d["best"] = None if best is None else {"key": best.key, **asdict(best)}
        d["pareto"] = [t.key for t in pareto(self)]
        d["ties"] = [t.key for t in ties(self)]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "tune.json") -> Tune:
        return TUNES.decode(cls, d, where, trials=Trial)


# --------------------------------------------------------------------------- results (pure)


def objective_value(tune: Tune, trial: Trial) -> float | None:
    v = trial.metrics.get(tune.objective)
    return None if v is None else float(v)


def feasible(tune: Tune, trial: Trial) -> bool:
    return trial.status == OK and bool(trial.metrics.get("meets_slo"))


def best_trial(tune: Tune) -> Trial | None:
    """The highest objective among trials that met every SLO (ties: the earlier trial)."""
    best, best_v = None, None
    for t in tune.trials:
        v = objective_value(tune, t)
        if not feasible(tune, t) or v is None:
            continue
        if best_v is None or v > best_v:
            best, best_v = t, v
    return best


def objective_values(tune: Tune, trial: Trial) -> list[float]:
    """The objective's per-repeat values (``--repeat``; goodput has none kept)."""
    return list((trial.metrics.get("repeat_values") or {}).get(tune.objective) or [])


def ties(tune: Tune) -> list[Trial]:
    """Feasible trials whose objective's 95% interval overlaps the best trial's: ranked
    below it by median, but not measurably worse."""
    from glmserve.bench.stats import median_ci, overlaps

    best = best_trial(tune)
    if best is None:
        return []
    best_ci = median_ci(objective_values(tune, best))
    return [
        t
        for t in tune.trials
        if t is not best
        and feasible(tune, t)
        and overlaps(median_ci(objective_values(tune, t)), best_ci)
    ]


def beats_start(tune: Tune, profile_server: dict[str, Any]) -> tuple[bool, str]:
    """Whether the best trial beats the starting config (the profile's own values) beyond
    noise at the same load: the bootstrap interval of the ratio of their objective medians
    lies above 1.0. A start that ran and has no feasible figure is beaten outright."""
    from glmserve.bench.stats import ratio_ci
    from glmserve.tune.space import starting_config

    best = best_trial(tune)
    if best is None:
        return False, "no trial met the SLOs"
    start = starting_config(tune.space, profile_server)
    if best.config == start:
        return False, "the best config is the profile's own"
    t0 = tune.trial(start, best.concurrency)
    if t0 is None or not feasible(tune, t0):
        why = "was not run" if t0 is None else f"is {t0.status} or misses the SLOs"
        if t0 is None:
            return False, f"the starting config {why} at concurrency {best.concurrency}"
        return True, f"the starting config {why}"
    sp, ci = ratio_ci(objective_values(tune, best), objective_values(tune, t0))
    if ci is None:
        return False, "no interval (a single run each): cannot tell it from noise (--repeat)"
    if ci[0] > 1.0:
        return True, f"{sp:.3f}x the starting config, 95% interval {ci[0]:.3f}..{ci[1]:.3f}"
    return False, (
        f"{sp:.3f}x the starting config, 95% interval {ci[0]:.3f}..{ci[1]:.3f}: within noise"
    )


def latency_key(tune: Tune) -> str:
    """The p99 latency the Pareto front trades against: the first SLO key, else TPOT."""
    return next(iter(tune.slo), "tpot_p99_ms")


def pareto(tune: Tune) -> list[Trial]:
    """Successful trials not beaten on both throughput (output tok/s) and p99 latency."""
    lat = latency_key(tune)
    pts = [
        (float(t.metrics["output_tok_s"]), float(t.metrics[lat]), t)
        for t in tune.trials
        if t.status == OK
        and t.metrics.get("output_tok_s") is not None
        and t.metrics.get(lat) is not None
    ]
    return pareto_front(pts)


def config_score(tune: Tune, config: dict[str, str]) -> float | None:
    """A config's best feasible objective over its loads (None: none feasible)."""
    vals = [
        objective_value(tune, t)
        for t in tune.trials
        if t.config == config and feasible(tune, t) and objective_value(tune, t) is not None
    ]
    return max(vals) if vals else None  # type: ignore[type-var]


# --------------------------------------------------------------------------- markdown


def _fmt(v: Any, digits: int = 1) -> str:
    return "-" if v is None else f"{float(v):.{digits}f}"


def render_markdown(tune: Tune) -> str:
    keys = [k for k, _ in tune.space]
    best = best_trial(tune)
    front = {t.key for t in pareto(tune)}
    lines = [
        f"# Tune {tune.tune_id}",
        "",
        f"profile: {tune.profile} · hosts: {', '.join(tune.hosts)}"
        f"{' (simulated)' if tune.simulate else ''} · strategy: {tune.strategy} · "
        f"objective: {tune.objective} · SLO: "
        + (", ".join(f"{k} <= {v:g}" for k, v in tune.slo.items()) or "none")
        + f" · status: {tune.status}",
        "",
    ]
    if best is not None:
        lines += [
            f"**Best:** {', '.join(f'{k}={v}' for k, v in best.config.items())} at concurrency "
            f"{best.concurrency}: {tune.objective} {_fmt(objective_value(tune, best))}",
            "",
        ]
    else:
        lines += ["**Best:** no trial met the SLOs", ""]
    tied = ties(tune)
    if tied:
        lines += [
            "**Tie with best** (95% intervals overlap): " + ", ".join(t.key for t in tied),
            "",
        ]
    head = [*keys, *TRIAL_COLUMNS, "pareto"]
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for t in tune.trials:
        cells = [*trial_cells(t, keys), "*" if t.key in front else ""]
        lines.append("| " + " | ".join(cells) + " |")
    failed = failed_trials(tune)
    if failed:
        lines += ["", "## Failed and skipped trials", ""]
        for t in failed:
            lines.append(f"- **{t.key}** ({t.status}{', ' + t.host if t.host else ''}): {why(t)}")
    if tune.lost_hosts:
        lines += ["", f"Hosts taken out of the pool: {', '.join(tune.lost_hosts)}"]
    return "\n".join(lines) + "\n"


# The trial table's columns after one per searched flag (tune.md and the report's tune page).
TRIAL_COLUMNS = ("conc", "status", "host", "out tok/s", "goodput", "TTFT p99", "TPOT p99", "SLO")


def trial_cells(trial: Trial, keys: list[str]) -> list[str]:
    """A trial's row of the trial table, as text: its value of each flag in ``keys``, then
    one cell per ``TRIAL_COLUMNS`` (SLO: ok or miss for a trial that ran, else empty)."""
    m = trial.metrics
    slo = "" if trial.status != OK else ("ok" if m.get("meets_slo") else "miss")
    figures = ("output_tok_s", "goodput", "ttft_p99_ms", "tpot_p99_ms")
    return [trial.config.get(k, "") for k in keys] + [
        str(trial.concurrency),
        trial.status,
        trial.host or "-",
        *(_fmt(m.get(f)) for f in figures),
        slo,
    ]


def failed_trials(tune: Tune) -> list[Trial]:
    """Trials that ended without a result (crashed, stalled, failed, skipped), in order."""
    return [t for t in tune.trials if t.status in (CRASHED, STALLED, FAILED, SKIPPED, WRONG_OUTPUT)]


def why(trial: Trial) -> str:
    """A failed trial's diagnosis in one line (category: root cause — hint)."""
    d = trial.diagnosis or {}
    text = ": ".join(str(d[k]) for k in ("category", "root_cause") if d.get(k))
    if d.get("hint"):
        text += f" — {d['hint']}"
    return text or trial.error or ""


# --------------------------------------------------------------------------- storage


TUNES = StateDir(
    noun="tune",
    id_prefix="tu",
    busy="tune {ident} is being run by another glmserve process",
    version=TUNE_VERSION,
)


def new_tune_id() -> str:
    return TUNES.new_id()


def tune_dir(tune_id: str) -> Path:
    return TUNES.dir(tune_id)


def save_tune(tune: Tune) -> Path:
    """tune.json and tune.md, each written atomically (Ctrl-C never leaves half a file)."""
    tune.updated_at = time.time()
    return TUNES.write(tune.tune_id, tune.to_dict(), render_markdown(tune))


def load_tune(tune_id: str) -> Tune:
    found = TUNES.read(tune_id)
    if found is None:
        raise RunNotFound(f"unknown tune {tune_id!r} (see {TUNES.root()})")
    data, where = found
    return Tune.from_dict(data, where)
