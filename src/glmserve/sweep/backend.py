"""The real sweep backend: every step of a profile through ``glmserve.deploy``'s
``Deployment`` (plan -> check -> launch -> watch -> stop), plus bench and profiler capture."""

from __future__ import annotations

from typing import Any

from glmserve.sweep.loop import StepOutcome, SweepBackend, say_nothing
from glmserve.sweep.state import SweepOptions


def plan_profile(
    profile: str, host: Any, nodes: list[str], opts: SweepOptions, simulate: bool
) -> Any:  # host: a HostConfig, a name or None; -> deploy.plan.Plan
    """How the sweep plans one profile: onto ``host`` (default local) unless it names its
    own ``nodes:``, or onto the group ``nodes`` (--nodes)."""
    from glmserve.deploy.plan import plan

    return plan(
        profile,
        host=host,
        nodes=nodes,
        overrides=opts.overrides,
        simulate=simulate,
        sglang_version=opts.sglang_version,
        host_is_default=True,
    )


def check_plans(
    profiles: list[str], host: str | None, nodes: list[str], opts: SweepOptions, simulate: bool
) -> None:
    """Plan every profile once before the sweep is created: a typo in a profile, a --host or
    --nodes name (or a profile's own ``nodes:``) that hosts.yaml lacks is a ConfigError now,
    not a failed sweep left behind. Planning reads files only; under ``--simulate`` the
    host's simulator also parses each argv (a bad ``--set sim.*``: exit 2 before anything)."""
    from glmserve.remote.hosts import get_host

    get_host(host)  # also for a sweep whose every profile names its own nodes
    for name in nodes:
        get_host(name)
    plans = [plan_profile(profile, host, nodes, opts, simulate) for profile in profiles]
    if simulate:
        check_simulated_plans(plans)


def check_simulated_plans(plans: list[Any]) -> None:
    """Each simulated node's argv through the host's simulator parse, once per distinct
    (host, argv): ConfigError naming the first refusal (what ``launch`` would refuse later,
    after a sweep or tune had been created)."""
    from glmserve.deploy.preflight import check_simulated
    from glmserve.errors import ConfigError
    from glmserve.remote.transport import transport_for

    seen: set[tuple[str, tuple[str, ...]]] = set()
    for p in plans:
        for node in p.nodes:
            key = (node.host.name, tuple([*node.spec.argv, *node.spec.sim_args]))
            if key in seen or node.spec.launcher != "simulator":
                continue
            seen.add(key)
            row = check_simulated(transport_for(node.host), node.spec)
            if row.status == "fail":
                raise ConfigError(f"{node.host.name}: {row.detail}")


class LifecycleBackend(SweepBackend):
    """The real thing: each profile planned, checked, launched, watched and stopped as one
    ``Deployment`` (a single host, or a host group for a profile with ``nodes:`` or given
    ``nodes``); the run id the loop holds is node 0's, which resolves to its whole group.
    """

    def __init__(
        self,
        host: str | None,
        simulate: bool,
        say: Any = say_nothing,
        nodes: list[str] | None = None,
        reconnect_give_up_s: float | None = None,
    ) -> None:
        from glmserve.remote.hosts import get_host
        from glmserve.store import RunStore

        self.host = get_host(host)
        self.simulate = simulate
        self.say = say
        self.nodes = list(nodes or [])
        self.reconnect_give_up_s = reconnect_give_up_s  # None: the watcher's default
        self.group_hosts: set[str] = set()  # every node of every group prepared so far
        self.store = RunStore.open()
        # Run ids the store held just before this entry's launch began; None until the entry
        # reaches launch (a check that fails launched nothing, so there is nothing to stop).
        self._known_before_launch: set[str] | None = None

    def _deployment(self, run_id: str) -> Any:
        from glmserve.deploy.deployment import Deployment

        return Deployment.resolve(self.store, run_id)

    def prepare(self, profile: str, opts: SweepOptions) -> Any:
        """The profile's plan (--host applies to a profile without ``nodes:``)."""
        self._known_before_launch = None  # a new entry: it has launched nothing yet
        p = plan_profile(profile, self.host, self.nodes, opts, self.simulate)  # resolved once
        if p.grouped:
            self.group_hosts.update(p.names)
        return p

    def check(self, spec: Any) -> str | None:
        from glmserve.deploy.deployment import Deployment
        from glmserve.errors import TransportError

        res = Deployment(plan=spec, store=self.store).check()
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
        from glmserve.deploy.deployment import Deployment

        self._known_before_launch = {r.run_id for r in self.store.list_runs()}
        return Deployment.launch(spec, store=self.store, say=self.say).head.run_id

    def group_of(self, run_id: str) -> dict[str, Any] | None:
        return self._deployment(run_id).summary()

    def watch(self, run_id: str, opts: SweepOptions) -> StepOutcome:
        """Every node to a verdict; a failure names its node (in a group)."""
        from glmserve.deploy.stall_budgets import parse_stall_budgets

        dep = self._deployment(run_id)
        res = dep.watch(
            poll_s=0.2 if self.simulate else 1.0,
            timeout_s=opts.timeout_s,
            stall_budgets=parse_stall_budgets(opts.stall_budgets),
            reconnect_give_up_s=self.reconnect_give_up_s,
        )
        diag = diagnosis_summary(res.decisive.diagnosis)
        queued = (getattr(res.decisive, "extra", None) or {}).get("queued_s")
        if queued is not None:  # a Slurm job's time in the queue, reported apart
            diag["queued_s"] = queued
        if res.failing_rank is not None:
            bad = dep.runs[res.failing_rank]
            diag.update(node_rank=res.failing_rank, host=bad.host, node_run_id=bad.run_id)
        return StepOutcome(res.state, diag)

    def bench(
        self, run_id: str, mode: str, opts: SweepOptions, probe: Any = None
    ) -> dict[str, Any]:
        from glmserve.bench.progress import Progress
        from glmserve.bench.repeats import run_repeated
        from glmserve.bench.session import Gates

        settings = opts.bench_settings(mode)
        # a group: via node 0; ``probe`` (bench.probe.ProbeSpec) with the first bench only;
        # ``repeat`` runs on the same server, figures their medians (bench.repeats)
        outcome = run_repeated(
            settings, run_id, Gates(), Progress(), probe=probe, repeat=opts.repeat
        )
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
        return StepOutcome(*self._deployment(run_id).assess())

    def stop(self, run_id: str) -> None:
        self._deployment(run_id).stop(raise_failure=True)

    def reclaim(self, run_id: str) -> bool:
        """Stop the run (every node of its group) unless the store has it ended already."""
        dep = self._deployment(run_id)
        if all(r.terminal for r in dep.runs):
            return False
        dep.stop(raise_failure=True)
        return True

    def runs_started_since(self, profile: str, since: float) -> list[str]:
        """Runs this entry's launch created whose id it never returned (Ctrl-C inside
        launch). Only runs absent from the store when that launch began count: a server of
        the same profile started a moment earlier (an earlier, killed attempt a --resume has
        just been refused over) is not this process's to stop."""
        known = self._known_before_launch
        if known is None:
            return []  # this entry never reached launch: it started nothing
        hosts = {self.host.name} | self.group_hosts
        return [
            r.run_id
            for r in self.store.list_runs()
            if r.run_id not in known
            and r.host in hosts
            and r.profile == profile
            and r.created_at >= since - 1.0
            and r.state != "STOPPED"
        ]


def diagnosis_summary(d: Any) -> dict[str, Any]:
    """The parts of a watch Diagnosis a sweep entry keeps."""
    data = d.to_dict()
    keep = ("state", "category", "root_cause", "hint", "line", "phase", "patch_active")
    return {k: data.get(k) for k in keep if data.get(k) is not None}
