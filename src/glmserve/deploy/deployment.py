"""A deployment: the runs of one plan once launched (or found in the store by an id), and
every lifecycle step over them: check, launch, watch, assess, logs, stop.

A single host is a group of one, so the CLI verbs and the sweep call the same methods and
never ask which it is; where the two differ, the difference is written here, once:

- an id names a run (id or unique prefix), a group (``g...``), or a node's run, which stands
  for its whole group (:meth:`Deployment.resolve`);
- a group is READY when node 0 is READY and no node failed; the other nodes are then
  recorded READY too (``status`` checks their processes);
- any node's crash or stall fails the group; a failed group is stopped at once, naming the
  failing node (its other nodes cannot serve alone), while a single run that stalled keeps
  running and one that crashed is settled (ended, its leftovers stopped:
  :meth:`Deployment.settle_crash`); its log stays for ``logs`` and ``diagnose``;
- a node failing to start stops the nodes already started.

Each node is a normal recorded run whose ``meta`` links it to its group (``group_id``,
``node_rank``, ``nnodes``, ``nodes``, ``dist_init_addr``); a single run has no such keys.
"""

from __future__ import annotations

import contextlib
import queue
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from glmserve.deploy.plan import Plan
from glmserve.errors import ConfigError, GlmserveError, RunNotFound
from glmserve.remote.host_config import HostConfig
from glmserve.store import RunRecord, RunStore

Say = Callable[[str], None]
# How long a crashed server's process group gets to end by itself (SGLang's own teardown,
# kill_process_tree, is one SIGKILL per process: well under a second) before what is left is
# stopped; and the stop's TERM-to-KILL wait.
CRASH_SETTLE_S = 5.0
CRASH_STOP_TIMEOUT_S = 10.0
Tick = Callable[[int, Any], None]  # (node rank, WatchTick)


def _quiet(_msg: str) -> None:
    return None


@dataclass
class Verdict:
    """How a watch ended: READY, or how it failed and (in a group) on which node."""

    state: str  # READY | CRASHED | STALLED | EXITED | TIMEOUT
    failing_rank: int | None  # the node that failed (a group only; None: READY or one run)
    results: dict[int, Any] = field(default_factory=dict)  # rank -> WatchResult
    elapsed_s: float = 0.0

    @property
    def decisive(self) -> Any:
        """The WatchResult that decided the verdict (node 0's when READY or a single run)."""
        return self.results[self.failing_rank if self.failing_rank is not None else 0]


class Deployment:
    """The runs of one deployment, node 0 first, and the lifecycle steps over them.

    Before its launch a deployment holds only its plan (``check``, ``launch`` need it); after,
    or when resolved from the store, it holds the runs (the other steps need those).
    """

    def __init__(
        self,
        runs: list[RunRecord] | None = None,
        store: RunStore | None = None,
        *,
        plan: Plan | None = None,
        named: RunRecord | None = None,
    ) -> None:
        self.runs = list(runs or [])
        self._store = store
        self.plan = plan
        self.named = named  # the one run an id named (None: a group id, or a launch)
        # run id -> the host it was launched on, for runs this command launched (the plan's
        # HostConfig); a run found in the store is reached by its recorded entry instead.
        self.hosts: dict[str, HostConfig] = {}

    def transport(self, run: RunRecord) -> Any:
        """The transport to ``run``'s host: the plan's host for a run launched by this
        command, else the entry the run was launched with (``run_host.run_host``)."""
        from glmserve.remote.run_host import transport_for_run
        from glmserve.remote.transport import transport_for

        host = self.hosts.get(run.run_id)
        return transport_for(host) if host is not None else transport_for_run(run)

    # -- what it is -------------------------------------------------------------------------
    @property
    def store(self) -> RunStore:
        if self._store is None:
            self._store = RunStore.open()
        return self._store

    @property
    def group_id(self) -> str | None:
        gid = self.runs[0].meta.get("group_id") if self.runs else None
        return gid if isinstance(gid, str) else None

    @property
    def grouped(self) -> bool:
        """A host group (each node its own run); False: a single run."""
        if self.runs:
            return self.group_id is not None
        return self.plan is not None and self.plan.grouped

    @property
    def id(self) -> str:
        """What names it to the user: the group id, or the run id."""
        return self.group_id or self.runs[0].run_id

    @property
    def head(self) -> RunRecord:
        """Node 0's run: the only one serving HTTP (a single run: itself)."""
        if not self.grouped:
            return self.runs[0]
        head = [r for r in self.runs if int(r.meta.get("node_rank", -1)) == 0]
        if not head:
            raise RunNotFound(
                f"group {self.group_id} has no node 0 run recorded (the only node serving "
                "HTTP); relaunch the group"
            )
        return head[0]

    @property
    def followers(self) -> list[RunRecord]:
        """The nodes after node 0 (none for a single run)."""
        return self.runs[1:]

    def records(self) -> list[RunRecord]:
        """Every node's run as the store has it now."""
        return [self.store.get_run(r.run_id) for r in self.runs]

    def summary(self) -> dict[str, Any] | None:
        """What a bench result / sweep entry records of a group; None for a single run."""
        return group_summary(self.runs) if self.grouped else None

    # -- finding one -----------------------------------------------------------------------
    @classmethod
    def resolve(cls, store: RunStore, ident: str) -> Deployment:
        """The one place an id is read: a group id (``g...``, or a unique prefix) is its
        group; a run id (or unique prefix) is its run, or, for a node of a group, the whole
        group (``named`` keeps the run it named). Group ids are never run ids (those are
        hex only)."""
        if ident.startswith("g"):
            runs = group_runs(store, ident)
            if runs:
                return cls(runs, store)
            if ident[1:].isalnum():  # reads as a group id: name both kinds
                try:
                    store.get_run(ident)
                except RunNotFound:
                    raise RunNotFound(f"no group or run {ident!r} (see `glmserve runs`)") from None
        run = store.get_run(ident)
        gid = run.meta.get("group_id")
        runs = group_runs(store, gid, exact=True) if isinstance(gid, str) else [run]
        return cls(runs, store, named=run)

    # -- before the launch -----------------------------------------------------------------
    def check(self) -> Any:
        """The plan's preflight (a ``GroupCheck``): every node with its own argv and GPU
        share; for a group, across nodes too. A single host that cannot be reached raises
        TransportError; a group's unreachable nodes are listed (the others still checked)."""
        from glmserve.deploy.preflight import GroupCheck, run_checks, run_group_checks
        from glmserve.remote.transport import transport_for

        plan = self._plan()
        if not plan.grouped:
            node = plan.nodes[0]
            return GroupCheck(run_checks(node.host, node.spec, transport_for(node.host)), [])
        return run_group_checks([n.host for n in plan.nodes], [n.spec for n in plan.nodes])

    @classmethod
    def launch(
        cls,
        plan: Plan,
        *,
        store: RunStore | None = None,
        replace_existing: bool = False,
        say: Say = _quiet,
    ) -> Deployment:
        """Start one run per node of ``plan``; does not wait. Nodes start from the last rank
        down, so node 0 (the one that binds ``--port``) checks its port last. If any node
        fails to start, the nodes already started are stopped."""
        from glmserve.deploy.preflight import check_simulated, port_for_host
        from glmserve.remote.launch import launch_run
        from glmserve.remote.stop import stop_run
        from glmserve.remote.transport import transport_for

        slurm = [n.host.name for n in plan.nodes if n.host.is_slurm]
        if slurm and plan.grouped:
            raise ConfigError(
                f"{slurm[0]} is a Slurm host: a host group cannot include it; run N nodes "
                f"there as one job: --host {slurm[0]} --set server.nnodes=N"
            )
        for node in plan.nodes:  # the simulator's own parse, before anything starts
            if node.spec.launcher == "simulator":
                row = check_simulated(transport_for(node.host), node.spec)
                if row.status == "fail":
                    raise ConfigError(f"{node.host.name}: {row.detail}")
        store = store or RunStore.open()
        gid = new_group_id(store) if plan.grouped else None
        started: list[RunRecord] = []
        try:
            for node in reversed(plan.nodes):
                # the plan's host and spec (its python/venv applied once, by plan), with the
                # flags as the host's SGLang release spells them (one command reads it)
                spec = port_for_host(node.spec, transport_for(node.host), say)
                start = launch_run
                if node.host.is_slurm:  # sbatch, not nohup (deploy/slurm_job.py)
                    from glmserve.deploy.slurm_job import launch_job_run as start
                rec = start(
                    spec,
                    node.host,
                    replace_existing=replace_existing,
                    store=store,
                    say=say,
                    meta=_node_meta(plan, node.rank, gid),
                )
                if gid:
                    say(
                        f"group {gid}: node {node.rank} ({node.host.name}) run {rec.run_id}, "
                        f"pid {rec.pid}"
                    )
                started.append(rec)
        except BaseException:
            for rec in started:
                with contextlib.suppress(GlmserveError):
                    stop_run(rec.run_id, timeout=5, store=store)
            raise
        runs = sorted(started, key=lambda r: int(r.meta.get("node_rank", 0)))
        dep = cls(runs, store, plan=plan)
        dep.hosts = {r.run_id: plan.nodes[int(r.meta.get("node_rank", 0))].host for r in runs}
        return dep

    # -- watching to a verdict -------------------------------------------------------------
    def watch(
        self,
        *,
        poll_s: float = 1.0,
        timeout_s: float | None = None,
        stall_timeout_s: float | None = None,
        stall_budgets: dict[Any, float] | None = None,
        on_tick: Tick | None = None,
        reconnect_give_up_s: float | None = None,
    ) -> Verdict:
        """Watch every node to a verdict; READY records the other nodes READY as well.

        A single run is watched by one Watcher, log and ``/health``. In a group node 0 is
        watched like that and the others (which never log READY: they serve no HTTP) for
        crashes, exits and stalls only, each in a thread; the first decisive verdict ends
        every watch. A TransportError from any watch is raised.
        """
        kw: dict[str, Any] = dict(
            poll_s=poll_s,
            stall_timeout_s=stall_timeout_s,
            stall_budgets=stall_budgets,
        )
        if reconnect_give_up_s is not None:
            kw["reconnect_give_up_s"] = reconnect_give_up_s
        if not self.grouped:
            run = self.runs[0]
            tick = (lambda t: on_tick(0, t)) if on_tick else None
            if run.meta.get("slurm"):  # the queue first, then this same watch
                from glmserve.deploy.slurm_job import watch_job

                res = watch_job(
                    run,
                    self.store,
                    lambda r, **k: _watcher(r, self.store, self.transport(r), **k).watch(),
                    timeout_s=timeout_s,
                    on_tick=tick,
                    **kw,
                )
                return Verdict(res.state, None, {0: res}, res.elapsed_s)
            t = self.transport(run)
            res = _watcher(run, self.store, t, timeout_s=timeout_s, on_tick=tick, **kw).watch()
            return Verdict(res.state, None, {0: res}, res.elapsed_s)
        transports = [self.transport(r) for r in self.runs]
        verdict = _watch_nodes(self.runs, transports, timeout_s, on_tick, kw)
        if verdict.state == "READY":
            self._mark_others_ready()
        return verdict

    def _mark_others_ready(self) -> None:
        """Group READY: the other nodes are ready too; record them so ``status`` checks them."""
        from glmserve.remote.process import run_ownership

        now = time.time()
        for run in self.followers:
            own = run_ownership(self.transport(run), run)
            self.store.update_run(
                run.run_id,
                state="READY",
                ready_at=now,
                meta={**run.meta, "ready_pids": own.pids},
            )
            self.store.add_event(run.run_id, "READY", None, {"group": run.meta.get("group_id")})

    def stop_failed(self, verdict: Verdict, say: Say = _quiet) -> list[dict[str, Any]]:
        """After a failed watch: a group is stopped at once, every node, naming the failing
        node (the reports; a StopFailed if a node could not be stopped). A single run that
        CRASHED is settled (:meth:`settle_crash`: recorded ended, what is left of its process
        group stopped); a stalled one keeps running, for ``logs``/``diagnose`` and a look at
        its processes, until ``glmserve stop``."""
        if verdict.state == "READY":
            return []
        if not self.grouped:
            return self.settle_crash(say) if verdict.state == "CRASHED" else []
        bad = self.runs[verdict.failing_rank or 0]
        say(
            f"node {verdict.failing_rank} ({bad.host}, run {bad.run_id}) {verdict.state}: "
            f"stopping every node of group {self.group_id}"
        )
        return self.stop(raise_failure=True)

    def settle_crash(self, say: Say = _quiet) -> list[dict[str, Any]]:
        """A single run the watch found CRASHED: leave nothing of it half-done.

        SGLang's answer to a crashed child is to end the whole server: the scheduler logs
        ``Scheduler hit an exception`` and sends SIGQUIT to the launcher
        (0.5.9 ``managers/scheduler.py:3188-3191``), whose handler calls
        ``kill_process_tree(os.getpid())`` (``entrypoints/engine.py:868-874``; after start-up
        the tokenizer manager's ``running_phase_sigquit_handler``,
        ``managers/tokenizer_manager.py:2506-2511``). That tree walk
        (``utils/common.py:1129-1163``: ``children(recursive=True)``) follows parent links
        only, so a scheduler that left the launcher's tree (reparented to PID 1) survives it
        and keeps its GPU memory
        (sgl-project/sglang#23627, #31645); a launcher whose child died during start-up may
        also wait in ``_wait_for_scheduler_ready``'s ``join`` (``engine.py:893-900``). So the
        verdict is final but the processes may not be gone: their process group is watched for
        ``CRASH_SETTLE_S`` to end by itself; then it is recorded ended, or what is left of the
        group is stopped the way ``glmserve stop`` does (the recorded, verified group or
        members, never by name) and the stop reported. When that cannot be done the message
        says so and names ``glmserve stop RUN``; the run then stays listed by ``status``.
        """
        from glmserve.errors import TransportError
        from glmserve.remote.process import run_ownership
        from glmserve.remote.stop import stop_run

        run = self.runs[0]
        rid = run.run_id
        how = f"stop it with `glmserve stop {rid}`"
        deadline = time.monotonic() + CRASH_SETTLE_S
        try:
            t = self.transport(run)
            own = run_ownership(t, run)
            while own.alive and time.monotonic() < deadline:
                time.sleep(0.25)
                own = run_ownership(t, run)
        except TransportError as exc:  # ProcessUnverified too: neither gone nor alive known
            say(f"run {rid} crashed; its processes could not be checked ({exc}); {how}")
            return []
        if not own.alive:
            try:
                self.store.update_run(rid, ended_at=time.time())  # the verdict stays CRASHED
            except GlmserveError as exc:
                say(f"run {rid} crashed and no process of it is left; not recorded: {exc}")
            return []
        say(
            f"run {rid} crashed, but {len(own.pids)} process(es) of its process group are still "
            f"up (pid {', '.join(map(str, own.pids))}); stopping them as `glmserve stop {rid}` "
            "does"
        )
        try:
            report = {**stop_run(rid, timeout=CRASH_STOP_TIMEOUT_S, store=self.store), "ok": True}
        except GlmserveError as exc:
            say(f"run {rid}: could not stop what is left ({exc}); {how}")
            return [{"run_id": rid, "host": run.host, "ok": False, "error": str(exc),
                     "exit_code": exc.exit_code}]  # fmt: skip
        killed = f", killed {report['killed']}" if report.get("killed") else ""
        say(f"run {rid}: stopped the crashed server's processes {report['signalled']}{killed}")
        return [report]

    def assess(self) -> tuple[str, dict[str, Any]]:
        """Is it still healthy (after a bench ended early)? Every node is looked at (store
        updated); the first node not READY decides: its state and diagnosis (in a group,
        with its node rank and host)."""
        from glmserve.deploy.assess import assess_run

        for run in self.runs:
            info = assess_run(run, self.store)
            run = self.store.get_run(run.run_id)
            diag = {"state": info["state"], "category": run.category, "root_cause": run.root_cause}
            if run.hint:
                diag["hint"] = run.hint
            if self.grouped:
                diag.update(node_rank=run.meta.get("node_rank"), host=run.host)
            diag = {k: v for k, v in diag.items() if v is not None and v != ""}
            if info["state"] != "READY":
                return str(info["state"]), diag
        return "READY", {"state": "READY"}

    # -- logs ------------------------------------------------------------------------------
    def logs(
        self,
        *,
        last: int | None,
        follow: bool,
        poll_s: float,
        write: Callable[[str], None],
        note: Say,
    ) -> None:
        """Write the log of what the id named (a run: its log as it is; a group: every
        node's, each line prefixed with its node); ``follow``: then what is appended, until
        every server has ended."""
        from glmserve.deploy.logs import GroupLogText, RunLog

        reader: RunLog | GroupLogText
        if self.named is not None or not self.grouped:
            reader = RunLog(self.named or self.runs[0], note)
        else:
            reader = GroupLogText(self.runs, note)
        write(reader.initial(last, follow))
        if not follow:
            return
        while True:
            write(reader.poll())
            if reader.done:
                note(reader.end_note)
                return
            time.sleep(poll_s)

    # -- stopping --------------------------------------------------------------------------
    def stop(self, timeout: float = 15.0, *, raise_failure: bool = False) -> list[dict[str, Any]]:
        """Stop every node (each by its verified process group): one report per run. A
        single run's failure is raised as it is; in a group every node is tried, failures are
        reported (``ok`` False) and, with ``raise_failure``, raised together after."""
        from glmserve.remote.stop import stop_failure, stop_run, stop_runs

        if not self.grouped:
            return [
                {**stop_run(self.runs[0].run_id, timeout=timeout, store=self.store), "ok": True}
            ]
        reports = stop_runs(self.runs, timeout=timeout, store=self.store)
        error = stop_failure(reports)
        if raise_failure and error is not None:
            raise error
        return reports

    def _plan(self) -> Plan:
        if self.plan is None:
            raise GlmserveError("this deployment was found in the store: it has no plan")
        return self.plan


# -- groups in the store -------------------------------------------------------------------------
def new_group_id(store: RunStore) -> str:
    """``g`` + 7 hex digits: never a run id (those are hex only), so ``stop g...`` is a group."""
    while True:
        gid = "g" + secrets.token_hex(4)[:7]
        if not group_runs(store, gid, exact=True):
            return gid


def group_runs(store: RunStore, group: str, *, exact: bool = False) -> list[RunRecord]:
    """The runs of group ``group`` (id or unique prefix), node rank order."""
    runs = [
        r
        for r in store.list_runs()
        if isinstance(r.meta.get("group_id"), str)
        and (r.meta["group_id"] == group or (not exact and r.meta["group_id"].startswith(group)))
    ]
    ids = {r.meta["group_id"] for r in runs}
    if len(ids) > 1:
        raise RunNotFound(f"group id prefix {group!r} is ambiguous; give more characters")
    return sorted(runs, key=lambda r: int(r.meta.get("node_rank", 0)))


def group_summary(runs: list[RunRecord]) -> dict[str, Any]:
    """What a bench result / sweep entry records of a group: its id and each node's host/run."""
    return {
        "group_id": runs[0].meta.get("group_id"),
        "nnodes": len(runs),
        "dist_init_addr": runs[0].meta.get("dist_init_addr"),
        "nodes": [
            {"node_rank": int(r.meta.get("node_rank", i)), "host": r.host, "run_id": r.run_id}
            for i, r in enumerate(runs)
        ],
    }


def _node_meta(plan: Plan, rank: int, gid: str | None) -> dict[str, Any] | None:
    """What links a node's run to its group (None for a single run)."""
    if gid is None:
        return None
    return {
        "group_id": gid,
        "node_rank": rank,
        "nnodes": len(plan.nodes),
        "nodes": list(plan.spec.nodes),
        "dist_init_addr": plan.nodes[rank].spec.extra["dist_init_addr"],
    }


# -- watching ------------------------------------------------------------------------------------
def _watcher(run: RunRecord, store: RunStore, t: Any, **kw: Any) -> Any:
    from glmserve.deploy.watch import Watcher

    return Watcher(run, t, store, **kw)


def _watch_nodes(
    runs: list[RunRecord],
    transports: list[Any],
    timeout_s: float | None,
    on_tick: Tick | None,
    kw: dict[str, Any],
) -> Verdict:
    """Every node at once (a thread each); the first decisive verdict ends all watches.

    Every node gets the same stall budgets; the overall deadline (``timeout_s``, None: the
    watcher's default) is node 0's, the others keep the default as a backstop.
    """
    started = time.monotonic()
    cancel = threading.Event()
    verdicts: queue.Queue[tuple[int, Any, BaseException | None]] = queue.Queue()

    def work(rank: int, run: RunRecord, t: Any) -> None:
        try:
            with RunStore.open() as store:  # sqlite connections stay in their thread
                w = _watcher(
                    run,
                    store,
                    t,
                    timeout_s=timeout_s if rank == 0 else None,
                    health=rank == 0,
                    cancel=cancel,
                    on_tick=(lambda tick: on_tick(rank, tick)) if on_tick else None,
                    **kw,
                )
                verdicts.put((rank, w.watch(), None))
        except BaseException as exc:  # handed to the main thread
            verdicts.put((rank, None, exc))

    threads = [
        threading.Thread(target=work, args=(int(r.meta.get("node_rank", i)), r, t), daemon=True)
        for i, (r, t) in enumerate(zip(runs, transports, strict=True))
    ]
    for th in threads:
        th.start()
    result = Verdict(state="", failing_rank=None)
    error: BaseException | None = None
    try:
        pending = len(threads)
        while pending and not result.state and error is None:
            try:
                rank, res, exc = verdicts.get(timeout=0.2)
            except queue.Empty:
                continue
            pending -= 1
            if exc is not None:
                error = exc
                continue
            result.results[rank] = res
            if res.state == "READY" and rank == 0:
                result.state = "READY"
            elif res.state not in ("READY", "CANCELLED"):
                result.state, result.failing_rank = res.state, rank
    finally:
        cancel.set()
        for th in threads:
            th.join(timeout=30)
    if error is not None:
        raise error
    if not result.state:  # every watch ended without a verdict: cannot happen, be explicit
        raise GlmserveError("group watch ended without a verdict")
    result.elapsed_s = time.monotonic() - started
    return result


# -- status --------------------------------------------------------------------------------------
def status_rows(store: RunStore, ident: str | None, all_runs: bool) -> list[dict[str, Any]]:
    """What ``status`` shows (:mod:`glmserve.deploy.status`)."""
    from glmserve.deploy.status import status_rows as rows

    return rows(store, ident, all_runs)
