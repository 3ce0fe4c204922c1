"""The lifecycle steps that differ on a ``kind: slurm`` host, called from ``Deployment``.

- launch: the run is recorded and uploaded as on any host, then ``sbatch``-ed (not started);
  the job's id, name, user, submit time and cluster go into ``meta["slurm"]``;
- watch: first the queue (PENDING with Slurm's reason, honouring ``--timeout``), then the
  usual log watch with its stall budgets starting when the job runs; the queue time is
  reported apart (``meta["slurm"]["queued_s"]``) and never counts as a stall;
- verdict: a job ended by the scheduler is judged by ``JobState``: TIME_LIMIT, NODE_FAIL,
  PREEMPTED (their own exit codes); cancelled from outside glmserve is EXITED, saying so;
- status: the job's state (PENDING and its reason, the node list) beside the log's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from glmserve.config.spec import LaunchSpec
from glmserve.errors import ConfigError, GlmserveError
from glmserve.remote.host_config import HostConfig
from glmserve.remote.hosts import as_host
from glmserve.store import RunRecord, RunStore

Say = Callable[[str], None]


def launch_job_run(
    spec: LaunchSpec,
    host_name: HostConfig | str,
    *,
    store: RunStore,
    replace_existing: bool = False,
    say: Say = lambda _m: None,
    meta: dict[str, Any] | None = None,
) -> RunRecord:
    """Record, upload and submit one run as a Slurm job; returns its record (STARTING).

    As ``launch.launch_run``: the store row (claiming host:port) is written first; a failed
    upload or submission ends it FAILED. The port is the node's, unknown before the job runs,
    so only the store's claim guards it (a live run on the same host and port is refused, or
    cancelled with ``--replace``)."""
    from glmserve.remote.launch import _upload, new_run_id, new_run_record, resolve_remote_dir
    from glmserve.remote.slurm import job_ownership, submit
    from glmserve.remote.stop import stop_run
    from glmserve.remote.transport import transport_for

    host = as_host(host_name)  # the plan's HostConfig: hosts.yaml is not read again
    store.check()
    t = transport_for(host)
    for old in store.list_runs(host=host.name, port=spec.port, live_only=True):
        if job_ownership(t, old).alive:
            if not replace_existing:
                raise ConfigError(
                    f"run {old.run_id} (profile {old.profile}) is alive on {host.name}:"
                    f"{spec.port}; stop it (glmserve stop {old.run_id}) or launch with --replace"
                )
            say(f"stopping run {old.run_id} on {host.name}:{spec.port} (--replace)")
            stop_run(old.run_id, store=store)
        else:
            store.update_run(old.run_id, ended_at=time.time())
    multi = multinode(spec)  # (N, dist port): one job of N nodes, one srun task each
    run_id = new_run_id(store)
    workdir = resolve_remote_dir(t, host.resolved_workdir)
    rec, meta_json = new_run_record(run_id, host, spec, workdir, meta)
    run_dir = rec.run_dir
    store.add_run(rec)
    try:
        if multi is None:
            _upload(t, spec, run_dir, meta_json)
            job = submit(t, host, run_dir, run_id)
        else:
            node_spec, script = multinode_files(host, spec, *multi)
            _upload(t, node_spec, run_dir, meta_json)
            t.put(f"{run_dir}/launch.sh", node_launch_script(node_spec).encode(), mode=0o755)
            job = submit(t, host, run_dir, run_id, script)
            job.update(nnodes=multi[0], dist_port=multi[1])
    except BaseException:
        with contextlib.suppress(GlmserveError):
            store.update_run(run_id, state="FAILED", ended_at=time.time())
        raise
    # the job is the run's anchor from now on (launched_by only marks a launch in flight)
    new_meta = {k: v for k, v in rec.meta.items() if k != "launched_by"}
    new_meta["slurm"] = job
    store.update_run(run_id, meta=new_meta)
    store.add_event(run_id, "SUBMITTED", None, job)
    say(f"run {run_id}: Slurm job {job['job_id']} ({job['job_name']}) submitted")
    return store.get_run(run_id)


_NODE_FLAGS = ("--nnodes", "--node-rank", "--dist-init-addr", "--nccl-init-addr")


def multinode(spec: LaunchSpec) -> tuple[int, int] | None:
    """(nodes, dist-init port) of a profile run as one multi-node job (``--nnodes N``, N>1,
    e.g. ``--set server.nnodes=2``); None for one node. The rank and the rendezvous host are
    the allocation's, known only when it runs: a profile's ``--node-rank`` is refused; its
    ``--dist-init-addr`` gives only the port (default ``--port`` + 1000, as a host group)."""
    from glmserve.deploy.plan import DIST_PORT_OFFSET

    raw = spec.flags.get_any(("--nnodes",))
    if raw is None or raw is True:
        return None
    if not str(raw).isdigit() or int(raw) < 1:
        raise ConfigError(f"profile {spec.profile}: --nnodes {raw!r} is not a node count")
    n = int(raw)
    if n < 2:
        return None
    if spec.flags.get_any(("--node-rank",)) is not None:
        raise ConfigError(
            f"profile {spec.profile}: --node-rank is set per node by Slurm "
            "($SLURM_NODEID) for a multi-node job; remove it"
        )
    if spec.tp_size % n:
        raise ConfigError(
            f"profile {spec.profile}: --tp-size {spec.tp_size} does not split over {n} nodes"
        )
    dist = spec.flags.get_any(("--dist-init-addr", "--nccl-init-addr"))
    port = str(dist).rpartition(":")[2] if isinstance(dist, str) else ""
    return n, int(port) if port.isdigit() else spec.port + DIST_PORT_OFFSET


def node_launch_script(node_spec: LaunchSpec) -> str:
    """``launch.sh`` of a multi-node job: the rendered script of the profile without its node
    flags, its ``exec`` line taking them as arguments (``"$@"``) from the srun task."""
    from glmserve.config.render import render_script

    return render_script(node_spec).rstrip("\n") + ' "$@"\n'


def multinode_files(host: Any, spec: LaunchSpec, nnodes: int, port: int) -> tuple[Any, str]:
    """(the spec every node runs, without node flags; ``job.sbatch``: ``--nodes N``, one
    ``srun`` task per node running ``bash launch.sh --nnodes N --node-rank $SLURM_NODEID
    --dist-init-addr <first host of the allocation>:<port>``)."""
    from glmserve.deploy.plan import drop_flags
    from glmserve.remote.slurm import multinode_job_script

    node_spec = dataclasses.replace(spec, argv=drop_flags(spec.argv, _NODE_FLAGS))
    return node_spec, multinode_job_script(host, nnodes, port, ["bash", "launch.sh"])


def _diagnosis(**changes: Any) -> Any:
    from glmserve.diagnose import LogDiagnoser

    return dataclasses.replace(LogDiagnoser().diagnosis, **changes)


def wait_queue(
    run: RunRecord,
    store: RunStore,
    *,
    poll_s: float,
    timeout_s: float | None,
    on_tick: Callable[[Any], None] | None,
) -> tuple[Any | None, float]:
    """Wait while the job is queued. Returns (None, queued seconds) once it runs, or
    (WatchResult, queued seconds) when the watch ends in the queue: TIMEOUT at ``timeout_s``
    (the job stays queued; ``stop`` cancels it), or the job's end (judged by the caller)."""
    from glmserve.deploy.watch import DEFAULT_DEADLINE_S, WatchResult, WatchTick
    from glmserve.remote.run_host import transport_for_run
    from glmserve.remote.slurm import job_ownership, node_address

    t = transport_for_run(run)
    deadline = DEFAULT_DEADLINE_S if timeout_s is None else timeout_s
    started = time.monotonic()
    last_reason = None
    while True:
        own = job_ownership(t, run)
        job = own.job
        waited = time.monotonic() - started
        if job is None or not job.queued:
            if job is not None and job.running and run.meta["slurm"].get("nodes"):
                return None, 0.0  # seen running before (a second watch): nothing queued now
            if job is not None and job.running:
                addr = node_address(t, job.nodes)
                slurm = {**run.meta["slurm"], "nodes": job.nodes, "node_addr": addr,
                         "queued_s": round(waited, 3), "last_state": job.state}  # fmt: skip
                run.meta["slurm"] = slurm
                store.update_run(run.run_id, meta=run.meta)
                store.add_event(run.run_id, "RUNNING", job.nodes, {"queued_s": waited})
                return None, waited
            d = _diagnosis(root_cause=own.reason or "job ended in the queue")
            return WatchResult("EXITED", d, waited, 0), waited
        if job.reason != last_reason:
            store.add_event(run.run_id, "PENDING", job.reason, {"job_id": job.job_id})
            last_reason = job.reason
        if on_tick:
            on_tick(WatchTick(run.run_id, "PENDING", waited, "", 0,
                              note=f"queued: {job.reason}"))  # fmt: skip
        if deadline and deadline > 0 and waited >= deadline:
            hint = (
                f"job {job.job_id} still PENDING (Reason: {job.reason}) after {waited:.0f}s "
                f"(--timeout {deadline:g}); it stays queued: `glmserve stop {run.run_id}` "
                "cancels it"
            )
            d = _diagnosis(hint=hint, root_cause=f"PENDING ({job.reason})")
            store.add_event(run.run_id, "TIMEOUT", hint, {"reason": job.reason})
            return WatchResult("TIMEOUT", d, waited, 0, extra={"pending": job.reason}), waited
        time.sleep(poll_s)


def judge_end(run: RunRecord, store: RunStore, result: Any) -> Any:
    """A failed watch of a Slurm run: when the scheduler ended the job (its time limit, a
    node failure, a preemption, a scancel from outside), say so; else the log's verdict."""
    from glmserve.remote.run_host import transport_for_run
    from glmserve.remote.slurm import job_ownership, scheduler_end

    if result.state not in ("EXITED", "CRASHED"):
        return result
    own = job_ownership(transport_for_run(run), run)
    job = own.job
    if job is None:
        return result
    if job.fields.get("source") != "sacct":  # what scontrol last said (no accounting: all)
        run.meta["slurm"] = {**run.meta["slurm"], "last_state": f"{job.state} ({job.reason})"}
        store.update_run(run.run_id, meta=run.meta)
    ended = scheduler_end(own)
    if ended is None or store.stop_requested(run.run_id):
        return result
    verdict, cause, hint = ended
    d = dataclasses.replace(result.diagnosis, root_cause=cause, hint=hint, category=None)
    store.update_run(
        run.run_id, state=verdict, root_cause=cause, hint=hint, category=None,
        ended_at=run.ended_at or time.time(),
    )  # fmt: skip
    store.add_event(run.run_id, verdict, cause, {"job_state": job.state, "reason": job.reason})
    return dataclasses.replace(result, state=verdict, diagnosis=d)


def watch_job(run: RunRecord, store: RunStore, watcher: Callable[..., Any], **kw: Any) -> Any:
    """Queue, then ``watcher(timeout_s=what is left)`` (the usual log watch), then judged by
    the job's end; returns the WatchResult with ``extra["queued_s"]``."""
    timeout_s = kw.pop("timeout_s", None)
    res, queued = wait_queue(
        run, store, poll_s=kw.get("poll_s", 1.0), timeout_s=timeout_s, on_tick=kw.get("on_tick")
    )
    if res is None:
        left = None if timeout_s is None or timeout_s <= 0 else max(0.001, timeout_s - queued)
        res = watcher(store.get_run(run.run_id), timeout_s=left, **kw)
    res = judge_end(store.get_run(run.run_id), store, res)
    res.extra["queued_s"] = round(queued, 3)
    return res


def status_fields(run: RunRecord) -> dict[str, Any]:
    """What ``status`` adds for a Slurm run: the job, its state and reason, its nodes; a
    queued job is PENDING whatever its (empty) log says."""
    from glmserve.remote.run_host import transport_for_run
    from glmserve.remote.slurm import job_ownership

    rec = run.meta.get("slurm") or {}
    own = job_ownership(transport_for_run(run), run)
    out: dict[str, Any] = {"job_id": rec.get("job_id"), "queued_s": rec.get("queued_s")}
    if own.job is not None:
        out.update(job_state=own.job.state, reason=own.job.reason, nodes=own.job.nodes)
        if own.job.queued:
            out["state"] = "PENDING"
    else:
        out["job_state"] = own.reason
    return out
