"""Run a benchmark: closed- or open-loop levels over one or several client processes.

Closed loop (``--concurrency``): each level keeps ``concurrency`` requests in flight (a slot
sends its next request as soon as its stream ends) until ``num_prompts`` were sent or
``duration`` passed. Open loop (``--request-rate R``, one level per rate): request ``i`` is due
at a precomputed arrival time whose gaps are gamma distributed with shape ``burstiness`` and
mean ``1/R`` (Poisson for burstiness 1; bench_serving's rule, first request at once), and is
sent then, or as soon as one of ``--max-concurrency`` slots frees up (its wait for a slot then
shows as client queue time, since ``dispatch`` is the due time). Above
``SLOTS_PER_PROCESS`` slots the level is split over forked worker processes, each with its own
event loop and connection pool, so one Python loop's per-chunk cost does not cap what is
measured (``benchmarks/bench_client_capacity.py`` measures where that cap is). Clocks are
``time.perf_counter`` (CLOCK_MONOTONIC on Linux), comparable across the processes.

Faults: an unreachable server before the run -> ``TransportError`` naming the URL; request
errors are recorded and counted; a connect failure mid-run means the server is gone, so no new
request is sent and the run ends with what was measured; Ctrl-C (KeyboardInterrupt) stops the
level, keeps every record (in-flight ones marked ``interrupted``) and re-raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import queue as queue_mod
import random
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from glmserve.bench.loops import CONNECT_FAILED, LoopSpec, arrival_offsets, closed_loop
from glmserve.bench.metrics import StreamRecord, close_unfinished
from glmserve.bench.options import DEFAULT_STALL_TIMEOUT
from glmserve.bench.progress import Progress
from glmserve.bench.server_probe import ServerSampler, metrics_delta, scrape_metrics
from glmserve.bench.settings import BenchSettings, LevelRun, RunningBench
from glmserve.bench.workload import (
    Request,
    build_request,
    dataset_prompts_counted,
    dataset_prompts_with_replies,
    lengths,
    load_tokenizer,
    make_prompts,
)
from glmserve.errors import TransportError

ABORTED = "aborted: the server stopped serving"


def _split(
    indices: list[int] | None, slots: int, workers: int
) -> list[tuple[list[int] | None, int]]:
    """Share slots and request indices over workers (round robin)."""
    out = []
    for w in range(workers):
        s = slots // workers + (1 if w < slots % workers else 0)
        idx = indices[w::workers] if indices is not None else None
        out.append((idx, s))
    return [(i, s) for i, s in out if s > 0]


class _Outbox:
    """A worker's channel to the parent: a pipe of its own, written by a feeder thread.

    Why not one ``multiprocessing.Queue`` for all workers: its writers share one lock, and a
    worker killed while holding it (``kill -9`` mid-write) blocked every other worker and so
    the whole level. A pipe per worker shares nothing, and the parent reads EOF once the
    worker is gone, whatever it was doing. The feeder thread keeps a slow reader from
    blocking the worker's event loop (as the Queue's own feeder did)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.items: queue_mod.SimpleQueue = queue_mod.SimpleQueue()
        self.thread = threading.Thread(target=self._feed, daemon=True)
        self.thread.start()

    def put(self, item: Any) -> None:
        self.items.put(item)

    def _feed(self) -> None:
        while True:
            item = self.items.get()
            if item is None:
                return
            try:
                self.conn.send(item)
            except (OSError, ValueError):  # the parent is gone: nothing to tell
                return

    def close(self) -> None:
        """Send what is queued, then end (the parent reads EOF)."""
        self.items.put(None)
        self.thread.join(timeout=30.0)
        self.conn.close()


def _worker_main(spec: LoopSpec, conn: Any, stop: Any, wid: int) -> None:
    """Body of one forked client process: run its share, stream records back over ``conn``.

    Every record goes back as ``("rec", (wid, record))``, then ``("done", (wid, reason))``;
    an exception in the loop is reported as the reason (the parent counts what this worker
    never ran). A worker killed outright (OOM killer, ``kill -9``) sends no "done": the
    parent finds it by its exit status."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides about Ctrl-C
    q = _Outbox(conn)
    records: list[StreamRecord] = []
    inflight: dict[int, StreamRecord] = {}
    reason: str | None = None

    def on_record(rec: StreamRecord) -> None:
        q.put(("rec", (wid, rec)))

    async def main() -> str | None:
        loop_task = asyncio.create_task(
            closed_loop(spec, records, on_record, inflight, should_stop=stop.is_set)
        )
        while not loop_task.done():
            if stop.is_set():
                loop_task.cancel()
                break
            live = sum(r.chunk_tokens[-1] for r in inflight.values() if r.chunk_tokens)
            q.put(("live", (wid, live)))
            await asyncio.sleep(0.25)
        try:
            return await loop_task
        except asyncio.CancelledError:
            return "interrupted"

    try:
        reason = asyncio.run(main())
    except Exception as exc:  # reported to the parent, which accounts for it
        reason = f"{WORKER_FAILED} {wid} failed: raised {type(exc).__name__}: {exc}"[:300]
    finally:
        for rec in list(inflight.values()):
            rec.error = rec.error or "interrupted"
            q.put(("rec", (wid, rec)))
        q.put(("done", (wid, reason)))
        q.close()


WORKER_FAILED = "client worker"


def _exit_how(code: int | None) -> str:
    """A worker's end as a person reads it: "killed by signal 9 (SIGKILL)", "exit status 1"."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "?"
        return f"killed by signal {-code} ({name})"
    return f"exit status {code}"


def _not_run_reason(missing: int | None, total: int | None, dead: list[tuple[int, str]]) -> str:
    """The level's stop reason when client workers died: every request asked is accounted
    for, as "N of M requests not run" (or, by --duration, without a count to give)."""
    who = "; ".join(f"worker {w}: {how}" for w, how in dead)
    noun = "client worker died" if len(dead) == 1 else f"{len(dead)} client workers died"
    if missing is not None and total is not None:
        return f"{missing} of {total} requests not run: {noun} ({who})"
    return f"requests not run or not recorded: {noun} ({who})"


# -- levels --------------------------------------------------------------------------------


def run_level(
    settings: BenchSettings,
    concurrency: int,
    requests: list[Request],
    progress: Progress,
    run: LevelRun,
) -> LevelRun:
    """Measure one level into ``run`` (filled in place, so Ctrl-C leaves partial records)."""
    total = settings.prompts_for(concurrency, run.rate)
    indices = list(range(total)) if total is not None else None
    slots = settings.slots_for(concurrency, run.rate)
    arrivals = None
    if run.rate is not None:
        arrivals = arrival_offsets(total or 0, run.rate, settings.burstiness, settings.seed)
    if settings.dataset_name == "mooncake":
        from glmserve.bench.trace_replay import arrivals as trace_arrivals

        arrivals = trace_arrivals(settings)  # the trace's own due times, / --trace-speedup
    deadline_len = settings.duration
    progress.level_started(concurrency, total, deadline_len, run.rate)
    before = scrape_metrics(settings.base_url)
    t0 = time.perf_counter()
    with ServerSampler(settings.base_url) as sampler:
        try:
            if settings.dataset_name and settings.gsp_num_turns > 1:
                from glmserve.bench.gsp_bench import run_conversations

                run_conversations(settings, slots, progress, run)
            elif run.workers <= 1:
                _run_inprocess(settings, slots, requests, indices, progress, run, arrivals)
            else:
                _run_processes(settings, slots, requests, indices, progress, run, arrivals)
        finally:
            elapsed = time.perf_counter() - t0
            run.server["last_gen_throughput_samples"] = [v for _, v in sampler.samples]
    run.server.update(metrics_delta(before, scrape_metrics(settings.base_url), elapsed))
    progress.level_finished(run)
    return run


def _run_inprocess(
    settings: BenchSettings,
    concurrency: int,
    requests: list[Request],
    indices: list[int] | None,
    progress: Progress,
    run: LevelRun,
    arrivals: list[float] | None = None,
) -> None:
    inflight: dict[int, StreamRecord] = {}
    done = {"n": 0, "err": 0, "tok": 0}
    t0 = time.perf_counter()

    def on_record(rec: StreamRecord) -> None:
        done["n"] += 1
        done["err"] += 0 if rec.ok else 1
        done["tok"] += rec.n_tokens
        if not rec.ok and settings.failed is not None:
            settings.failed.set()

    async def main() -> str | None:
        start = time.perf_counter()
        deadline = start + settings.duration if settings.duration else None
        spec = LoopSpec(
            settings.base_url,
            settings.api,
            requests,
            indices,
            concurrency,
            settings.stall_timeout,
            start,
            deadline,
            arrivals,
            preconnect=settings.dataset_name == "mooncake",
        )
        loop_task = asyncio.create_task(closed_loop(spec, run.records, on_record, inflight))
        while not loop_task.done():
            if settings.aborted:
                loop_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loop_task
                return ABORTED
            live = sum(r.chunk_tokens[-1] for r in inflight.values() if r.chunk_tokens)
            progress.update(done["n"], done["err"], done["tok"] + live, time.perf_counter() - t0)
            await asyncio.wait({loop_task}, timeout=0.25)
        return await loop_task

    try:
        run.stopped = asyncio.run(main())
    except KeyboardInterrupt:
        run.stopped = "interrupted"
        raise
    finally:
        close_unfinished(run.records, time.perf_counter())
        progress.update(done["n"], done["err"], done["tok"], time.perf_counter() - t0)


def _run_processes(
    settings: BenchSettings,
    concurrency: int,
    requests: list[Request],
    indices: list[int] | None,
    progress: Progress,
    run: LevelRun,
    arrivals: list[float] | None = None,
) -> None:
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    readers: dict[Any, int] = {}  # each worker's pipe (read end) -> its id
    parts = _split(indices, concurrency, run.workers)
    start = time.perf_counter() + 0.2 + 0.05 * len(parts)
    deadline = start + settings.duration if settings.duration else None
    procs = []
    for wid, (idx, slots) in enumerate(parts):
        spec = LoopSpec(
            settings.base_url,
            settings.api,
            requests,
            idx,
            slots,
            settings.stall_timeout,
            start,
            deadline,
            arrivals,
            preconnect=settings.dataset_name == "mooncake",
        )
        r, w = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_worker_main, args=(spec, w, stop, wid), daemon=True)
        p.start()
        w.close()  # the worker holds the only write end: its death is EOF here
        readers[r] = wid
        procs.append(p)
    live: dict[int, int] = {}
    pending = set(range(len(parts)))
    received = [0] * len(parts)  # records each worker sent back
    counts = {"n": 0, "err": 0, "tok": 0}
    t0 = time.perf_counter()
    interrupted = False
    reasons: list[str] = []
    failed_workers: dict[int, str] = {}  # raised inside: its reason

    def handle(kind: str, payload: Any) -> None:
        if kind == "rec":
            wid, rec = payload
            received[wid] += 1
            run.records.append(rec)
            counts["n"] += 1
            counts["err"] += 0 if rec.ok else 1
            if not rec.ok and settings.failed is not None:
                settings.failed.set()
            counts["tok"] += rec.n_tokens
            if rec.error and rec.error.startswith(CONNECT_FAILED):
                stop.set()  # the server is gone: no new requests anywhere
        elif kind == "live":
            live[payload[0]] = payload[1]
        elif kind == "done":
            wid, why = payload
            pending.discard(wid)
            if why and why.startswith(WORKER_FAILED):
                failed_workers[wid] = why
            elif why:
                reasons.append(why)

    try:
        while pending and readers:
            if settings.aborted and not stop.is_set():
                stop.set()  # the server died: every worker stops and reports what it has
            if _receive(readers, handle, 0.25):
                progress.update(
                    counts["n"],
                    counts["err"],
                    counts["tok"] + sum(live.values()),
                    time.perf_counter() - t0,
                )
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        until = time.perf_counter() + 5.0
        while pending and readers and time.perf_counter() < until:
            with contextlib.suppress(KeyboardInterrupt):
                _receive(readers, handle, 0.2)
        raise
    finally:
        for r in readers:
            r.close()
        for p in procs:
            p.join(timeout=2.0)
            if p.is_alive():
                p.terminate()  # our own child, by its Process handle
                p.join(timeout=1.0)
        dead = [(w, _exit_how(procs[w].exitcode)) for w in sorted(pending)]
        dead += [(w, why.partition(" failed: ")[2] or why) for w, why in failed_workers.items()]
        if interrupted:
            run.stopped = "interrupted"
        elif dead:
            gone = {w for w, _ in dead}
            known = [len(parts[w][0]) for w in gone if parts[w][0] is not None]  # type: ignore[arg-type]
            missing = None
            if len(known) == len(gone):
                missing = sum(len(parts[w][0]) - received[w] for w in gone)  # type: ignore[arg-type]
                run.not_run = missing
            run.stopped = _not_run_reason(
                missing, len(indices) if indices is not None else None, sorted(dead)
            )
        elif settings.aborted:
            run.stopped = ABORTED
        elif reasons:
            run.stopped = next((r for r in reasons if r != "stopped"), reasons[0])


def _receive(readers: dict[Any, int], handle: Callable[[str, Any], None], timeout: float) -> int:
    """Handle the messages ready within ``timeout``; a pipe at EOF (its worker exited, done
    or dead) is dropped from ``readers``. Returns how many messages were handled."""
    n = 0
    for r in mp_connection.wait(list(readers), timeout):
        try:
            kind, payload = r.recv()  # type: ignore[union-attr]
        except Exception:  # EOF, or a message cut short: the worker died mid-write
            readers.pop(r, None)
            r.close()  # type: ignore[union-attr]
            continue
        handle(kind, payload)
        n += 1
    return n


def run_warmup(settings: BenchSettings, requests: list[Request], watch: Any = None) -> None:
    """Send ``settings.warmup`` requests (discarded) so connections and caches are warm.

    Watched as a level is: its progress goes to ``watch`` (a ``SilenceWatch``: silence makes
    the monitor ask ``/health``), and a monitor that finds the server dead (``settings.abort``)
    ends it at once with a TransportError, which the session turns into the verdict."""
    if settings.warmup <= 0:
        return
    if settings.dataset_name in ("generated-shared-prefix", "mooncake"):
        from glmserve.bench import gsp_bench

        requests = gsp_bench.warmup_requests(settings, settings.model or "default")
    slots = min(settings.warmup, max(settings.concurrency), 16)
    spec = LoopSpec(
        settings.base_url,
        settings.api,
        requests,
        list(range(settings.warmup)),
        slots,
        settings.stall_timeout,
        time.perf_counter(),
        None,
    )
    recs: list[StreamRecord] = []
    tick = getattr(watch, "tick", None)

    async def main() -> None:
        task = asyncio.create_task(
            closed_loop(spec, recs, lambda r: None, {}, should_stop=lambda: settings.aborted)
        )
        while not task.done():
            if settings.aborted:
                task.cancel()
                break
            if tick is not None:
                tick(sum(r.n_tokens + (r.end is not None) for r in list(recs)))
            await asyncio.sleep(0.25)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    if watch is not None:
        watch.quiet_phase(True)
        started = getattr(watch, "warmup_started", None)  # a Progress; a bare watch has none
        if started is not None:
            started(settings.warmup)
    try:
        asyncio.run(main())
    finally:
        if watch is not None:
            watch.quiet_phase(False)
    if settings.aborted:
        raise TransportError(f"{settings.base_url} stopped serving during the warmup")
    failed = [r for r in recs if r.error and r.error.startswith(CONNECT_FAILED)]
    if failed:
        raise TransportError(f"cannot reach server at {settings.base_url}: {failed[0].error}")


def keep_in_flight(
    base_url: str,
    requests: list[Request],
    slots: int,
    stop: threading.Event,
    records: list[StreamRecord],
    api: str = "native",
    stall_timeout: float = DEFAULT_STALL_TIMEOUT,
) -> str | None:
    """Load for a measurement taken elsewhere (``glmserve profile``): the closed loop keeps
    ``slots`` streams of ``requests`` (cycled) in flight until ``stop`` is set or the server
    is unreachable, ``records`` filling as they go. Returns why it stopped."""
    spec = LoopSpec(base_url, api, requests, None, slots, stall_timeout, time.perf_counter(), None)
    return asyncio.run(closed_loop(spec, records, lambda r: None, {}, should_stop=stop.is_set))


def prepare_requests(settings: BenchSettings | RunningBench, model: str) -> list[Request]:
    """Enough distinct prompts for the largest level (cycled when running by duration):
    random token ids, or the dataset file's prompts; output lengths per --random-range-ratio,
    or each dataset prompt's reply length (``BenchSettings.reply_lengths``)."""
    need = settings.prompts_needed()
    tok = load_tokenizer(settings.tokenizer)
    if settings.dataset_name == "generated-shared-prefix":
        from glmserve.bench import gsp_bench

        return gsp_bench.requests(settings, model, tok)
    if settings.dataset_name == "mooncake":
        from glmserve.bench import trace_replay

        return trace_replay.requests(settings, model, tok)
    ratio = settings.range_ratio()
    prompts: list[Any]
    rng = random.Random(settings.seed + 1)
    path = settings.dataset_path
    rows = None
    if path and settings.reply_lengths():
        prompts, outs, rows = dataset_prompts_with_replies(path, need, settings.seed, tok)
    else:
        if path:
            prompts, rows = dataset_prompts_counted(path, need, settings.seed, tok)
        else:
            vocab = len(tok) if tok is not None else None
            prompts = make_prompts(need, settings.input_len, settings.seed, ratio, vocab)
        outs = lengths(need, settings.output_len, min(ratio, 1.0), rng)
    if isinstance(settings, RunningBench):
        settings.dataset_rows = rows
    return [
        build_request(settings.api, p, o, model, tok) for p, o in zip(prompts, outs, strict=True)
    ]
