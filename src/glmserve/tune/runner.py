"""The tune loop: a search strategy proposes configs, a host pool runs them concurrently.

Each config is one *job*: launch the profile with the config's server flags on one host, watch
it to READY, bench every load on the same server (a load-only change reuses it), stop it.
Every host of the pool runs one job at a time, in its own thread; jobs are independent. A
crash or stall is a result (every trial of the config is recorded with the diagnosis); a flag
the target release does not have is skipped before launch; a host that stops answering is
taken out of the pool and its job re-queued for the others.

Strategies: ``grid`` runs every config when the budget holds them all; otherwise
``coordinate`` starts from the profile's own values and, one flag at a time, tries that flag's
other values (in parallel) and moves to the best config found so far, until a whole pass
improves nothing or the budget is spent.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from glmserve.bench.options import DEFAULT_INPUT_LEN, STAGE_REPEAT
from glmserve.errors import (
    ConfigError,
    FlagValidationError,
    GlmserveError,
    HostLost,
    TransportError,
    TuneInterrupted,
)
from glmserve.sigterm import sigterm_as_interrupt
from glmserve.sweep.backend import LifecycleBackend
from glmserve.sweep.options import STAGE_STALL_TIMEOUT
from glmserve.tune import state as st
from glmserve.tune.options import TUNE_HOST_LOST_S, TUNE_OUTPUT_LEN
from glmserve.tune.space import Budget, config_key, grid, level_metrics, starting_config

Say = Callable[[str], None]
_OPEN_LOCK = threading.Lock()
# A Slurm job's ends that say nothing about its config: the trial runs again in a new job.
_JOB_LOST = frozenset({"NODE_FAIL", "PREEMPTED"})
_MAX_JOB_REQUEUES = 3


class JobLost(Exception):
    """The scheduler took a trial's job (preemption, node failure): re-queue the trial (the
    host stays in the pool). Raised by a job runner, caught by the pool's worker."""


def _is_slurm(host: str) -> bool:
    """Whether ``host`` (hosts.yaml) is a Slurm host; an unknown name is left to the job."""
    from glmserve.remote.hosts import get_host

    try:
        return bool(get_host(host).is_slurm)
    except GlmserveError:
        return False


@dataclass
class TuneOptions:
    """How every trial is run; stored in tune.json so ``--resume`` repeats it."""

    # defaults: the options models' (bench.options, sweep.options, tune.options)
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int = TUNE_OUTPUT_LEN
    num_prompts: int | None = None
    overrides: list[str] = field(default_factory=list)  # --set, applied to every trial
    timeout_s: float | None = None
    stall_budgets: list[str] = field(default_factory=list)
    stall_timeout_s: float = STAGE_STALL_TIMEOUT
    sglang_version: str | None = None
    base_port: int = 30000
    sim_speed: float = 1.0  # the profile's sim.speed (simulated figures are scaled back)
    host_lost_s: float = TUNE_HOST_LOST_S  # a host unreachable this long leaves the pool
    repeat: int = STAGE_REPEAT  # each trial's bench N times on its server: medians, intervals, ties
    probe: bool = False  # judge every trial's output against the untuned profile's
    max_excess_nll: float | None = None
    min_greedy_agreement: float | None = None
    max_parallel: int = 1  # jobs at once on a Slurm host (an ssh host runs one at a time)

    def check(self, loads: list[int]) -> None:
        """Refuse, before the tune is created, what every trial would otherwise find out only
        after launching its server: a bad --input-len/--output-len/--num-prompts (the bench's
        own checks), an --sglang-version glmserve has no argspec of, --stall-budget or
        --host-lost-after. ConfigError naming the flag."""
        from glmserve.argspec.releases import load_release_spec
        from glmserve.deploy.stall_budgets import parse_stall_budgets
        from glmserve.sweep.state import SweepOptions

        if not (isinstance(self.max_parallel, int) and self.max_parallel >= 1):
            raise ConfigError(f"--max-parallel: expected an integer >= 1, got {self.max_parallel}")
        if not self.host_lost_s >= 0:  # NaN too
            raise ConfigError(f"--host-lost-after: expected seconds >= 0, got {self.host_lost_s}")
        if self.sglang_version:
            load_release_spec(self.sglang_version)
        parse_stall_budgets(self.stall_budgets)
        SweepOptions(
            bench=["concurrency"],
            concurrency=list(loads),
            input_len=self.input_len,
            output_len=self.output_len,
            num_prompts=self.num_prompts,
            stall_timeout_s=self.stall_timeout_s,
        ).check_bench()


# --------------------------------------------------------------------------- strategy


def choose_strategy(n_configs: int, n_loads: int, budget: Budget | None, requested: str) -> str:
    """``grid`` when the whole grid fits the trial budget (or there is no budget), else
    ``coordinate``; a duration budget cannot promise the grid, so it gets ``coordinate``."""
    if requested != "auto":
        return requested
    if budget is None:
        return "grid"
    if budget.trials is not None and budget.trials >= n_configs * n_loads:
        return "grid"
    return "coordinate"


class Search:
    """Drives a strategy over ``tune``; ``evaluate`` runs configs through the pool."""

    def __init__(self, tune: st.Tune, evaluate: Callable[[list[dict[str, str]]], None]) -> None:
        self.tune = tune
        self.evaluate = evaluate
        b = tune.budget or {}
        self.trial_budget: int | None = b.get("trials")
        self.deadline: float | None = (time.time() + b["seconds"]) if b.get("seconds") else None

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.time() >= self.deadline

    def _spent(self) -> int:
        return len(self.tune.trials)

    def affordable(self, configs: list[dict[str, str]]) -> list[dict[str, str]]:
        """The configs (in order) that still fit the trial budget; known ones are free."""
        if self.trial_budget is None:
            return configs
        left = self.trial_budget - self._spent()
        out = []
        for c in configs:
            if self._known(c):
                out.append(c)
            elif left >= len(self.tune.loads):
                out.append(c)
                left -= len(self.tune.loads)
        return out

    def _known(self, config: dict[str, str]) -> bool:
        return self.tune.trial(config, self.tune.loads[0]) is not None

    def run(self, profile_server: dict[str, Any]) -> None:
        if self.tune.strategy == "grid":
            self.evaluate(self.affordable(grid(self.tune.space)))
        else:
            self._coordinate(profile_server)

    def _coordinate(self, profile_server: dict[str, Any]) -> None:
        """Start at the profile's values; each pass runs every one-flag change of the best
        config so far (concurrently: they are independent), then moves to the best config
        found. Ends when a pass improves nothing, or the budget is spent."""
        best = starting_config(self.tune.space, profile_server)
        self.evaluate(self.affordable([best]))
        while not self.out_of_time():
            cands = [
                {**best, k: v} for k, values in self.tune.space for v in values if v != best[k]
            ]
            todo = [c for c in self.affordable(cands) if not self._done(c)]
            if todo:
                self.evaluate(todo)
            new = self._best_config() or best
            if new == best:
                return
            best = new

    def _done(self, config: dict[str, str]) -> bool:
        ts = [self.tune.trial(config, load) for load in self.tune.loads]
        return all(t is not None and t.finished for t in ts)

    def _best_config(self) -> dict[str, str] | None:
        """The config whose best feasible trial has the highest objective."""
        top = st.best_trial(self.tune)
        return dict(top.config) if top is not None else None


# --------------------------------------------------------------------------- pool


class JobRunner:
    """What runs one config's trials on one host; ``LifecycleJobRunner`` is the real one."""

    def run_job(self, tune: st.Tune, host: str, slot: int, trials: list[st.Trial]) -> None:
        raise NotImplementedError

    def stop_all(self) -> None:
        """Stop every server a job is running now (Ctrl-C), from the main thread."""

    def reference(self, tune: st.Tune) -> dict[str, Any] | None:
        """``--probe``: run the untuned profile once and return its probe (the reference every
        trial's output is judged against); None when this runner cannot."""
        return None

    def reclaim(self, host: str, run_id: str) -> bool:
        """Stop ``run_id`` on ``host`` (a trial of this tune recorded it) if it is still up:
        a tune killed outright never stopped its servers. True when something was stopped;
        a runner that cannot tell leaves it."""
        return False


class Pool:
    """Hosts that run jobs, one at a time each; a lost host leaves the pool for good."""

    def __init__(self, tune: st.Tune, runner: JobRunner, say: Say) -> None:
        self.tune = tune
        self.runner = runner
        self.say = say
        self.lock = threading.RLock()
        self.interrupted = threading.Event()
        self.deadline: float | None = None  # --budget DURATION: no job starts after it
        self.threads: list[threading.Thread] = []

    def live_hosts(self) -> list[tuple[int, str]]:
        """``(slot, host)`` per worker: one per host, ``--max-parallel`` per Slurm host (each
        job is its own allocation, so the scheduler, not the pool, places them); slots are
        distinct, so each worker's port is too."""
        k = int(self.tune.options.get("max_parallel") or 1)
        out: list[tuple[int, str]] = []
        for h in self.tune.hosts:
            if h in self.tune.lost_hosts:
                continue
            base = len(out)
            out.extend((base + i, h) for i in range(k if _is_slurm(h) else 1))
        return out

    def save(self) -> None:
        with self.lock:
            st.save_tune(self.tune)

    def evaluate(self, configs: list[dict[str, str]]) -> None:
        """Run every config's unfinished trials; returns when all are done (or no host is left)."""
        queue: deque[list[st.Trial]] = deque()
        with self.lock:
            for c in configs:
                trials = []
                for load in self.tune.loads:
                    t = self.tune.trial(c, load)
                    if t is None:
                        t = st.Trial(config=dict(c), concurrency=load)
                        self.tune.trials.append(t)
                    if not t.finished:
                        trials.append(t)
                if trials:
                    queue.append(trials)
            st.save_tune(self.tune)
        if not queue:
            return
        threads = [
            threading.Thread(target=self._worker, args=(slot, host, queue), daemon=True)
            for slot, host in self.live_hosts()
        ]
        self.threads = threads
        for th in threads:
            th.start()
        self._join(threads)
        if queue and not self.interrupted.is_set():
            raise TransportError(
                "every host of the pool became unreachable: "
                + ", ".join(self.tune.lost_hosts)
                + f" (resume with --resume {self.tune.tune_id})"
            )

    def _join(self, threads: list[threading.Thread]) -> None:
        try:
            while any(th.is_alive() for th in threads):
                for th in threads:
                    th.join(0.2)
        except KeyboardInterrupt:
            self.shutdown()
            raise

    def shutdown(self) -> None:
        """Ctrl-C, wherever the main thread was: start nothing new, stop every running
        server, wait for each job to end at its next step, then stop what a job launched in
        the meantime. Idempotent."""
        if self.interrupted.is_set():
            return
        self.interrupted.set()
        self.say("interrupted: stopping the running servers")
        self.runner.stop_all()
        for th in self.threads:
            if th.ident is not None:  # started (Ctrl-C may land while they are started)
                th.join(120)
        self.runner.stop_all()

    def _worker(self, slot: int, host: str, queue: deque[list[st.Trial]]) -> None:
        while not self.interrupted.is_set():
            with self.lock:
                if not queue:
                    return
                if self.deadline is not None and time.time() >= self.deadline:
                    queue.clear()  # the duration budget is spent: start nothing new
                    return
                trials = queue.popleft()
            try:
                self.runner.run_job(self.tune, host, slot, trials)
            except JobLost as exc:
                # The scheduler took the job (preemption, node failure): the host is fine,
                # the trial runs again in a fresh job, as after a lost host.
                with self.lock:
                    again = [t for t in trials if not t.finished]
                    for t in again:
                        t.requeued_from.append(f"{host} ({exc})")
                        t.status, t.host, t.run_id = st.PENDING, None, None
                        t.error = f"re-queued: {exc}"
                        if len(t.requeued_from) > _MAX_JOB_REQUEUES:  # the cluster keeps taking it
                            t.status, t.ended_at = st.FAILED, time.time()
                            t.error = f"{exc} ({len(t.requeued_from)} times); not re-queued"
                    if any(not t.finished for t in again):
                        queue.append(trials)
                    st.save_tune(self.tune)
                self.say(f"{host}: {exc}; its trial is re-queued")
                continue
            except HostLost as exc:
                with self.lock:
                    if host not in self.tune.lost_hosts:
                        self.tune.lost_hosts.append(host)
                    for t in trials:
                        if not t.finished:
                            left = f"; its run {t.run_id} may still be up there" if t.run_id else ""
                            t.requeued_from.append(host)
                            t.status, t.host, t.run_id = st.PENDING, None, None
                            t.error = f"re-queued: host {host} lost ({exc}){left}"
                    queue.appendleft(trials)
                    st.save_tune(self.tune)
                self.say(f"{host}: unreachable, taken out of the pool; its trial is re-queued")
                return
            except Exception as exc:  # never lose the other hosts' work to one job's bug
                status = st.INTERRUPTED if self.interrupted.is_set() else st.FAILED
                with self.lock:
                    for t in trials:
                        if not t.finished:
                            t.status, t.error, t.ended_at = status, str(exc), time.time()
                    st.save_tune(self.tune)
                self.say(f"{host}: {config_key(trials[0].config)}: failed: {exc}")


def run_tune(tune: st.Tune, runner: JobRunner, profile_server: dict[str, Any], say: Say) -> st.Tune:
    """Run (or resume) ``tune`` to the end of its strategy; saves after every step."""
    pool = Pool(tune, runner, say)
    with st.TUNES.lock(tune.tune_id), sigterm_as_interrupt():  # SIGTERM: the Ctrl-C path
        _reclaim_left_running(tune, runner, say)
        for t in tune.trials:  # what a previous process left running is to be run again
            if t.status in (st.RUNNING, st.INTERRUPTED):
                t.status = st.PENDING
        tune.status = st.RUNNING
        pool.save()
        try:
            if tune.options.get("probe") and tune.reference is None:
                say("output reference: the untuned profile")
                tune.reference = runner.reference(tune)
                pool.save()
            search = Search(tune, pool.evaluate)
            pool.deadline = search.deadline
            search.run(profile_server)
        except KeyboardInterrupt:
            pool.shutdown()
            with pool.lock:
                for t in tune.trials:
                    if t.status in (st.RUNNING, st.PENDING) and t.started_at:
                        t.status, t.error = st.INTERRUPTED, "interrupted (Ctrl-C)"
                tune.status = "interrupted"
                st.save_tune(tune)
            raise TuneInterrupted(
                f"tune {tune.tune_id} interrupted; servers stopped. "
                f"Continue with: glmserve tune --resume {tune.tune_id}"
            ) from None
        tune.status = "done"
        pool.save()
    return tune


def _reclaim_left_running(tune: st.Tune, runner: JobRunner, say: Say) -> None:
    """Before a resumed tune runs anything, stop the servers its unfinished trials recorded
    (a tune killed outright, SIGKILL, could not): each would hold its GPU (and, on a remote
    host, the port its trial gets again). Only runs this tune recorded are touched, each by
    the stop machinery (verified process group). A run that cannot be stopped is said, not
    raised: its trial runs again all the same, and a lost host is the pool's to handle."""
    left = {
        (t.host, t.run_id)
        for t in tune.trials
        if t.status in (st.RUNNING, st.INTERRUPTED) and t.host and t.run_id
    }
    for host, run_id in sorted(left):
        try:
            if runner.reclaim(host, run_id):
                say(f"{host}: stopped run {run_id}, left running by the earlier attempt")
        except GlmserveError as exc:
            say(f"{host}: could not stop run {run_id}, left running by the earlier attempt: {exc}")


# --------------------------------------------------------------------------- real jobs


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
