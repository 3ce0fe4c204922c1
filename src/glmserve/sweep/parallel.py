"""``sweep --max-parallel K`` on a Slurm host: K profiles' jobs at once.

Each profile is its own Slurm job, so the scheduler (not a host pool) decides where they run;
K worker threads each take the next unfinished profile and run it through the same steps as
the sequential loop (``loop._run_entry``), each with its own backend (a run-store connection
per thread). Worker ``slot`` serves on ``server.port`` + slot, so two jobs placed on one node
never clash. A job the scheduler took away (NODE_FAIL, PREEMPTED) says nothing about the
profile: the entry is re-queued (at most ``MAX_REQUEUES`` times), as the tune re-queues a lost
host's trial. The time a job waited in the queue is stored apart (``entry.queued_s``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from glmserve.errors import GlmserveError
from glmserve.sigterm import sigterm_as_interrupt
from glmserve.sweep.agreement import judge_all
from glmserve.sweep.loop import (
    StepOutcome,
    SweepBackend,
    _reclaim,
    _run_entry,
    _stop_quietly,
)
from glmserve.sweep.state import (
    FAILED,
    INTERRUPTED,
    OK,
    PENDING,
    RUNNING,
    SKIPPED,
    Sweep,
    SweepEntry,
    SweepOptions,
    save_sweep,
    sweep_lock,
)

# A Slurm job's ends that are the cluster's doing, not the profile's: run it again.
JOB_LOST = frozenset({"NODE_FAIL", "PREEMPTED"})
MAX_REQUEUES = 3
DEFAULT_PORT = 30000  # SGLang's --port default, when no --set server.port= is given


class _Recording(SweepBackend):
    """A backend that remembers its last watch's outcome (the entry keeps only the
    diagnosis) so the worker can tell a job lost to the cluster from a crash."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.last_watch: StepOutcome | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def prepare(self, profile: str, opts: SweepOptions) -> Any:
        return self.inner.prepare(profile, opts)

    def check(self, spec: Any) -> str | None:
        return self.inner.check(spec)

    def launch(self, spec: Any) -> str:
        return self.inner.launch(spec)

    def group_of(self, run_id: str) -> dict[str, Any] | None:
        return self.inner.group_of(run_id)

    def watch(self, run_id: str, opts: SweepOptions) -> StepOutcome:
        self.last_watch = self.inner.watch(run_id, opts)
        return self.last_watch

    def bench(self, run_id: str, mode: str, opts: SweepOptions, **kw: Any) -> dict[str, Any]:
        return self.inner.bench(run_id, mode, opts, **kw)

    def capture(self, run_id: str, opts: SweepOptions) -> dict[str, Any]:
        return self.inner.capture(run_id, opts)

    def assess(self, run_id: str) -> StepOutcome:
        after = self.inner.assess(run_id)
        if after.state in JOB_LOST:  # mid-bench: the job, not the profile, was lost
            self.last_watch = after
        return after

    def stop(self, run_id: str) -> None:
        self.inner.stop(run_id)

    def reclaim(self, run_id: str) -> bool:
        return bool(self.inner.reclaim(run_id))

    def runs_started_since(self, profile: str, since: float) -> list[str]:
        return list(self.inner.runs_started_since(profile, since))


def slot_options(opts: SweepOptions, slot: int) -> SweepOptions:
    """``opts`` with ``server.port`` moved up by ``slot`` (the last --set server.port=, else
    SGLang's default 30000)."""
    base = DEFAULT_PORT
    for s in opts.overrides:
        if s.startswith("server.port="):
            base = int(s.split("=", 1)[1])
    if slot == 0:
        return opts
    return dataclasses.replace(opts, overrides=[*opts.overrides, f"server.port={base + slot}"])


def run_sweep_parallel(
    sweep: Sweep,
    opts: SweepOptions,
    make_backend: Callable[[], Any],
    k: int,
    say: Callable[[str], None],
) -> Sweep:
    """Run every unfinished profile of ``sweep``, ``k`` at once; saves after every step.
    Same results as ``run_sweep`` (crashes and stalls are results); Ctrl-C stops every
    running job, marks those entries interrupted and re-raises."""
    with sweep_lock(sweep.sweep_id), sigterm_as_interrupt():
        return _Parallel(sweep, opts, make_backend, k, say).run()


class _Parallel:
    def __init__(
        self,
        sweep: Sweep,
        opts: SweepOptions,
        make_backend: Callable[[], Any],
        k: int,
        say: Callable[[str], None],
    ) -> None:
        self.sweep, self.opts, self.make_backend, self.k, self.say = (
            sweep, opts, make_backend, k, say,
        )  # fmt: skip
        self.lock = threading.RLock()
        self.interrupted = threading.Event()
        self.queue: deque[SweepEntry] = deque()
        self.live: dict[int, tuple[Any, SweepEntry]] = {}  # slot -> (backend, entry) now
        self.error: GlmserveError | None = None

    def save(self) -> None:
        with self.lock:
            save_sweep(self.sweep)

    def run(self) -> Sweep:
        sw = self.sweep
        sw.status = RUNNING
        for e in sw.entries:
            if e.finished:
                self.say(f"{e.profile}: {e.status} (kept from before)")
            else:
                self.queue.append(e)
        self.save()
        threads = [
            threading.Thread(target=self._worker, args=(slot,), daemon=True)
            for slot in range(min(self.k, len(self.queue)))
        ]
        for th in threads:
            th.start()
        try:
            while any(th.is_alive() for th in threads):
                for th in threads:
                    th.join(0.2)
        except KeyboardInterrupt:
            self._shutdown(threads)
            raise
        if self.error is not None:
            sw.status = "stopped"
            self.save()
            raise self.error
        judge_all(sw, self.opts)
        sw.status = "done"
        self.save()
        return sw

    def _shutdown(self, threads: list[threading.Thread]) -> None:
        self.interrupted.set()
        with self.lock:
            live = list(self.live.values())
        for backend, entry in live:
            _stop_quietly(entry, backend, self.say)
        for th in threads:
            th.join(120)
        with self.lock:
            for e in self.sweep.entries:
                if e.status == RUNNING:
                    e.status, e.ended_at = INTERRUPTED, time.time()
                    e.error = "interrupted (Ctrl-C); the server was stopped"
            self.sweep.status = "interrupted"
            save_sweep(self.sweep)

    def _next(self) -> SweepEntry | None:
        with self.lock:
            while self.queue and not self.interrupted.is_set() and self.error is None:
                e = self.queue.popleft()
                if self.opts.until_first_success and any(
                    x.status == OK for x in self.sweep.entries
                ):
                    e.status = SKIPPED
                    e.error = "skipped: --until-first-success already has a successful profile"
                    save_sweep(self.sweep)
                    continue
                e.status, e.started_at, e.ended_at = RUNNING, time.time(), None
                e.run_id = e.diagnosis = e.error = e.trace = None
                e.group_id, e.nodes, e.bench = None, None, []
                save_sweep(self.sweep)
                return e
            return None

    def _worker(self, slot: int) -> None:
        backend = _Recording(self.make_backend())
        opts = slot_options(self.opts, slot)
        while True:
            entry = self._next()
            if entry is None:
                return
            with self.lock:
                self.live[slot] = (backend, entry)
            backend.last_watch = None
            try:
                _reclaim(entry, backend, self.say)
                _run_entry(self.sweep, entry, opts, backend, self.say)
            except GlmserveError as exc:
                _stop_quietly(entry, backend, self.say)
                with self.lock:
                    # after Ctrl-C a stopped server's errors are no verdict: --resume runs it
                    status = INTERRUPTED if self.interrupted.is_set() else FAILED
                    entry.status, entry.error, entry.ended_at = status, str(exc), time.time()
                    save_sweep(self.sweep)
                    self.live.pop(slot, None)
                self.say(f"{entry.profile}: failed: {exc}")
                if not self.opts.continue_on_error and not self.interrupted.is_set():
                    with self.lock:
                        self.error = self.error or exc
                    return
                continue
            _stop_quietly(entry, backend, self.say)
            with self.lock:
                self.live.pop(slot, None)
                lw = backend.last_watch
                if lw is not None and lw.diagnosis.get("queued_s") is not None:
                    entry.queued_s = lw.diagnosis["queued_s"]
                if self.interrupted.is_set():
                    entry.status, entry.ended_at = INTERRUPTED, time.time()
                    entry.error = "interrupted (Ctrl-C); the server was stopped"
                elif (
                    lw is not None and lw.state in JOB_LOST and (len(entry.requeued) < MAX_REQUEUES)
                ):
                    entry.requeued.append(f"run {entry.run_id}: job ended {lw.state}")
                    entry.status, entry.error = PENDING, f"re-queued: job ended {lw.state}"
                    self.queue.append(entry)
                    self.say(f"{entry.profile}: its job ended {lw.state}; re-queued")
                else:
                    entry.ended_at = time.time()
                save_sweep(self.sweep)
