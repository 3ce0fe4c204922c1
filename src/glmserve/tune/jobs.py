"""Real jobs: one config's trials through the sweep's lifecycle backend on one host (launch
the profile with the config's flags, watch it to READY, bench every load on that server, stop
it). A crash or stall is a result; a flag the target release does not have is skipped before
launch; a host that stops answering is ``HostLost`` for the pool."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from glmserve.errors import (
    ConfigError,
    FlagValidationError,
    GlmserveError,
    HostLost,
    TransportError,
)
from glmserve.sweep.backend import LifecycleBackend
from glmserve.tune import state as st
from glmserve.tune.pool import JobLost, JobRunner, Say
from glmserve.tune.runner import TuneOptions
from glmserve.tune.space import config_key, level_metrics

_OPEN_LOCK = threading.Lock()
# A Slurm job's ends that say nothing about its config: the trial runs again in a new job.
_JOB_LOST = frozenset({"NODE_FAIL", "PREEMPTED"})


def sim_scale(tune: st.Tune) -> float:
    """A simulated tune at ``sim.speed=N`` reports figures in the modelled box's units."""
    return float(tune.options.get("sim_speed") or 1.0) if tune.simulate else 1.0


class LifecycleJobRunner(JobRunner):
    """Runs jobs through the sweep's ``LifecycleBackend`` (profiles -> preflight -> launch ->
    Watcher -> bench -> stop), one backend per host."""

    def __init__(self, tune: st.Tune, say: Say) -> None:
        self.tune = tune
        self.say = say
        self.opts = TuneOptions(
            **{k: v for k, v in tune.options.items() if k in TuneOptions.__dataclass_fields__}
        )
        self.live: dict[str, tuple[Any, str]] = {}  # host -> (backend, run id) running now
        self.stopping = threading.Event()  # Ctrl-C: what a job sees next is not a result
        from glmserve.store import RunStore

        with _OPEN_LOCK:
            RunStore.open().close()  # create the store (WAL) before any worker thread opens it
        self.lock = threading.Lock()

    def _backend(self, host: str) -> Any:
        """One backend (and run store connection) per job, opened one at a time: two first
        opens at once can meet SQLite's "database is locked" while WAL mode is set up."""
        with _OPEN_LOCK:
            return _TuneBackend(host, self.tune.simulate, self.opts.host_lost_s)

    def _port(self, host: str, slot: int) -> int:
        """The job's server port: a free one for a local host (local hosts share this
        machine, whose ephemeral ports come and go), else the profile's port + the host's
        index in the pool (hosts that are one machine then never clash)."""
        from glmserve.remote.hosts import get_host
        from glmserve.remote.transport import free_local_port

        if get_host(host).is_local:
            return free_local_port()
        return self.opts.base_port + slot

    def _sweep_opts(self, trials: list[st.Trial], port: int, load: int) -> Any:
        from glmserve.sweep.state import SweepOptions

        o = self.opts
        sets = [*o.overrides, *(f"server.{k}={v}" for k, v in trials[0].config.items())]
        sets.append(f"server.port={port}")
        return SweepOptions(
            bench=["concurrency"],
            concurrency=[load],
            input_len=o.input_len,
            output_len=o.output_len,
            num_prompts=o.num_prompts,
            overrides=sets,
            timeout_s=o.timeout_s,
            stall_timeout_s=o.stall_timeout_s,
            stall_budgets=list(o.stall_budgets),
            sglang_version=o.sglang_version,
            repeat=o.repeat,
        )

    def _mark(self, trials: list[st.Trial], **kw: Any) -> None:
        with self.lock:
            for t in trials:
                for k, v in kw.items():
                    setattr(t, k, v)
            st.save_tune(self.tune)

    def _reachable(self, host: str) -> bool:
        from glmserve.remote.hosts import get_host
        from glmserve.remote.transport import transport_for

        try:
            return transport_for(get_host(host)).run("true", timeout=15).ok
        except GlmserveError:
            return False

    def run_job(self, tune: st.Tune, host: str, slot: int, trials: list[st.Trial]) -> None:
        name = config_key(trials[0].config)
        now = time.time()
        self._mark(trials, status=st.RUNNING, host=host, started_at=now, ended_at=None, error=None)
        backend = self._backend(host)
        port = self._port(host, slot)
        opts = self._sweep_opts(trials, port, trials[0].concurrency)
        try:
            spec = backend.prepare(tune.profile, opts)
        except FlagValidationError as exc:
            self._mark(
                trials, status=st.SKIPPED, error=f"not on this release: {exc}", ended_at=time.time()
            )
            self.say(f"{name}: skipped before launch: {exc}")
            return
        try:
            self._launch_and_bench(tune, host, port, trials, backend, spec)
        except TransportError as exc:
            if not self._reachable(host):
                raise HostLost(str(exc)) from exc
            self._mark(
                [t for t in trials if not t.finished],
                status=st.FAILED,
                error=str(exc),
                ended_at=time.time(),
            )

    def _launch_and_bench(
        self, tune: st.Tune, host: str, port: int, trials: list[st.Trial], backend: Any, spec: Any
    ) -> None:
        name = config_key(trials[0].config)
        problem = backend.check(spec)
        if problem:
            self._mark(
                trials, status=st.SKIPPED, error=f"check failed: {problem}", ended_at=time.time()
            )
            self.say(f"{name}: skipped on {host}: {problem}")
            return
        run_id = backend.launch(spec)
        with self.lock:
            self.live[run_id] = (backend, host)
        self._mark(trials, run_id=run_id)
        self.say(f"{host}: {name}: launched run {run_id}")
        try:
            self._watch_and_bench(tune, host, port, trials, backend, run_id)
        finally:
            with self.lock:
                self.live.pop(run_id, None)
            with contextlib.suppress(GlmserveError):
                backend.stop(run_id)

    def _interrupted(self, trials: list[st.Trial]) -> bool:
        """After Ctrl-C a stopped server looks crashed: record the trials as interrupted
        (``--resume`` runs them again), never as results."""
        if not self.stopping.is_set():
            return False
        self._mark(
            [t for t in trials if not t.finished],
            status=st.INTERRUPTED,
            error="interrupted (Ctrl-C); the server was stopped",
            ended_at=time.time(),
        )
        return True

    def _watch_and_bench(
        self, tune: st.Tune, host: str, port: int, trials: list[st.Trial], backend: Any, run_id: str
    ) -> None:
        name = config_key(trials[0].config)
        if self._interrupted(trials):
            return
        outcome = backend.watch(run_id, self._sweep_opts(trials, port, trials[0].concurrency))
        if self._interrupted(trials):
            return
        queued = (outcome.diagnosis or {}).get("queued_s")
        if queued is not None:  # a Slurm job's wait in the queue: not the trial's time
            self._mark(trials, queued_s=queued)
        if outcome.state in _JOB_LOST:
            raise JobLost(f"Slurm job of run {run_id} ended {outcome.state}")
        if outcome.state != "READY":
            # stopped from outside (`glmserve stop`): no verdict on the config
            status = {"CRASHED": st.CRASHED, "EXITED": st.CRASHED, "STOPPED": st.FAILED}.get(
                outcome.state, st.STALLED
            )
            self._mark(trials, status=status, diagnosis=outcome.diagnosis, ended_at=time.time())
            d = outcome.diagnosis or {}
            self.say(f"{host}: {name}: {outcome.state}: {d.get('category')} {d.get('root_cause')}")
            return
        if tune.reference is not None and self._wrong_output(tune, host, trials, run_id):
            return
        scale = sim_scale(tune)
        for i, t in enumerate(trials):
            if self._interrupted(trials[i:]):
                return
            self._mark([t], started_at=time.time())
            result = backend.bench(
                run_id, "concurrency", self._sweep_opts(trials, port, t.concurrency)
            )
            if self._interrupted(trials[i:]):
                return
            level = (result.get("levels") or [{}])[0]
            if not result.get("complete", True) or level.get("errors"):
                if not self._reachable(host):  # the bench's forward died with the host
                    raise HostLost(f"host {host} stopped answering during the bench")
                after = backend.assess(run_id)
                if after.state in _JOB_LOST:
                    raise JobLost(f"Slurm job of run {run_id} ended {after.state} mid-bench")
                if after.state in ("CRASHED", "EXITED"):
                    self._mark(
                        trials[i:],
                        status=st.CRASHED,
                        diagnosis=after.diagnosis,
                        ended_at=time.time(),
                    )
                    return
            metrics = level_metrics(level, tune.slo, scale)
            status = st.OK if metrics["completed"] else st.FAILED
            err = None if status == st.OK else "bench: every request failed"
            self._mark([t], status=status, metrics=metrics, error=err, ended_at=time.time())
            v = metrics.get(tune.objective)
            self.say(
                f"{host}: {t.key}: {tune.objective} {'-' if v is None else f'{v:.1f}'}"
                + (
                    ""
                    if metrics["meets_slo"]
                    else f" (misses SLO: {', '.join(metrics['slo_violations'])})"
                )
            )

    def _wrong_output(self, tune: st.Tune, host: str, trials: list[st.Trial], run_id: str) -> bool:
        """Probe the trial's server against the untuned profile's outputs (teacher-forced);
        WRONG_OUTPUT trials end here, excluded with the reason, unbenched."""
        from glmserve.bench.probe import ProbeSpec, probe_run, reference_outputs, thresholds

        o = self.opts
        spec = ProbeSpec(
            reference_outputs({"probe": tune.reference}, "the untuned profile's probe"),
            f"{tune.profile} (untuned)",
            thresholds(o.max_excess_nll, o.min_greedy_agreement),
        )
        probe = probe_run(run_id, spec)
        a = probe.get("agreement") or {
            "verdict": st.WRONG_OUTPUT,
            "reasons": [f"probe failed: {probe.get('error')}"],
        }
        self._mark(trials, output=a)
        if a["verdict"] != st.WRONG_OUTPUT:
            return False
        reason = f"{st.WRONG_OUTPUT} vs {spec.reference_id}: " + "; ".join(a["reasons"])
        self._mark(trials, status=st.WRONG_OUTPUT, error=reason, ended_at=time.time())
        self.say(f"{host}: {config_key(trials[0].config)}: excluded: {reason}")
        return True

    def reference(self, tune: st.Tune) -> dict[str, Any] | None:
        """Launch the profile as it is (no searched flag set) on the first live host, probe
        it, stop it. A reference that does not start, or answers no probe, ends the tune:
        nothing could be judged."""
        from glmserve.bench.probe import ProbeSpec, probe_run
        from glmserve.sweep.state import SweepOptions

        host = next(h for h in tune.hosts if h not in tune.lost_hosts)
        backend = self._backend(host)
        o = self.opts
        port = self._port(host, 0)
        opts = SweepOptions(
            overrides=[*o.overrides, f"server.port={port}"],
            timeout_s=o.timeout_s,
            stall_budgets=list(o.stall_budgets),
            sglang_version=o.sglang_version,
        )
        spec = backend.prepare(tune.profile, opts)
        problem = backend.check(spec)
        if problem:
            raise ConfigError(f"output reference ({tune.profile} untuned): check: {problem}")
        run_id = backend.launch(spec)
        with self.lock:
            self.live[run_id] = (backend, host)
        try:
            outcome = backend.watch(run_id, opts)
            if outcome.state != "READY":
                d = outcome.diagnosis or {}
                raise ConfigError(
                    f"output reference ({tune.profile} untuned) did not start: "
                    f"{outcome.state} {d.get('category') or ''} {d.get('root_cause') or ''}"
                )
            probe = probe_run(run_id, ProbeSpec())
        finally:
            with self.lock:
                self.live.pop(run_id, None)
            with contextlib.suppress(GlmserveError):
                backend.stop(run_id)
        if probe.get("error"):
            raise TransportError(f"output reference ({tune.profile} untuned): {probe['error']}")
        return {**probe, "run_id": run_id, "host": host}

    def reclaim(self, host: str, run_id: str) -> bool:
        return bool(self._backend(host).reclaim(run_id))

    def stop_all(self) -> None:
        self.stopping.set()
        with self.lock:
            live = [(host, run_id) for run_id, (_b, host) in self.live.items()]
        for host, run_id in live:  # a fresh backend: a run store opens per thread
            with contextlib.suppress(GlmserveError):
                self._backend(host).stop(run_id)


class _TuneBackend(LifecycleBackend):
    """The sweep's backend, but a watch gives up on a silent host after ``host_lost_s`` (the
    pool has other hosts to run the trial on; a lone sweep waits longer for a reconnect)."""

    def __init__(self, host: str, simulate: bool, host_lost_s: float) -> None:
        super().__init__(host, simulate, say=lambda m: None, reconnect_give_up_s=host_lost_s)
