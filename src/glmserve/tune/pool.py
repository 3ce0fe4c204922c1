"""The host pool: every host runs one job (a config's trials) at a time, in its own thread (a
Slurm host ``--max-parallel`` at once); a host that stops answering leaves the pool and its job
is re-queued for the others, as is a job the scheduler took. ``JobRunner`` is what runs a job."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from glmserve.errors import GlmserveError, HostLost, TransportError
from glmserve.tune import state as st
from glmserve.tune.space import config_key

Say = Callable[[str], None]
_MAX_JOB_REQUEUES = 3  # a trial the scheduler keeps taking fails after this many


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
