"""The current truth about one run for ``status``: its processes, ``/health``, its log; the
store is updated with what was found."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from glmserve.deploy.port_owner import PortView, port_taken, port_view
from glmserve.deploy.watch import _val
from glmserve.diagnose import LogDiagnoser, State
from glmserve.errors import TransportError
from glmserve.remote.address import run_probe_host
from glmserve.remote.endpoint import health_status
from glmserve.remote.process import run_ownership
from glmserve.remote.transport import Transport
from glmserve.store import RunRecord, RunStore


def _run_health(t: Transport, run: RunRecord, was_ready: bool) -> tuple[bool | None, int | None]:
    """(healthy, status code) of ``GET /health`` on the run's port; (None, None) when the
    port cannot be reached. A READY server that answers slowly gets one more look."""
    with contextlib.ExitStack() as stack:
        try:
            base = stack.enter_context(t.endpoint(run.port, run_probe_host(run.spec)))
        except TransportError:
            return None, None
        code = health_status(base, timeout=2.0)
        if code != 200 and was_ready:  # one more look: a busy server may be slow
            time.sleep(1.0)
            code = health_status(base, timeout=2.0)
        return code == 200, code


def assess_run(run: RunRecord, store: RunStore, t: Transport | None = None) -> dict[str, Any]:
    """Current truth about one run for ``status``: processes, /health, the log; store updated.

    A worker that dies after READY is not noticed by SGLang (``/health`` only turns 503), so
    the processes alive at READY (``meta.ready_pids``) are checked one by one. As in the
    watcher, READY needs the port's listener to be the run's where the host shows it: another
    server on the port answers ``/health`` too. A multi-node follower (node rank > 0) serves
    only SGLang's dummy ``/health`` (``engine._launch_subprocesses``), which says no more than
    its processes being alive, so its READY rests on its processes alone.
    """
    from glmserve.remote.launch import adopt_started
    from glmserve.remote.run_host import transport_for_run
    from glmserve.remote.runlog import read_log_bytes
    from glmserve.remote.slurm import scheduler_end

    t = t or transport_for_run(run)
    run = adopt_started(store, t, run)  # its launcher died before recording the process
    own = run_ownership(t, run)
    data, _ = read_log_bytes(t, run.log_path)
    diag = LogDiagnoser()
    for line in data.decode("utf-8", "replace").splitlines():
        diag.feed(line)
    d = diag.diagnosis
    state, fields = run.state, {}
    healthy: bool | None = None
    code: int | None = None
    if own.alive:
        missing = [p for p in run.meta.get("ready_pids", []) if p not in own.pids]
        was_ready = run.ready_at is not None
        follower = int(run.meta.get("node_rank") or 0) > 0
        port = PortView("unknown") if follower else port_view(t, run, own.pids)
        if not follower and port.state != "foreign":  # else it is another server's answer
            healthy, code = _run_health(t, run, was_ready)
        hint = (
            "SGLang does not notice a dead worker (/health only turns 503): read "
            f"`glmserve logs {run.run_id} -n 100`, then `glmserve stop {run.run_id}`"
        )
        if d.state is State.READY and port.state == "foreign":
            d = port_taken(d, run.port)
        if d.state is State.CRASHED:
            state = "CRASHED"
        elif missing:
            state = "CRASHED"
            fields = {
                "category": "CRASH",
                "root_cause": f"process(es) {missing} of the run died after READY",
                "hint": hint,
            }
        elif was_ready and healthy is False:
            state = "CRASHED"
            fields = {
                "category": "CRASH",
                "root_cause": f"GET /health -> {code or 'no answer'} after READY while the "
                "server process is up: a worker likely died",
                "hint": hint,
            }
        elif (
            healthy
            or (follower and was_ready)
            or (d.state is State.READY and port.state in ("ours", "unknown"))
        ):
            state = "READY"
        elif run.state == "STALLED":
            state = "STALLED"  # the watcher's verdict holds until the log moves on to READY
        elif d.state is not State.READY:
            state = d.state.value
        # else: the log says ready, the port shows no listener yet: the stored state holds
    elif run.ended_at is not None or run.state in ("STOPPED", "FAILED"):
        pass  # already seen ended (stopped, or judged): its verdict holds
    elif store.stop_requested(run.run_id):
        # being stopped right now: the stop ends it; a verdict reached before (STALLED) holds
        state = run.state if run.terminal else "STOPPED"
        fields["ended_at"] = time.time()
    elif ended := scheduler_end(own):  # a Slurm job ended by the scheduler
        state = ended[0]
        fields = {"root_cause": ended[1], "hint": ended[2], "ended_at": time.time()}
    else:
        d = d.exited(None)  # dead: a warning such as a soft watchdog line explains it
        state = "CRASHED" if d.state is State.CRASHED else "EXITED"
        if run.ended_at is None:
            fields["ended_at"] = time.time()
    if state == "CRASHED" and "category" not in fields and d.state is State.CRASHED:
        fields.update(category=_val(d.category), root_cause=d.root_cause, hint=d.hint)
    if state != run.state or fields:
        store.update_run(run.run_id, state=state, **fields)
        store.add_event(run.run_id, state, fields.get("root_cause"), {"assessed": True})
        run = store.get_run(run.run_id)
    end = run.ended_at or time.time()
    patch = d.patch_active if run.patches and own.alive else None  # a dead rank runs nothing
    if run.patches and patch is None:
        patch = f"0/{run.tp_size}"
    return {
        "run_id": run.run_id,
        "state": run.state,
        "host": run.host,
        "profile": run.profile,
        "port": run.port,
        "pid": run.pid,
        "uptime_s": round(end - run.created_at, 1),
        "alive_pids": own.pids,
        "alive": own.alive,  # a Slurm run: its job (no PIDs of a node are known)
        "healthy": healthy,
        "phase": d.phase.value,
        "category": run.category,
        "root_cause": run.root_cause,
        "hint": run.hint,
        "patch_active": patch,
        "patches": run.patches,
        "launcher": run.launcher,
    }
