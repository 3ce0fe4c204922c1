"""A tune's stored state: ``$GLMSERVE_HOME/tunes/<id>/tune.json`` (rewritten atomically after
every step, like sweeps) plus ``tune.md``. ``--resume <id>`` keeps finished trials and runs
the rest; a trial interrupted (Ctrl-C) or lost with its host runs again.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from glmserve.errors import ConfigError, RunNotFound
from glmserve.paths import glmserve_home
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
# Kept by --resume. FAILED (a tool error) counts as finished too: the search moves on.
FINISHED = frozenset({OK, CRASHED, STALLED, FAILED, SKIPPED})


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

    @property
    def key(self) -> str:
        return f"{config_key(self.config)}@c{self.concurrency}"

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
    status: str = RUNNING
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    version: int = TUNE_VERSION

    @property
    def space(self) -> list[tuple[str, list[str]]]:
        return [(str(k), [str(v) for v in vals]) for k, vals in self.search]

    def trial(self, config: dict[str, str], concurrency: int) -> Trial | None:
        key = f"{config_key(config)}@c{concurrency}"
        return next((t for t in self.trials if t.key == key), None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        best = best_trial(self)
        d["best"] = None if best is None else {"key": best.key, **asdict(best)}
        d["pareto"] = [t.key for t in pareto(self)]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "tune.json") -> Tune:
        if d.get("version") != TUNE_VERSION:
            raise ConfigError(f"{where}: unsupported tune version {d.get('version')!r}")
        names = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in d.items() if k in names and k != "trials"}
        tnames = set(Trial.__dataclass_fields__)
        trials = [Trial(**{k: v for k, v in t.items() if k in tnames}) for t in d["trials"]]
        return cls(trials=trials, **kw)


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
    head = [*keys, "conc", "status", "host", "out tok/s", "goodput", "TTFT p99", "TPOT p99"]
    head += ["SLO", "pareto"]
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for t in tune.trials:
        m = t.metrics
        slo = "" if t.status != OK else ("ok" if m.get("meets_slo") else "miss")
        cells = [t.config.get(k, "") for k in keys] + [
            str(t.concurrency),
            t.status,
            t.host or "-",
            _fmt(m.get("output_tok_s")),
            _fmt(m.get("goodput")),
            _fmt(m.get("ttft_p99_ms")),
            _fmt(m.get("tpot_p99_ms")),
            slo,
            "*" if t.key in front else "",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    failed = [t for t in tune.trials if t.status in (CRASHED, STALLED, FAILED, SKIPPED)]
    if failed:
        lines += ["", "## Failed and skipped trials", ""]
        for t in failed:
            lines.append(f"- **{t.key}** ({t.status}{', ' + t.host if t.host else ''}): {why(t)}")
    if tune.lost_hosts:
        lines += ["", f"Hosts taken out of the pool: {', '.join(tune.lost_hosts)}"]
    return "\n".join(lines) + "\n"


def why(trial: Trial) -> str:
    """A failed trial's diagnosis in one line (category: root cause — hint)."""
    d = trial.diagnosis or {}
    text = ": ".join(str(d[k]) for k in ("category", "root_cause") if d.get(k))
    if d.get("hint"):
        text += f" — {d['hint']}"
    return text or trial.error or ""


# --------------------------------------------------------------------------- storage


def tunes_root() -> Path:
    return glmserve_home() / "tunes"


def new_tune_id() -> str:
    return time.strftime("tu-%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(2)


def tune_dir(tune_id: str) -> Path:
    if not tune_id or "/" in tune_id or tune_id.startswith("."):
        raise ConfigError(f"--resume: not a tune id: {tune_id!r}")
    return tunes_root() / tune_id


def save_tune(tune: Tune) -> Path:
    """tune.json and tune.md, each written atomically (Ctrl-C never leaves half a file)."""
    tune.updated_at = time.time()
    d = tune_dir(tune.tune_id)
    d.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("tune.json", json.dumps(tune.to_dict(), indent=2, default=str)),
        ("tune.md", render_markdown(tune)),
    ):
        tmp = d / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, d / name)
    return d / "tune.json"


def load_tune(tune_id: str) -> Tune:
    path = tune_dir(tune_id) / "tune.json"
    if not path.exists():
        raise RunNotFound(f"unknown tune {tune_id!r} (see {tunes_root()})")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: corrupt tune file: {exc.msg}") from exc
    return Tune.from_dict(data, str(path))
