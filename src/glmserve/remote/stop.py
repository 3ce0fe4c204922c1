"""Stop runs: TERM what provably is the run's, wait, KILL, verify nothing of it is left.

Every signal goes through :func:`glmserve.remote.process.signal_script` (re-checked on the host
right before it); a Slurm run is cancelled as its verified job instead. The store records the
stop, best effort: the processes are stopped even when it cannot be written.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from glmserve.errors import GlmserveError, StopFailed, StoreError
from glmserve.remote.launcher import launch_in_progress
from glmserve.remote.process import Ownership, run_ownership, signal_script
from glmserve.remote.run_host import host_note, transport_for_run
from glmserve.remote.transport import Transport
from glmserve.store import RunRecord, RunStore


def _wait_gone(t: Transport, run: RunRecord, deadline_s: float) -> Ownership:
    end = time.monotonic() + deadline_s
    own = run_ownership(t, run)
    while own.alive and time.monotonic() < end:
        time.sleep(0.1)
        own = run_ownership(t, run)
    return own


def gpu_compute_pids(t: Transport) -> list[int] | None:
    """PIDs nvidia-smi lists as GPU compute processes; None where there is no nvidia-smi."""
    res = t.run(
        "command -v nvidia-smi >/dev/null || { echo NO_NVIDIA_SMI; exit 0; }; "
        "nvidia-smi --query-compute-apps=pid --format=csv,noheader",
        timeout=30,
    )
    if "NO_NVIDIA_SMI" in res.stdout or not res.ok:
        return None
    return [int(x) for x in res.stdout.split() if x.strip().isdigit()]


def stop_process(t: Transport, run: RunRecord, timeout: float = 15.0) -> dict[str, Any]:
    """TERM what provably is the run's, wait ``timeout``, KILL, verify; the store is not used.

    Each signal is sent by :func:`signal_script`, which re-checks start times on the host right
    before it, so nothing but the recorded process's group (or its verified members) is hit.
    """
    own = run_ownership(t, run)
    report: dict[str, Any] = {"run_id": run.run_id, "host": run.host, "signalled": [], "left": []}
    known_pids = set(own.pids) | set(run.meta.get("ready_pids", []))
    if not own.alive:
        report["note"] = own.reason or "not running"
    else:
        report["signalled"] = own.pids
        t.run(signal_script(run, own, "TERM"))
        own = _wait_gone(t, run, timeout)
        if own.alive:
            t.run(signal_script(run, own, "KILL"))  # own was re-verified just now
            report["killed"] = own.pids
            own = _wait_gone(t, run, 10)
        report["left"] = own.pids
    gpu = gpu_compute_pids(t)
    if gpu is not None:
        report["gpu_left"] = sorted(set(gpu) & known_pids)
        report["left"] = sorted(set(report["left"]) | set(report["gpu_left"]))
    if report["left"]:
        raise GlmserveError(
            f"run {run.run_id}: processes still alive after KILL: {report['left']} on {run.host}"
        )
    return report


def _await_launch(store: RunStore, run: RunRecord, wait_s: float = 60.0) -> RunRecord:
    """A run another glmserve is launching right now: wait until its process is recorded
    (stopping it before would mark it stopped while its server comes up, unrecorded)."""
    end = time.monotonic() + wait_s
    while launch_in_progress(run) and time.monotonic() < end:
        time.sleep(0.2)
        run = store.get_run(run.run_id)
    if launch_in_progress(run):
        raise GlmserveError(
            f"run {run.run_id} is still being launched (glmserve pid "
            f"{run.meta.get('launched_by', {}).get('pid')}); stop it once it has started"
        )
    return run


def stop_run(run_id: str, timeout: float = 15.0, store: RunStore | None = None) -> dict[str, Any]:
    """TERM the run's process group, wait ``timeout``, KILL, verify nothing of it is left.

    Recording the stop is best effort: when the store cannot be written (a full disk) the
    processes are stopped all the same and the report says ``recorded: False`` and why."""
    store = store or RunStore.open()
    run = _await_launch(store, store.get_run(run_id))
    # Said before the first signal: a watcher (a `launch` still waiting on this run) or a
    # `status` that finds the processes gone meanwhile must not call it a crash or an exit.
    t = transport_for_run(run)
    note = host_note(run)
    from glmserve.remote.launch import adopt_started  # launch imports this module

    run = adopt_started(store, t, run)  # its launcher died before recording the process
    if run.pgid is not None:
        run_ownership(t, run)  # unverifiable: ProcessUnverified, before any STOPPING is said
    with contextlib.suppress(StoreError):
        store.add_event(run.run_id, "STOPPING", None, {"by_pid": os.getpid()})
    if run.meta.get("slurm"):  # a Slurm run: scancel of its verified job
        from glmserve.remote.slurm import cancel_job

        report = cancel_job(t, run, timeout)
    else:
        report = stop_process(t, run, timeout)
    if note:
        report["host_note"] = note  # acted on the recorded host all the same
    with contextlib.suppress(StoreError):
        run = store.get_run(run.run_id)  # a verdict reached meanwhile (CRASHED, STALLED) holds
    fields: dict[str, Any] = {"ended_at": run.ended_at or time.time()}
    if not run.terminal:
        fields["state"] = "STOPPED"
    try:
        store.update_run(run.run_id, **fields)
        store.add_event(run.run_id, "STOPPED", None, report)
        report["recorded"] = True
    except StoreError as exc:
        report["recorded"] = False
        report["store_error"] = str(exc)
    return report


def stop_runs(
    runs: list[RunRecord], timeout: float = 15.0, store: RunStore | None = None
) -> list[dict[str, Any]]:
    """Stop every run in ``runs``, each tried whatever happened to the others: one report per
    run, ``ok`` False with ``error`` (and ``exit_code``) for those that failed."""
    store = store or RunStore.open()
    reports = []
    for run in runs:
        try:
            rep = {**stop_run(run.run_id, timeout=timeout, store=store), "ok": True}
        except GlmserveError as exc:
            rep = {"run_id": run.run_id, "host": run.host, "ok": False, "error": str(exc)}
            rep["exit_code"] = exc.exit_code
            note = host_note(run)
            if note:
                rep["host_note"] = note
        if "group_id" in run.meta:
            rep["node_rank"] = run.meta.get("node_rank")
            rep["group_id"] = run.meta.get("group_id")
        reports.append(rep)
    return reports


def stop_failure(reports: list[dict[str, Any]]) -> StopFailed | None:
    """The error summing up failed stops (None when every run stopped)."""
    failed = [r for r in reports if not r["ok"]]
    if not failed:
        return None
    names = ", ".join(f"{r['run_id']} ({r['host']})" for r in failed)
    return StopFailed(
        f"{len(failed)} of {len(reports)} run(s) not stopped: {names}; first: {failed[0]['error']}",
        int(failed[0]["exit_code"]),
    )
