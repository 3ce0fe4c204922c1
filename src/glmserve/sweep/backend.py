"""The real sweep backend: profiles -> preflight -> launch -> watch -> bench -> stop."""

from __future__ import annotations

from typing import Any

from glmserve.sweep.loop import StepOutcome, SweepBackend, say_nothing
from glmserve.sweep.state import SweepOptions


class LifecycleBackend(SweepBackend):
    """The real thing: profiles -> preflight -> lifecycle launch -> Watcher -> bench -> stop.

    A profile with ``nodes:`` (or every profile, given ``nodes``) runs as a host group through
    ``multinode``; the run id the loop holds is node 0's and every step resolves its group.
    """

    def __init__(
        self,
        host: str | None,
        simulate: bool,
        say: Any = say_nothing,
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
        return StepOutcome(res.state, diagnosis_summary(res.diagnosis))

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
        diag = diagnosis_summary(res.decisive.diagnosis)
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


def diagnosis_summary(d: Any) -> dict[str, Any]:
    """The parts of a watch Diagnosis a sweep entry keeps."""
    data = d.to_dict()
    keep = ("state", "category", "root_cause", "hint", "line", "phase", "patch_active")
    return {k: data.get(k) for k in keep if data.get(k) is not None}
