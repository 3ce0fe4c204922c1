"""Sweeps: the seeds' hand-made tuning loop (flashinfer + patch, then trtllm_mla, then
cutlass_mla) as one resumable command.

For each profile: check -> launch -> watch -> bench -> (optional profile capture) -> stop. A
crash is recorded with its diagnosis and the sweep moves on. State lives as JSON under
``$GLMSERVE_HOME/sweeps/<id>/`` (``sweep.json`` rewritten atomically after every step, plus
``sweep.md``), linking the run ids of the run store, so a sweep interrupted by Ctrl-C (the
running server is stopped first) continues with ``--resume <id>``: finished profiles are
skipped, the interrupted one starts again.

A multi-node profile (``nodes:``, or ``--nodes`` for every profile) is checked, launched,
watched, benched (through node 0) and stopped as one host group; its entry keeps node 0's run
id (where bench results are stored) plus the group id and every node, and a crash names the
node it happened on.

Pure parts: ``sweep_rows`` (the final table, speedups against the first successful profile)
and ``render_markdown``. The runner (``run_sweep``) drives the other modules through a small
``SweepBackend`` seam so tests can drive it without servers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from glmserve.errors import EXIT_INTERRUPTED, ConfigError, GlmserveError, RunNotFound
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
# Finished entries are kept by --resume; FAILED (a tool error) and INTERRUPTED run again.
FINISHED = frozenset({OK, CRASHED, STALLED, SKIPPED})


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
    group_id: str | None = None  # a multi-node profile's group (run_id is its node 0)
    nodes: list[dict[str, Any]] | None = None  # [{node_rank, host, run_id}] of the group
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def decode_result(self) -> dict[str, Any] | None:
        return next((b for b in self.bench if b.get("mode") == "decode"), None)

    def _decode_figure(self, key: str) -> float | None:
        """``key`` of the decode bench, else its p50 at the lowest concurrency level measured
        (the nearest a concurrency-only bench comes to single-stream decode)."""
        d = self.decode_result()
        if d and d.get(key) is not None:
            return float(d[key])
        levels = [lv for b in self.bench for lv in b.get("levels", [])]
        if not levels:
            return None
        low = min(levels, key=lambda lv: lv.get("concurrency", 0))
        v = (low.get(key) or {}).get("p50")
        return float(v) if v is not None else None

    def decode_tok_s(self) -> float | None:
        return self._decode_figure("decode_tok_s")

    def ttft_ms(self) -> float | None:
        return self._decode_figure("ttft_ms")

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
    nodes: list[str] = field(default_factory=list)  # --nodes: every profile on this group
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


class SweepInterrupted(GlmserveError):
    """Ctrl-C: the running server was stopped and the sweep saved; exit 130."""

    exit_code = EXIT_INTERRUPTED


# --------------------------------------------------------------------------- table (pure)


def sweep_rows(sweep: Sweep) -> list[dict[str, Any]]:
    """The final table: one row per profile, speedup against the first successful profile."""
    base = next((e for e in sweep.entries if e.status == OK and e.decode_tok_s()), None)
    baseline = base.decode_tok_s() if base else None
    base_profile = base.profile if base else None
    rows = []
    for e in sweep.entries:
        tok = e.decode_tok_s() if e.status == OK else None
        diag = e.diagnosis or {}
        diagnosis = ""
        if diag.get("category") or diag.get("root_cause"):
            diagnosis = ": ".join(
                str(x) for x in (diag.get("category"), diag.get("root_cause")) if x
            )
            if diag.get("node_rank") is not None and e.status != OK:
                diagnosis = f"node {diag['node_rank']} ({diag.get('host')}): {diagnosis}"
        elif e.error:
            diagnosis = e.error
        rows.append(
            {
                "profile": e.profile,
                "status": e.status,
                "run_id": e.run_id,
                "group_id": e.group_id,
                "nodes": [n.get("host") for n in e.nodes or []],
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
        f"host: {_where(sweep)}{' (simulated)' if sweep.simulate else ''} · "
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
    note = speed_note(sweep)
    if note:
        lines += ["", note]
    base = next((r["baseline"] for r in rows if r["baseline"]), None)
    if base:
        lines += ["", f"Speedup is decode tok/s against `{base}`, the first successful profile."]
    groups = [e for e in sweep.entries if e.group_id]
    if groups:
        lines += ["", "## Host groups", ""]
        lines += [
            f"- **{e.profile}**: group {e.group_id}: "
            + ", ".join(
                f"node {n['node_rank']} {n['host']} (run {n['run_id']})" for n in e.nodes or []
            )
            for e in groups
        ]
    hints = [r for r in rows if r["hint"]]
    if hints:
        lines += ["", "## Diagnoses", ""]
        lines += [f"- **{r['profile']}**: {r['diagnosis']} — {r['hint']}" for r in hints]
    findings = [(e.profile, f) for e in sweep.entries for f in (e.trace or {}).get("findings", [])]
    if findings:
        lines += ["", "## Profiler findings", ""]
        lines += [f"- **{p}**: {f['message']}" for p, f in findings]
    return "\n".join(lines) + "\n"


def _where(sweep: Sweep) -> str:
    """Where the sweep ran: its --nodes group, else its host (multi-node profiles name their
    own nodes in the Host groups section)."""
    if sweep.nodes:
        return "nodes " + ", ".join(sweep.nodes)
    return sweep.host or "local"


def speed_note(sweep: Sweep) -> str | None:
    """Simulated sweeps run the clock faster (``--set sim.speed=N``): say so next to figures."""
    if not sweep.simulate:
        return None
    speeds = [
        o.split("=", 1)[1] for o in sweep.options.get("overrides", []) if o.startswith("sim.speed=")
    ]
    if not speeds or speeds[-1] in ("1", "1.0"):
        return "Simulated: figures follow the simulator's cost model of the target box."
    return (
        f"Simulated at sim.speed={speeds[-1]}: absolute figures are {speeds[-1]}x the modeled "
        "box; ratios (speedup) are what carry over."
    )


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


# --------------------------------------------------------------------------- running


@dataclass
class SweepOptions:
    """How each profile is exercised; stored in sweep.json so ``--resume`` repeats it."""

    bench: list[str] = field(default_factory=lambda: ["decode"])  # decode | concurrency
    concurrency: list[int] = field(default_factory=lambda: [1, 4, 16])
    input_len: int = 128
    output_len: int = 256
    num_prompts: int | None = None
    overrides: list[str] = field(default_factory=list)  # --set, applied to every profile
    until_first_success: bool = False
    continue_on_error: bool = False
    capture_steps: int = 0  # >0: torch-profiler capture of that many steps after the bench
    timeout_s: float | None = None  # READY deadline per profile (None: the watcher's default)
    stall_timeout_s: float = 60.0  # bench: a stream silent this long is an error
    stall_budgets: list[str] = field(default_factory=list)  # start-up: --stall-budget PHASE=S
    sglang_version: str | None = None


@dataclass
class StepOutcome:
    """What the watch step concluded for one launched run."""

    state: str  # READY | CRASHED | STALLED | EXITED | TIMEOUT
    diagnosis: dict[str, Any]


class SweepBackend:
    """The seam between the sweep loop and the world (lifecycle, watch, bench, profiler).

    ``LifecycleBackend`` is the real one; tests drive the loop with a scripted one. Every
    method may raise ``GlmserveError``; ``KeyboardInterrupt`` is handled by the loop.
    """

    def prepare(self, profile: str, opts: SweepOptions) -> Any:  # -> LaunchSpec
        raise NotImplementedError

    def check(self, spec: Any) -> str | None:
        """None when the host can run the spec, else the blocking problems in one line."""
        raise NotImplementedError

    def launch(self, spec: Any) -> str:  # -> run id
        raise NotImplementedError

    def watch(self, run_id: str, opts: SweepOptions) -> StepOutcome:
        raise NotImplementedError

    def bench(self, run_id: str, mode: str, opts: SweepOptions) -> dict[str, Any]:
        raise NotImplementedError

    def capture(self, run_id: str, opts: SweepOptions) -> dict[str, Any]:
        raise NotImplementedError

    def assess(self, run_id: str) -> StepOutcome:
        """Is the server still healthy (after a bench ended early)?"""
        return StepOutcome("READY", {})

    def group_of(self, run_id: str) -> dict[str, Any] | None:
        """A host group's ``{group_id, nodes: [{node_rank, host, run_id}]}`` when ``run_id``
        (what ``launch`` returned) is node 0 of one, else None."""
        return None

    def stop(self, run_id: str) -> None:
        raise NotImplementedError

    def runs_started_since(self, profile: str, since: float) -> list[str]:
        """Runs of ``profile`` started at/after ``since`` (a Ctrl-C inside launch leaves a
        server whose run id the loop never saw)."""
        return []


def _say_nothing(_msg: str) -> None:
    return None


def run_sweep(
    sweep: Sweep,
    opts: SweepOptions,
    backend: SweepBackend,
    say: Any = _say_nothing,
) -> Sweep:
    """Run every unfinished profile of ``sweep`` in order, saving after each step.

    Server crashes and stalls are results (recorded with their diagnosis; the sweep moves
    on). Tool errors (bad profile, unreachable host, failed check, bench error) stop the
    sweep unless ``continue_on_error``. Ctrl-C stops the running server, marks the profile
    interrupted, saves, and re-raises so the CLI exits 130; ``--resume`` picks up there.
    """
    with sweep_lock(sweep.sweep_id), _term_as_interrupt():
        return _run_locked(sweep, opts, backend, say)


@contextlib.contextmanager
def _term_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI timeout, ``kill``) takes the Ctrl-C path: stop the server, save, exit.

    Forked children (bench workers) inherit the handler; in them it falls back to the
    default action so ``Process.terminate()`` still ends them at once.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()

    def on_term(signum: int, frame: Any) -> None:
        if os.getpid() != owner:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def sweep_lock(sweep_id: str) -> Iterator[None]:
    """One process per sweep: a second ``--resume`` of a running sweep is refused."""
    d = sweep_dir(sweep_id)
    d.mkdir(parents=True, exist_ok=True)
    with (d / ".lock").open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            raise ConfigError(
                f"sweep {sweep_id} is being run by another glmserve process (pid {holder})"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run_locked(sweep: Sweep, opts: SweepOptions, backend: SweepBackend, say: Any) -> Sweep:
    sweep.status = RUNNING
    save_sweep(sweep)
    for entry in sweep.entries:
        if entry.finished:
            say(f"{entry.profile}: {entry.status} (kept from before)")
            continue
        if opts.until_first_success and any(e.status == OK for e in sweep.entries):
            entry.status = SKIPPED
            entry.error = "skipped: --until-first-success already has a successful profile"
            save_sweep(sweep)
            continue
        entry.status, entry.started_at, entry.ended_at = RUNNING, time.time(), None
        entry.run_id = entry.diagnosis = entry.error = entry.trace = None
        entry.group_id, entry.nodes, entry.bench = None, None, []
        save_sweep(sweep)
        try:
            _run_entry(sweep, entry, opts, backend, say)
        except KeyboardInterrupt:
            _stop_quietly(entry, backend, say)
            entry.status, entry.ended_at = INTERRUPTED, time.time()
            entry.error = "interrupted (Ctrl-C); the server was stopped"
            sweep.status = "interrupted"
            save_sweep(sweep)
            raise
        except GlmserveError as exc:
            _stop_quietly(entry, backend, say)
            entry.status, entry.error, entry.ended_at = FAILED, str(exc), time.time()
            save_sweep(sweep)
            say(f"{entry.profile}: failed: {exc}")
            if not opts.continue_on_error:
                sweep.status = "stopped"
                save_sweep(sweep)
                raise
            continue
        _stop_quietly(entry, backend, say)
        entry.ended_at = time.time()
        save_sweep(sweep)
    sweep.status = "done"
    save_sweep(sweep)
    return sweep


def _run_entry(
    sweep: Sweep, entry: SweepEntry, opts: SweepOptions, backend: SweepBackend, say: Any
) -> None:
    say(f"{entry.profile}: check")
    spec = backend.prepare(entry.profile, opts)
    problem = backend.check(spec)
    if problem:
        from glmserve.errors import ConfigError as _ConfigError

        raise _ConfigError(f"check failed: {problem}")
    entry.run_id = backend.launch(spec)
    group = backend.group_of(entry.run_id)
    if group:
        entry.group_id, entry.nodes = group["group_id"], group["nodes"]
    save_sweep(sweep)
    if group:
        nodes = ", ".join(f"{n['node_rank']}:{n['host']}" for n in group["nodes"])
        say(f"{entry.profile}: launched group {entry.group_id} (nodes {nodes}); watching")
    else:
        say(f"{entry.profile}: launched run {entry.run_id}; watching")
    outcome = backend.watch(entry.run_id, opts)
    entry.diagnosis = outcome.diagnosis
    if outcome.state != "READY":
        entry.status = CRASHED if outcome.state in ("CRASHED", "EXITED") else STALLED
        d = outcome.diagnosis or {}
        why = " ".join(str(d[k]) for k in ("category", "root_cause") if d.get(k))
        node = f" on node {d['node_rank']} ({d.get('host')})" if "node_rank" in d else ""
        say(f"{entry.profile}: {outcome.state}{node}: {why}")
        return
    for mode in opts.bench:
        say(f"{entry.profile}: bench {mode}")
        result = backend.bench(entry.run_id, mode, opts)
        entry.bench.append(result)
        save_sweep(sweep)
        levels = result.get("levels") or []
        if result.get("complete", True) and not any(lv.get("errors") for lv in levels):
            continue  # every request answered: the server was serving
        # Errors or an early end: a worker that died under load only turns /health 503
        # (SGLang does not notice) and the bench may still call itself complete. Look.
        after = backend.assess(entry.run_id)
        if after.state in ("CRASHED", "EXITED"):
            entry.status, entry.diagnosis = CRASHED, after.diagnosis
            d = after.diagnosis
            why = " ".join(str(d[k]) for k in ("category", "root_cause") if k in d)
            node = f" on node {d['node_rank']} ({d.get('host')})" if "node_rank" in d else ""
            say(f"{entry.profile}: crashed{node} during bench {mode}: {why}")
            return
        if levels and not any(lv.get("completed") for lv in levels):
            sample = next((lv["error_samples"][0] for lv in levels if lv.get("error_samples")), "")
            entry.status = FAILED
            entry.error = f"bench {mode}: every request failed" + (f" ({sample})" if sample else "")
            say(f"{entry.profile}: {entry.error}")
            return
    if opts.capture_steps > 0:
        say(f"{entry.profile}: profiler capture ({opts.capture_steps} steps)")
        entry.trace = backend.capture(entry.run_id, opts)
    entry.status = OK
    say(f"{entry.profile}: ok, decode {_fmt(entry.decode_tok_s())} tok/s")


def _stop_quietly(entry: SweepEntry, backend: SweepBackend, say: Any) -> None:
    """Stop the entry's server, even through a second Ctrl-C; report (not raise) failures."""
    import signal
    import threading

    from glmserve.errors import GlmserveError

    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        run_ids = [entry.run_id] if entry.run_id else []
        if not run_ids and entry.started_at:
            run_ids = backend.runs_started_since(entry.profile, entry.started_at)
        for run_id in run_ids:
            try:
                backend.stop(run_id)
                what = f"group {entry.group_id} (every node)" if entry.group_id else f"run {run_id}"
                say(f"{entry.profile}: stopped {what}")
            except GlmserveError as exc:
                say(f"{entry.profile}: could not stop run {run_id}: {exc}")
                entry.error = (entry.error + "; " if entry.error else "") + f"stop failed: {exc}"
            entry.run_id = entry.run_id or run_id
    finally:
        if main:
            signal.signal(signal.SIGINT, old)


def start_sweep(
    profiles: list[str],
    host: str | None,
    simulate: bool,
    opts: SweepOptions,
    nodes: list[str] | None = None,
) -> Sweep:
    """A new sweep (saved, nothing run yet); ``nodes``: run every profile on that group."""
    if not profiles:
        raise ConfigError("--profiles: give at least one profile, e.g. flashinfer_gtc,trtllm_mla")
    dupes = {p for p in profiles if profiles.count(p) > 1}
    if dupes:
        raise ConfigError(f"--profiles: listed twice: {', '.join(sorted(dupes))}")
    sweep = Sweep(
        sweep_id=new_sweep_id(),
        profiles=list(profiles),
        host=host,
        simulate=simulate,
        nodes=list(nodes or []),
        bench=list(opts.bench),
        options=asdict(opts),
        entries=[SweepEntry(profile=p) for p in profiles],
    )
    save_sweep(sweep)
    return sweep


def resume_options(sweep: Sweep) -> SweepOptions:
    names = set(SweepOptions.__dataclass_fields__)
    return SweepOptions(**{k: v for k, v in sweep.options.items() if k in names})


class LifecycleBackend(SweepBackend):
    """The real thing: profiles -> preflight -> lifecycle launch -> Watcher -> bench -> stop.

    A profile with ``nodes:`` (or every profile, given ``nodes``) runs as a host group through
    ``multinode``; the run id the loop holds is node 0's and every step resolves its group.
    """

    def __init__(
        self,
        host: str | None,
        simulate: bool,
        say: Any = _say_nothing,
        nodes: list[str] | None = None,
    ) -> None:
        from glmserve.remote.hosts import get_host
        from glmserve.store import RunStore

        self.host = get_host(host)
        self.simulate = simulate
        self.say = say
        self.nodes = list(nodes or [])
        self.group_hosts: set[str] = set()  # every node of every group prepared so far
        self.store = RunStore.open()

    def prepare(self, profile: str, opts: SweepOptions) -> Any:
        from dataclasses import replace

        from glmserve.config import profiles
        from glmserve.remote.hosts import get_host

        spec = profiles.load_profile(profile, list(opts.overrides), opts.sglang_version)
        group = self.nodes or spec.nodes
        head = get_host(group[0]) if group else self.host
        if self.simulate:
            py = None if head.is_local else head.python
            spec = profiles.simulate(spec, python=py)
        if group:
            spec = replace(spec, nodes=list(group))
            self.group_hosts.update(group)
        return spec

    def _group(self, run_id: str) -> list[Any]:
        """The group's runs when ``run_id`` belongs to one, else []."""
        from glmserve.deploy.group import resolve_runs

        runs = resolve_runs(self.store, run_id)
        return runs if "group_id" in runs[0].meta else []

    def check(self, spec: Any) -> str | None:
        from glmserve.deploy.preflight import run_checks
        from glmserve.remote.transport import transport_for

        if spec.nodes:
            return self._check_group(spec)
        rows = run_checks(self.host, spec, transport_for(self.host))
        bad = [r for r in rows if r.blocking]
        return "; ".join(f"{r.name}: {r.detail}" for r in bad) or None

    def _check_group(self, spec: Any) -> str | None:
        from glmserve.deploy.group import plan_group
        from glmserve.deploy.preflight import run_group_checks
        from glmserve.errors import TransportError

        hosts, specs = plan_group(spec)
        res = run_group_checks(hosts, specs)
        if res.unreachable:
            raise TransportError(f"unreachable node(s): {', '.join(res.unreachable)}")
        return (
            "; ".join(
                f"{r.name}"
                + ("" if r.node is None else f" (node {r.node} {r.host})")
                + f": {r.detail}"
                for r in res.blocking
            )
            or None
        )

    def launch(self, spec: Any) -> str:
        from glmserve.remote.process import launch_run

        if spec.nodes:
            from glmserve.deploy.group import launch_group

            _gid, runs = launch_group(spec, store=self.store, say=self.say)
            return runs[0].run_id
        return launch_run(spec, self.host.name, store=self.store, say=self.say).run_id

    def group_of(self, run_id: str) -> dict[str, Any] | None:
        from glmserve.deploy.group import group_summary

        runs = self._group(run_id)
        return group_summary(runs) if runs else None

    def watch(self, run_id: str, opts: SweepOptions) -> StepOutcome:
        from glmserve.deploy.watch import Watcher, parse_stall_budgets
        from glmserve.remote.process import transport_for_run

        poll = 0.2 if self.simulate else 1.0
        runs = self._group(run_id)
        if runs:
            return self._watch_group(runs, poll, opts)
        run = self.store.get_run(run_id)
        w = Watcher(
            run,
            transport_for_run(run),
            self.store,
            poll_s=poll,
            timeout_s=opts.timeout_s,
            stall_budgets=parse_stall_budgets(opts.stall_budgets),
        )
        res = w.watch()
        return StepOutcome(res.state, _diagnosis(res.diagnosis))

    def _watch_group(self, runs: list[Any], poll: float, opts: SweepOptions) -> StepOutcome:
        """Every node at once; READY marks the other nodes ready, a failure names its node."""
        from glmserve.deploy.group import mark_followers_ready, watch_group
        from glmserve.deploy.watch import parse_stall_budgets

        res = watch_group(
            runs,
            poll_s=poll,
            timeout_s=opts.timeout_s,
            stall_budgets=parse_stall_budgets(opts.stall_budgets),
        )
        diag = _diagnosis(res.decisive.diagnosis)
        if res.state == "READY":
            mark_followers_ready(runs, self.store)
        else:
            bad = runs[res.failing_rank or 0]
            diag.update(node_rank=res.failing_rank or 0, host=bad.host, node_run_id=bad.run_id)
        return StepOutcome(res.state, diag)

    def bench(self, run_id: str, mode: str, opts: SweepOptions) -> dict[str, Any]:
        from glmserve.bench.runner import BenchSettings, Progress
        from glmserve.bench.session import Gates, run_bench

        settings = BenchSettings(
            base_url="",
            mode=mode,
            concurrency=[1] if mode == "decode" else list(opts.concurrency),
            input_len=opts.input_len,
            output_len=opts.output_len,
            num_prompts=opts.num_prompts,
            stall_timeout=opts.stall_timeout_s,
        )
        outcome = run_bench(settings, run_id, Gates(), Progress())  # a group: via node 0
        if outcome.interrupted:
            raise KeyboardInterrupt
        return outcome.result.to_dict()

    def capture(self, run_id: str, opts: SweepOptions) -> dict[str, Any]:
        from glmserve.profiling.analysis import summarize_analysis
        from glmserve.profiling.capture import capture_profile

        analysis = capture_profile(run_id, steps=opts.capture_steps, load="decode")
        return summarize_analysis(analysis)

    def assess(self, run_id: str) -> StepOutcome:
        """One run, or every node of its group: the first node not READY decides."""
        from glmserve.deploy.watch import assess_run

        runs = self._group(run_id) or [self.store.get_run(run_id)]
        for run in runs:
            info = assess_run(run, self.store)
            run = self.store.get_run(run.run_id)
            diag = {"state": info["state"], "category": run.category, "root_cause": run.root_cause}
            if run.hint:
                diag["hint"] = run.hint
            if len(runs) > 1:
                diag.update(node_rank=run.meta.get("node_rank"), host=run.host)
            diag = {k: v for k, v in diag.items() if v is not None and v != ""}
            if info["state"] != "READY":
                return StepOutcome(str(info["state"]), diag)
        return StepOutcome("READY", {"state": "READY"})

    def stop(self, run_id: str) -> None:
        from glmserve.deploy.group import stop_group
        from glmserve.remote.process import stop_run

        runs = self._group(run_id)
        if runs:
            stop_group(runs, store=self.store)
        else:
            stop_run(run_id, store=self.store)

    def runs_started_since(self, profile: str, since: float) -> list[str]:
        hosts = {self.host.name} | self.group_hosts
        return [
            r.run_id
            for r in self.store.list_runs()
            if r.host in hosts
            and r.profile == profile
            and r.created_at >= since - 1.0
            and r.state != "STOPPED"
        ]


def _diagnosis(d: Any) -> dict[str, Any]:
    """The parts of a watch Diagnosis a sweep entry keeps."""
    data = d.to_dict()
    keep = ("state", "category", "root_cause", "hint", "line", "phase", "patch_active")
    return {k: data.get(k) for k in keep if data.get(k) is not None}
