"""The sweep runner: every unfinished profile through check -> launch -> watch -> bench ->
(capture) -> stop, saving after each step.

The loop drives the world through the small ``SweepBackend`` seam, so tests run it with a
scripted backend and no servers. Server crashes and stalls are results; tool errors stop the
sweep unless ``continue_on_error``; Ctrl-C (or SIGTERM) stops the server, saves and re-raises.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from glmserve.errors import (
    GlmserveError,
)
from glmserve.sigterm import sigterm_as_interrupt
from glmserve.sweep.agreement import judge_all, probe_spec_for
from glmserve.sweep.state import (
    CRASHED,
    FAILED,
    INTERRUPTED,
    OK,
    RUNNING,
    SKIPPED,
    STALLED,
    Sweep,
    SweepEntry,
    SweepOptions,
    save_sweep,
    sweep_lock,
)
from glmserve.sweep.summary import format_figure


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

    def reclaim(self, run_id: str) -> bool:
        """Stop ``run_id`` (recorded in this sweep's state) if it is still up: a sweep killed
        outright (SIGKILL, a lost terminal) never stopped its server. True when something
        was stopped. The real backend asks the run store and stops by the verified process
        group; a backend that cannot tell leaves it (the check then refuses a taken port)."""
        return False

    def runs_started_since(self, profile: str, since: float) -> list[str]:
        """Runs of ``profile`` started at/after ``since`` (a Ctrl-C inside launch leaves a
        server whose run id the loop never saw)."""
        return []


def say_nothing(_msg: str) -> None:
    return None


def run_sweep(
    sweep: Sweep,
    opts: SweepOptions,
    backend: SweepBackend,
    say: Any = say_nothing,
) -> Sweep:
    """Run every unfinished profile of ``sweep`` in order, saving after each step.

    Server crashes and stalls are results (recorded with their diagnosis; the sweep moves
    on). Tool errors (bad profile, unreachable host, failed check, bench error) stop the
    sweep unless ``continue_on_error``. Ctrl-C stops the running server, marks the profile
    interrupted, saves, and re-raises so the CLI exits 130; ``--resume`` picks up there.
    """
    with sweep_lock(sweep.sweep_id), sigterm_as_interrupt():
        return _run_locked(sweep, opts, backend, say)


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
        try:
            _reclaim(entry, backend, say)  # first: on failure the entry still names the run
            entry.status, entry.started_at, entry.ended_at = RUNNING, time.time(), None
            entry.run_id = entry.diagnosis = entry.error = entry.trace = None
            entry.group_id, entry.nodes, entry.bench = None, None, []
            save_sweep(sweep)
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
    judge_all(sweep, opts)
    sweep.status = "done"
    save_sweep(sweep)
    return sweep


def _reclaim(entry: SweepEntry, backend: SweepBackend, say: Any) -> None:
    """Before an unfinished entry runs again, stop the server its earlier attempt recorded
    and may have left up (the sweep process was killed before it could stop it): else its
    port is taken and the check refuses the profile. Only the run this entry recorded is
    touched, by the stop machinery (verified process group); anything else on the port is
    still the check's to refuse. A failure to stop is the entry's error (GlmserveError)."""
    if not entry.run_id:
        return
    what = f"group {entry.group_id}" if entry.group_id else f"run {entry.run_id}"
    if backend.reclaim(entry.run_id):
        say(f"{entry.profile}: stopped {what}, left running by the earlier attempt")


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
        entry.status = _failed_start_status(outcome.state)
        d = outcome.diagnosis or {}
        why = " ".join(str(d[k]) for k in ("category", "root_cause") if d.get(k))
        node = f" on node {d['node_rank']} ({d.get('host')})" if "node_rank" in d else ""
        say(f"{entry.profile}: {outcome.state}{node}: {why}")
        return
    spec = probe_spec_for(sweep, entry, opts)
    for i, mode in enumerate(opts.bench):
        say(f"{entry.profile}: bench {mode}" + (" + output probe" if spec and not i else ""))
        probe = {"probe": spec} if spec is not None and i == 0 else {}
        result = backend.bench(entry.run_id, mode, opts, **probe)
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
    say(f"{entry.profile}: ok, decode {format_figure(entry.decode_tok_s())} tok/s")


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


def _failed_start_status(state: str) -> str:
    """A start that did not reach READY: crashed, stalled, or stopped by `glmserve stop`
    from outside (FAILED, not a verdict on the config: ``--resume`` runs it again)."""
    if state in ("CRASHED", "EXITED"):
        return CRASHED
    return FAILED if state == "STOPPED" else STALLED
