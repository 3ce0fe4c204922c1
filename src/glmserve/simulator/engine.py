"""Continuous-batching engine: the simulator's scheduler, paced by the cost model.

Like SGLang's scheduler (``event_loop_normal``): at each step boundary new requests are
admitted (up to ``--max-running-requests``, ``--max-prefill-tokens`` per prefill and the KV
pool) and run as one prefill step that yields their first token; otherwise one decode step
yields one token for every running request. ``--num-continuous-decode-steps`` is accepted and
ignored, as SGLang 0.5.9 does (server_args.py:616 defines it; no scheduler code reads it).

Aborts, as SGLang ends a request early: ``--max-queued-requests`` aborts a request that
arrives with the waiting queue full (0.5.9 ``managers/scheduler.py:1726-1770``
``_abort_on_queued_limit``: finish_reason ``{"type": "abort", "status_code": 503, "message":
"The request queue is full."}``, sent from ``_handle_abort_req``,
``managers/tokenizer_manager.py:2155-2190``); ``--sim-abort-after-tokens`` ends a running
request as ``/abort_request`` does (``scheduler.py:2820-2834``: ``req.to_finish =
FINISH_ABORT()``, the request still runs one forward, so its last chunk carries the token of
that step and ``FINISH_ABORT().to_json()``, ``managers/schedule_batch.py:179-192``).

Pacing: the server is never faster than its cost model, only late. A step lasts its model
time d (divided by ``--sim-speed``, times the variation factor, never below 1) from the
moment the previous step's wait ended (its emission work overlaps the next step, as SGLang's
CPU work overlaps the GPU), not from the previous step's planned end: when the process was
descheduled or the loop was busy past a step's end, the server is late and every later step
still takes its full d. Until 2026-12-05 a step started at the planned end whenever the loop
was less than 50 ms late, so the missed steps went out back to back; after a late first
token that read as 1.3x the model's decode rate (the 68.7 vs 51.9 tok/s sweep,
docs/known-limits.md). A per-request floor backs this up (``_emit``): a chunk is handed over
no earlier than the request's previous hand-over plus the model time of every step since, so
a pause in the middle of one step's emission cannot shorten the next gap either; what that
floor waited also delays the next step (else the same requests would wait again every step).
The wait sleeps whole milliseconds on the loop (the selector's grain) and spins the rest, so
steps end within microseconds of their time and an idle box adds no drift.

Every token's generation time (step end) and emission time (the hand-over stamp, taken
right before the chunk is built and sent; with ``--sim-send-threads`` the sender thread's
send, after the same floor) are recorded on the server's ``time.perf_counter`` clock and
exposed as ground truth (``GET /sim/trace``). Within one request, the emission times of two
chunks are at least the summed model durations of the steps between them apart; so are the
generation times.
"""

from __future__ import annotations

import asyncio
import math
import time
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from glmserve.simulator import costmodel
from glmserve.simulator.logs import ServerLog
from glmserve.simulator.options import SimOptions
from glmserve.simulator.radix import RadixCache, key_digest
from glmserve.simulator.tokens import TOKEN_TEXT, VOCAB_SIZE
from glmserve.simulator.variation import Variation

SLEEP_MARGIN_S = 0.0003  # a millisecond sleep on the loop wakes up to ~0.1 ms late (timer slack)
# finish_reason of a request aborted while waiting (scheduler.py:1762-1769) and of a running
# one aborted by /abort_request (FINISH_ABORT() with its defaults, schedule_batch.py:180-192)
QUEUE_FULL: dict[str, Any] = {
    "type": "abort", "message": "The request queue is full.", "status_code": 503,
}  # fmt: skip
ABORTED: dict[str, Any] = {"type": "abort", "message": "Aborted", "status_code": None,
                           "err_type": None}  # fmt: skip


class Sink(Protocol):
    """Where a request's tokens go (an SSE stream, or a future for non-streaming).

    ``flush`` hands over the ``ntokens`` newest tokens and must append their emission time to
    ``req.emit_times``: ``req.sent_at``, the hand-over time the engine stamped after the
    request's pacing floor (``Engine._emit``). A sender that writes the chunk later (sender
    threads) records its own send time instead, after the same floor (``req.sent_gap``
    model seconds after its previous one)."""

    def flush(self, req: Request, ntokens: int) -> None: ...


class Request:
    """One generation request as the scheduler sees it."""

    __slots__ = (
        "abort_at",
        "abort_reason",
        "admitted",
        "arrival",
        "cached_tokens",
        "emit_times",
        "finish",
        "finished",
        "flushed",
        "gen",
        "gen_times",
        "ids_csv",
        "key",
        "max_new",
        "n_out",
        "out_ids",
        "prompt_sha",
        "prompt_tokens",
        "rid",
        "seed",
        "seen_ids",
        "sent_at",
        "sent_busy",
        "sent_gap",
        "sink",
        "text_acc",
        "text_parts",
        "traced",
    )

    def __init__(self, rid: str, prompt_tokens: int, max_new: int, sink: Sink | None) -> None:
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.max_new = max(1, max_new)
        self.sink = sink
        self.seed = hash(rid) & 0xFFFFFFF
        self.out_ids: list[int] = []
        self.text_parts: list[str] = []
        # cumulative output kept pre-serialised so a chunk costs O(1) work, not O(tokens)
        self.ids_csv = ""
        self.text_acc = ""
        self.n_out = 0
        # float arrays, not lists: 8 bytes a token for up to trace_max_requests requests
        self.gen_times = array("d")
        self.emit_times = array("d")
        self.flushed = 0  # tokens already handed to the sink
        # Its last hand-over (Engine._emit): when (the tokens' emission time), the engine's
        # busy time then, and the model seconds since the hand-over before it.
        self.sent_at = -math.inf
        self.sent_busy = 0.0
        self.sent_gap = 0.0
        self.arrival = time.perf_counter()
        self.admitted = 0.0
        self.finish = 0.0
        self.finished = False
        self.traced = True
        self.gen: Any = None  # a textmodel.Generation when the request asked for logprobs
        self.key: Any = None  # the prompt's prefix-cache key (simulator/radix.py), if any
        self.cached_tokens = 0  # prompt tokens reused from the prefix cache
        self.prompt_sha: str | None = None  # radix.key_digest of the prompt as received
        self.seen_ids: tuple[list[int], list[int]] | None = None  # --sim-trace-ids
        self.abort_at = 0  # aborted once it has this many tokens (0: never)
        self.abort_reason: dict[str, Any] | None = None  # QUEUE_FULL or ABORTED

    @property
    def queue_aborted(self) -> bool:
        """Aborted before it ran (the queue was full): answered as _handle_abort_req does."""
        return self.abort_reason is QUEUE_FULL

    @property
    def completion_tokens(self) -> int:
        return self.n_out or len(self.out_ids)

    def release(self) -> None:
        """Drop the output (ids, text) once the response is written; the trace keeps the
        counts and times. Keeps ground truth for 20k requests in ~100 MB, not ~700 MB."""
        self.n_out = len(self.out_ids)
        self.out_ids = []
        self.text_parts = []
        self.text_acc = ""
        self.ids_csv = ""
        self.key = None

    def abort(self) -> None:
        """Client went away: the scheduler drops it at the next boundary (SGLang aborts)."""
        self.sink = None
        self.finished = True
        self.finish = -1.0  # marks an abort in the ground truth

    def to_trace(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "prompt_sha256": self.prompt_sha,
            **(
                {"prompt_ids": self.seen_ids[0], "output_ids": self.seen_ids[1]}
                if self.seen_ids is not None
                else {}
            ),
            "max_new_tokens": self.max_new,
            "completion_tokens": self.n_out or len(self.out_ids),
            "arrival": self.arrival,
            "admitted": self.admitted,
            "finish": self.finish,
            "gen_times": self.gen_times.tolist(),
            "emit_times": self.emit_times.tolist(),
        }


class Engine:
    """Runs steps forever on the event loop; ``submit`` adds a request."""

    def __init__(self, opts: SimOptions, log: ServerLog, on_step: Callable | None = None) -> None:
        self.opts = opts
        self.log = log
        self.scale = 1.0 / opts.speed
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._wake = asyncio.Event()
        self.dead = False
        self.pool_tokens = opts.pool_tokens
        self.max_running = opts.max_running_requests
        self.max_prefill = max(1, int(opts.server.max_prefill_tokens or 16384))
        self.log_interval = max(1, int(opts.server.decode_log_interval or 40))
        self.k = opts.tokens_per_chunk
        self.steps: deque[tuple] = deque(maxlen=opts.trace_max_steps)
        self.trace: dict[str, Request] = {}
        self.trace_order: deque[str] = deque()
        self.step_count = 0
        self.busy_s = 0.0  # wall seconds of all steps so far (the per-request floor's unit)
        self.held_s = 0.0  # this step's waits for that floor (they delay the next step too)
        self.decode_since_admit = 0
        self.decode_ct = 0
        self.last_gen_throughput = 0.0
        self._tp_tokens = 0
        self._tp_t0 = time.perf_counter()
        self.counters = {
            "prompt_tokens_total": 0,
            "generation_tokens_total": 0,
            "num_requests_total": 0,
            "num_aborted_requests_total": 0,
        }
        self.latencies: dict[str, list[float]] = {"ttft": [], "itl": [], "e2e": [], "queue": []}
        # Ground truth of the /metrics gauges: (perf_counter, running, queued, used tokens,
        # gen throughput, cache hit rate) at every change (``GET /sim/trace`` "gauges").
        self.gauge_log: deque[tuple] = deque(maxlen=opts.trace_max_steps)
        self.on_step = on_step
        self.quiet_rids: set[str] = set()
        # --sim-run-variation / --sim-step-jitter (simulator/variation.py)
        self.variation = Variation(opts.run_variation, opts.step_jitter, opts.variation_seed)
        self.max_queued: int | None = getattr(opts.server, "max_queued_requests", None)
        self.submitted = 0  # requests submitted (the abort fault picks every k-th)
        self.cache = RadixCache(
            self.pool_tokens, enabled=not getattr(opts.server, "disable_radix_cache", False)
        )

    # -- public -----------------------------------------------------------------------
    def submit(self, req: Request, traced: bool = True) -> None:
        req.traced = traced
        if traced:
            self.trace[req.rid] = req
            self.trace_order.append(req.rid)
            while len(self.trace_order) > self.opts.trace_max_requests:
                self.trace.pop(self.trace_order.popleft(), None)
        if traced:  # a health check's request is no client's: the faults leave it alone
            self.submitted += 1
            after = self.opts.abort_after_tokens
            if after is not None and self.submitted % self.opts.abort_every == 0:
                req.abort_at = after
            if self.max_queued is not None:
                queued = sum(1 for r in self.waiting if not r.finished)
                if queued + 1 > self.max_queued:  # scheduler.py:1729-1731
                    self._abort_queued(req)
                    return
        self.waiting.append(req)
        self.note_gauges()
        self._wake.set()

    def _abort_queued(self, req: Request) -> None:
        """The waiting queue is full: the new request is aborted at once (SGLang rejects the
        incoming one unless priority scheduling picks another, scheduler.py:1735-1760)."""
        req.finished = True
        req.abort_reason = QUEUE_FULL
        req.finish = -1.0  # an abort in the ground truth
        self.counters["num_aborted_requests_total"] += 1
        sink, req.sink = req.sink, None
        if sink is not None:
            sink.flush(req, 0)

    def used_tokens(self) -> int:
        return sum(r.prompt_tokens + len(r.out_ids) for r in self.running)

    def gauges(self) -> dict[str, float]:
        """The scheduler gauges /metrics serves (``handlers/metrics.py``), read now."""
        hit = getattr(self, "cache_hit_rate", 0.0)  # the radix-cache model sets it, if any
        hit = hit() if callable(hit) else hit
        return {
            "num_running_reqs": float(len(self.running)),
            "num_queue_reqs": float(len(self.waiting)),
            "num_used_tokens": float(self.used_tokens()),
            "gen_throughput": float(self.last_gen_throughput),
            "cache_hit_rate": float(hit or 0.0),
        }

    def note_gauges(self) -> None:
        """Append the gauges to the ground-truth log when they changed (every mutation of
        ``running``/``waiting``/throughput calls this)."""
        g = tuple(self.gauges().values())
        if not self.gauge_log or self.gauge_log[-1][1:] != g:
            self.gauge_log.append((time.perf_counter(), *g))

    def step_time_s(self, batch: int, ctx: int) -> float:
        return costmodel.decode_step_s(self.opts.model, self.opts.shape, batch, ctx)

    # -- loop -------------------------------------------------------------------------
    async def run(self) -> None:
        clock = time.perf_counter
        resume: float | None = None  # when the previous step's tokens were out
        while True:
            if self.dead:
                await asyncio.Event().wait()  # a dead worker never steps again
            if any(r.finished for r in self.running):
                for r in self.running:
                    if r.finished and r.finish < 0:
                        self.counters["num_aborted_requests_total"] += 1
                        r.finish = 0.0
                self.running = [r for r in self.running if not r.finished]
                self.note_gauges()
            if not self.running and not self.waiting:
                self._wake.clear()
                idle_from = clock()
                await self._wake.wait()
                self.variation.idle(clock() - idle_from)
                resume = None
                continue
            # Never at the previous step's planned end when that passed unnoticed (the loop
            # or the process was late): a real GPU does not catch up, it is late.
            start = clock() if resume is None else resume
            admit = self._admit() if self._may_admit() else []
            if admit:
                self.note_gauges()
            if admit:
                new_tokens = sum(r.prompt_tokens - r.cached_tokens for r in admit)
                model_s = costmodel.prefill_step_s(self.opts.model, self.opts.shape, new_tokens)
                kind = "prefill"
                batch, ctx = len(admit), new_tokens
                self.decode_since_admit = 0
            else:
                batch = len(self.running)
                if batch == 0:
                    # everything waiting is blocked (pool full); wait for a change
                    self._wake.clear()
                    await self._wake.wait()
                    resume = None
                    continue
                ctx = sum(r.prompt_tokens + len(r.out_ids) for r in self.running)
                model_s = self.step_time_s(batch, ctx)
                kind = "decode"
                self.decode_since_admit += 1
            wall_s = model_s * self.scale * self.variation.step()
            end = start + wall_s
            await self._sleep_until(end)
            if self.dead:
                continue
            emitted_at = clock()
            self.busy_s += wall_s
            self.held_s = 0.0
            if kind == "prefill":
                for r in admit:
                    r.admitted = start
                    if r.traced:  # SGLang observes it as the batch forms (scheduler.py:2151)
                        self.latencies["queue"].append(start - r.arrival)
                self._emit(admit, end)
                self.running.extend(r for r in admit if not r.finished)
                self._cache_prompts(admit)
                self._log_prefill(admit, new_tokens)
            else:
                self._emit(self.running, end)
                self.decode_ct += 1
                if self.decode_ct % self.log_interval == 0:  # SGLang: forward_ct % interval
                    self._log_decode()
            self.note_gauges()
            self.step_count += 1
            self.steps.append((self.step_count, kind, start, end, emitted_at, model_s, batch, ctx))
            resume = emitted_at + self.held_s
            if self.on_step is not None:
                self.on_step(kind, batch)

    @staticmethod
    async def _sleep_until(end: float) -> None:
        """Wake at ``end`` on perf_counter to a few microseconds, never before it: sleep on
        the loop for whole milliseconds that end before ``end`` (asyncio's selector rounds a
        timeout up to the next millisecond, so a fractional sleep overshot by up to 1 ms),
        then spin the rest (under 1.3 ms a step)."""
        clock = time.perf_counter
        whole_ms = math.floor((end - clock() - SLEEP_MARGIN_S) * 1000.0)
        if whole_ms >= 1:
            await asyncio.sleep(whole_ms / 1000.0)
        while clock() < end:
            pass

    def _may_admit(self) -> bool:
        return bool(self.waiting)

    def _admit(self) -> list[Request]:
        admit: list[Request] = []
        tokens = 0
        used = self.used_tokens()
        while self.waiting and len(self.running) + len(admit) < self.max_running:
            r = self.waiting[0]
            if r.finished:  # aborted while queued
                self.waiting.popleft()
                continue
            need = r.prompt_tokens + r.max_new
            if admit and tokens + r.prompt_tokens > self.max_prefill:
                break
            if used + need > self.pool_tokens and (self.running or admit):
                break
            self.waiting.popleft()
            r.cached_tokens = self.cache.match(r.key, r.prompt_tokens)
            admit.append(r)
            tokens += r.prompt_tokens
            used += need
        return admit

    def _emit(self, reqs: list[Request], gen_t: float) -> None:
        k = self.k
        n_tokens = 0
        clock = time.perf_counter
        busy = self.busy_s
        for r in reqs:
            if r.finished:
                continue
            n = len(r.out_ids)
            gen = r.gen
            tid = (r.seed * 40503 + n * 2654435761) % VOCAB_SIZE if gen is None else gen.next()
            r.out_ids.append(tid)
            piece = TOKEN_TEXT[tid & 4095]
            r.text_parts.append(piece)
            r.text_acc += piece
            r.ids_csv = f"{r.ids_csv},{tid}" if n else str(tid)
            r.gen_times.append(gen_t)
            n_tokens += 1
            done = n + 1 >= r.max_new
            # to_finish is checked before the length (schedule_batch.py:1076-1086)
            if r.abort_at and n + 1 >= r.abort_at:
                done = True
                r.abort_reason = ABORTED
                self.counters["num_aborted_requests_total"] += 1
            if done:
                r.finished = True
                r.finish = gen_t
            # SGLang's stream_interval rule (0.5.9 scheduler_output_processor_mixin.py:968-979):
            # with k > 1 a chunk goes out when len(output_ids) % k == 1, so the first token
            # is sent alone and then every k tokens; k == 1 sends each token.
            if done or k == 1 or (n + 1) % k == 1:
                # The floor: not before the previous chunk's hand-over plus the model time
                # of every step since. It waits only when this step's emission got ahead of
                # the last one's (a pause in the middle of that one, or a few us of jitter).
                gap = busy - r.sent_busy
                t = clock()
                ready = r.sent_at + gap
                if t < ready:
                    t0 = t
                    while t < ready:
                        t = clock()
                    self.held_s += t - t0
                r.sent_at, r.sent_busy, r.sent_gap = t, busy, gap
                sink = r.sink
                ntok = n + 1 - r.flushed
                r.flushed = n + 1
                if sink is not None:
                    sink.flush(r, ntok)  # records r.sent_at as the tokens' emission time
                else:
                    r.emit_times.extend([t] * ntok)
                if done:
                    r.sink = None  # the finished request no longer holds its connection
                    self._account(r)
                    self.cache_finished(r)
        self._tp_tokens += n_tokens
        self.counters["generation_tokens_total"] += n_tokens

    def _account(self, r: Request) -> None:
        if not r.traced:
            return
        c = self.counters
        c["num_requests_total"] += 1
        c["prompt_tokens_total"] += r.prompt_tokens
        lat = self.latencies
        if r.gen_times:
            lat["ttft"].append(r.gen_times[0] - r.arrival)
            lat["e2e"].append(r.gen_times[-1] - r.arrival)
            if len(r.gen_times) > 1:
                lat["itl"].append((r.gen_times[-1] - r.gen_times[0]) / (len(r.gen_times) - 1))
        for v in lat.values():
            if len(v) > 100000:
                del v[: len(v) - 100000]

    def _cache_prompts(self, reqs: list[Request]) -> None:
        """After prefill the prompts' KV is in the tree (SGLang ``cache_unfinished_req``);
        the cache may keep what the running requests leave free of the pool."""
        room = self.pool_tokens - self.used_tokens()
        for r in reqs:
            self.cache.insert(r.key, r.prompt_tokens, room)

    def cache_finished(self, r: Request) -> None:
        """A finished request's prompt and reply stay cached (``cache_finished_req``), so a
        next turn whose prompt is this one's prompt plus its reply text matches both; the
        reply's key is its text appended to a text prompt's key, its ids to an ids key."""
        if r.key is None:
            return
        r.prompt_sha = key_digest(r.key)  # ground truth of what was received, kept small
        if self.opts.trace_ids and not isinstance(r.key, bytes):
            r.seen_ids = (list(r.key), list(r.out_ids))  # prompt as received, reply as sent
        if self.cache.enabled:
            key = (
                r.key + r.text_acc.encode()
                if isinstance(r.key, bytes)
                else r.key + tuple(r.out_ids)
            )
            room = self.pool_tokens - self.used_tokens()
            self.cache.insert(key, r.prompt_tokens + len(r.out_ids), room)
        r.key = None  # the trace keeps requests: not their prompts

    def flush_cache(self) -> None:
        self.cache.flush()

    def _log_prefill(self, admit: list[Request], new_tokens: int) -> None:
        if all(r.rid in self.quiet_rids for r in admit):
            return
        usage = self.used_tokens() / self.pool_tokens if self.pool_tokens else 0.0
        self.log.line(
            f"Prefill batch, #new-seq: {len(admit)}, #new-token: {new_tokens}, "
            f"#cached-token: {sum(r.cached_tokens for r in admit)}, token usage: {usage:.2f}, "
            f"#running-req: {len(self.running) - len(admit)}, #queue-req: {len(self.waiting)}, ",
            0,
        )

    def _log_decode(self) -> None:
        now = time.perf_counter()
        dt = now - self._tp_t0
        if dt > 0:
            self.last_gen_throughput = self._tp_tokens / dt
        self._tp_tokens = 0
        self._tp_t0 = now
        used = self.used_tokens()
        usage = used / self.pool_tokens if self.pool_tokens else 0.0
        graph = "True" if self.opts.shape.cuda_graph else "False"
        self.log.line(
            f"Decode batch, #running-req: {len(self.running)}, #token: {used}, "
            f"token usage: {usage:.2f}, cuda graph: {graph}, "
            f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "
            f"#queue-req: {len(self.waiting)}, ",
            0,
        )

    # -- ground truth -----------------------------------------------------------------
    def _seen_until(self, since_step: int) -> float:
        """A poller that saw steps up to ``since_step`` saw the gauges up to that step's
        emission; -inf when it saw none (or that step is no longer kept): all of them."""
        if since_step > 0:
            for st in reversed(self.steps):
                if st[0] == since_step:
                    return st[4]
                if st[0] < since_step:
                    break
        return float("-inf")

    def trace_dict(self, rid: str | None = None, since_step: int = 0) -> dict[str, Any]:
        reqs = (
            {rid: self.trace[rid].to_trace()}
            if rid and rid in self.trace
            else {}
            if rid
            else {k: v.to_trace() for k, v in self.trace.items()}
        )
        steps = [
            {
                "i": s[0],
                "kind": s[1],
                "start": s[2],
                "end": s[3],
                "emitted": s[4],
                "model_s": s[5],
                "batch": s[6],
                "ctx_tokens": s[7],
            }
            for s in self.steps
            if s[0] > since_step
        ]
        return {
            "clock": "time.perf_counter",
            "wall_minus_perf": time.time() - time.perf_counter(),
            "time_scale": self.scale,
            "tokens_per_chunk": self.k,
            "requests": reqs,
            "steps": steps,
            "gauge_fields": ["t", *self.gauges()],
            "gauges": [list(g) for g in self.gauge_log if g[0] > self._seen_until(since_step)],
        }
