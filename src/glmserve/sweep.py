"""Sweeps: the seeds' hand-made tuning loop (flashinfer + patch, then trtllm_mla, then
cutlass_mla) as one resumable command.

For each profile: check -> launch -> watch -> bench -> (optional profile capture) -> stop. A
crash is recorded with its diagnosis and the sweep moves on. State lives as JSON under
``$GLMSERVE_HOME/sweeps/<id>/`` (``sweep.json`` rewritten atomically after every step, plus
``sweep.md``), linking the run ids of the run store, so a sweep interrupted by Ctrl-C (the
running server is stopped first) continues with ``--resume <id>``: finished profiles are
skipped, the interrupted one starts again.

Pure parts: ``sweep_rows`` (the final table, speedups against the first successful profile)
and ``render_markdown``. The runner (``run_sweep``) drives the other modules through a small
``SweepBackend`` seam so tests can drive it without servers.
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

SWEEP_VERSION = 1

# Entry statuses. "ok" = benchmarked; the others carry a diagnosis or an error line.
PENDING = "pending"
RUNNING = "running"
OK = "ok"
CRASHED = "crashed"
STALLED = "stalled"
FAILED = "failed"  # check/launch/bench error that is not a server crash
INTERRUPTED = "interrupted"
SKIPPED = "skipped"  # not run because --until-first-success already succeeded
FINISHED = frozenset({OK, CRASHED, STALLED, FAILED, SKIPPED})


@dataclass
class SweepEntry:
    """One profile's outcome in a sweep."""

    profile: str
    status: str = PENDING
    run_id: str | None = None
    diagnosis: dict[str, Any] | None = None  # {state, category, root_cause, hint}
    error: str | None = None
    bench: list[dict[str, Any]] = field(default_factory=list)  # BenchResult dicts
    trace: dict[str, Any] | None = None  # profiler summary (top kernels/ops, findings)
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def decode_result(self) -> dict[str, Any] | None:
        return next((b for b in self.bench if b.get("mode") == "decode"), None)

    def decode_tok_s(self) -> float | None:
        d = self.decode_result()
        if d and d.get("decode_tok_s") is not None:
            return float(d["decode_tok_s"])
        lows = [lv for b in self.bench for lv in b.get("levels", [])]
        if not lows:
            return None
        low = min(lows, key=lambda lv: lv.get("concurrency", 0))
        v = (low.get("decode_tok_s") or {}).get("p50")
        return float(v) if v is not None else None

    def ttft_ms(self) -> float | None:
        d = self.decode_result()
        if d and d.get("ttft_ms") is not None:
            return float(d["ttft_ms"])
        lows = [lv for b in self.bench for lv in b.get("levels", [])]
        if not lows:
            return None
        low = min(lows, key=lambda lv: lv.get("concurrency", 0))
        v = (low.get("ttft_ms") or {}).get("p50")
        return float(v) if v is not None else None

    def aggregate_tok_s(self) -> dict[int, float]:
        """Output tok/s per concurrency level of the concurrency bench(es)."""
        out: dict[int, float] = {}
        for b in self.bench:
            if b.get("mode") != "concurrency":
                continue
            for lv in b.get("levels", []):
                if lv.get("output_tok_s") is not None:
                    out[int(lv["concurrency"])] = float(lv["output_tok_s"])
        return dict(sorted(out.items()))


@dataclass
class Sweep:
    """A sweep's whole state; ``sweep.json`` is ``to_dict()``."""

    sweep_id: str
    profiles: list[str]
    host: str | None = None
    simulate: bool = False
    bench: list[str] = field(default_factory=lambda: ["decode"])
    options: dict[str, Any] = field(default_factory=dict)
    entries: list[SweepEntry] = field(default_factory=list)
    status: str = RUNNING  # running | done | interrupted | stopped
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    version: int = SWEEP_VERSION

    def entry(self, profile: str) -> SweepEntry:
        for e in self.entries:
            if e.profile == profile:
                return e
        raise KeyError(profile)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rows"] = sweep_rows(self)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "sweep.json") -> Sweep:
        if d.get("version") != SWEEP_VERSION:
            raise ConfigError(f"{where}: unsupported sweep version {d.get('version')!r}")
        names = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in d.items() if k in names and k != "entries"}
        enames = set(SweepEntry.__dataclass_fields__)
        entries = [SweepEntry(**{k: v for k, v in e.items() if k in enames}) for e in d["entries"]]
        return cls(entries=entries, **kw)


# --------------------------------------------------------------------------- table (pure)


def sweep_rows(sweep: Sweep) -> list[dict[str, Any]]:
    """The final table: one row per profile, speedup against the first successful profile."""
    baseline = next(
        (e.decode_tok_s() for e in sweep.entries if e.status == OK and e.decode_tok_s()), None
    )
    base_profile = next(
        (e.profile for e in sweep.entries if e.status == OK and e.decode_tok_s()), None
    )
    rows = []
    for e in sweep.entries:
        tok = e.decode_tok_s() if e.status == OK else None
        diag = e.diagnosis or {}
        diagnosis = ""
        if diag.get("category") or diag.get("root_cause"):
            diagnosis = ": ".join(
                str(x) for x in (diag.get("category"), diag.get("root_cause")) if x
            )
        elif e.error:
            diagnosis = e.error
        rows.append(
            {
                "profile": e.profile,
                "status": e.status,
                "run_id": e.run_id,
                "diagnosis": diagnosis,
                "hint": diag.get("hint"),
                "decode_tok_s": tok,
                "ttft_ms": e.ttft_ms() if e.status == OK else None,
                "aggregate_tok_s": e.aggregate_tok_s() if e.status == OK else {},
                "speedup": (tok / baseline) if tok and baseline else None,
                "baseline": base_profile,
            }
        )
    return rows


def _fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def render_markdown(sweep: Sweep) -> str:
    """``sweep.md``: the table plus each failure's diagnosis and hint."""
    rows = sweep_rows(sweep)
    levels = sorted({c for r in rows for c in r["aggregate_tok_s"]})
    head = ["profile", "status", "diagnosis", "decode tok/s", "TTFT ms"]
    head += [f"agg tok/s @{c}" for c in levels] + ["speedup"]
    lines = [
        f"# Sweep {sweep.sweep_id}",
        "",
        f"host: {sweep.host or 'local'}{' (simulated)' if sweep.simulate else ''} · "
        f"status: {sweep.status} · bench: {', '.join(sweep.bench) or 'none'}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
    ]
    for r in rows:
        cells = [
            r["profile"],
            r["status"],
            (r["diagnosis"] or "").replace("|", "\\|")[:120],
            _fmt(r["decode_tok_s"]),
            _fmt(r["ttft_ms"]),
            *[_fmt(r["aggregate_tok_s"].get(c)) for c in levels],
            "-" if r["speedup"] is None else f"{r['speedup']:.2f}x",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    base = next((r["baseline"] for r in rows if r["baseline"]), None)
    if base:
        lines += ["", f"Speedup is decode tok/s against `{base}`, the first successful profile."]
    hints = [r for r in rows if r["hint"]]
    if hints:
        lines += ["", "## Diagnoses", ""]
        lines += [f"- **{r['profile']}**: {r['diagnosis']} — {r['hint']}" for r in hints]
    findings = [(e.profile, f) for e in sweep.entries for f in (e.trace or {}).get("findings", [])]
    if findings:
        lines += ["", "## Profiler findings", ""]
        lines += [f"- **{p}**: {f['message']}" for p, f in findings]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- storage


def sweeps_root() -> Path:
    return glmserve_home() / "sweeps"


def new_sweep_id() -> str:
    return time.strftime("sw-%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(2)


def sweep_dir(sweep_id: str) -> Path:
    if not sweep_id or "/" in sweep_id or sweep_id.startswith("."):
        raise ConfigError(f"--resume: not a sweep id: {sweep_id!r}")
    return sweeps_root() / sweep_id


def save_sweep(sweep: Sweep) -> Path:
    """Write sweep.json (atomically: a Ctrl-C mid-write never leaves half a file) and sweep.md."""
    sweep.updated_at = time.time()
    d = sweep_dir(sweep.sweep_id)
    d.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("sweep.json", json.dumps(sweep.to_dict(), indent=2, default=str)),
        ("sweep.md", render_markdown(sweep)),
    ):
        tmp = d / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, d / name)
    return d / "sweep.json"


def load_sweep(sweep_id: str) -> Sweep:
    path = sweep_dir(sweep_id) / "sweep.json"
    if not path.exists():
        known = ", ".join(list_sweep_ids()[-5:]) or "none"
        raise RunNotFound(f"unknown sweep {sweep_id!r} (recent: {known})")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: corrupt sweep file: {exc.msg}") from exc
    return Sweep.from_dict(data, str(path))


def list_sweep_ids() -> list[str]:
    root = sweeps_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "sweep.json").exists())
