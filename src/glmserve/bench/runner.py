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
import dataclasses
import math
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import queue as queue_mod
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

import glmserve.bench.options as _o
from glmserve.bench.client import make_client, prepare_request, stream_request
from glmserve.bench.metrics import StreamRecord, close_unfinished
from glmserve.bench.options import DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, DEFAULT_STALL_TIMEOUT
from glmserve.bench.progress import Progress
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

SLOTS_PER_PROCESS = 128
PRECONNECT_LEAD_S = 0.05
# --random-range-ratio defaults: bench_serving's (sglang/bench_serving.py 0.5.9, line 3093)
# for open-loop random prompts; fixed lengths for decode and concurrency levels.
BENCH_SERVING_RANGE_RATIO = 0.0
FIXED_RANGE_RATIO = 1.0
CONNECT_FAILED = "connect failed"
ABORTED = "aborted: the server stopped serving"


@dataclass(frozen=True)
class BenchSettings:
    """What to measure and how; stored with the result so a number can be reproduced.

    Frozen and pure: one value can be run, repeated and validated again and is never changed
    by a run. What is read from the input files (a dataset's or trace's digest, a trace's rows
    and mean rate) is filled in once by :func:`resolve_inputs`, as a new value; what a run
    learns or signals while it runs (the endpoint measured, the model sent, the prompts a
    dataset gave, the abort/failed events) lives on :class:`RunningBench`."""

    base_url: str
    mode: str = "decode"  # "decode" | "concurrency"
    concurrency: list[int] = field(default_factory=lambda: [1])
    input_len: int = DEFAULT_INPUT_LEN  # bench.options: the one place of these defaults
    output_len: int = DEFAULT_OUTPUT_LEN
    num_prompts: int | None = None  # per level; default: decode 5, concurrency 2 x level
    duration: float | None = None  # per level, seconds (instead of num_prompts)
    warmup: int = 1
    api: str = "native"
    seed: int = 0
    stall_timeout: float = DEFAULT_STALL_TIMEOUT
    workers: int | None = None  # client processes per level; None = auto
    model: str | None = None  # OpenAI "model" field; None = first of /v1/models
    request_rate: list[float] | None = None  # open loop: one level per rate (req/s)
    burstiness: float = 1.0  # gamma shape of the inter-arrival gaps (1 = Poisson)
    max_concurrency: int | None = None  # open loop: at most this many in flight
    # Input/output lengths uniform in [len * ratio, len]; None: the default for the load shape
    # (``range_ratio``), and the resolved number is what the result records.
    random_range_ratio: float | None = None
    dataset_path: str | None = None  # prompts from a file instead of random token ids
    dataset_sha256: str | None = None  # its content (resolve_inputs): what compare checks
    tokenizer: str | None = None  # local tokenizer: exact prompt lengths for text prompts
    # False: --output-len was not given, so dataset prompts may take their replies' lengths
    # (``reply_lengths``); sweep and tune always pass a length.
    fixed_output_len: bool = True
    percentiles: list[float] = field(default_factory=lambda: [50.0, 90.0, 95.0, 99.0])
    slo: dict[str, float] = field(default_factory=dict)  # goodput bounds, ms
    per_request: bool = False  # per-request arrays in the JSON result
    rate_sweep: int | None = None  # guidellm's sweep: synchronous, throughput, N rates between
    metrics_interval: float = 1.0  # /metrics scrape period per level, s; 0: off (bench.telemetry)
    gpu_telemetry: bool = True  # nvidia-smi on the server's host (bench.gpu_telemetry)
    # -- workload (issue 24; checks in bench.gsp_bench.check_workload) ---------------------
    dataset_name: str | None = None  # "generated-shared-prefix": bench.gsp_bench
    gsp_num_groups: int = _o.GSP_NUM_GROUPS  # defaults: bench.options (bench_serving 0.5.9)
    gsp_prompts_per_group: int = _o.GSP_PROMPTS_PER_GROUP
    gsp_system_prompt_len: int = _o.GSP_SYSTEM_PROMPT_LEN
    gsp_question_len: int = _o.GSP_QUESTION_LEN
    gsp_output_len: int = _o.GSP_OUTPUT_LEN
    gsp_num_turns: int = 1  # > 1: each turn's prompt carries the server's real last reply
    think_time: float = 0.0  # s between a reply and the conversation's next turn
    flush_cache: bool = False  # POST /flush_cache before each level (recorded per level)
    trace_speedup: float = 1.0  # --dataset-name mooncake: due times / this (bench.trace_replay)
    trace_rows: int | None = None  # resolve_inputs (trace_replay.resolve): the trace's requests
    trace_sha256: str | None = None  # resolve_inputs (trace_replay.resolve): what compare checks

    @property
    def open_loop(self) -> bool:
        return bool(self.request_rate)

    def range_ratio(self) -> float:
        """``--random-range-ratio`` as given, else its default for this load shape.

        bench_serving's default (0.0, lengths uniform in [1, len]) applies where the knob has
        its meaning: random prompts offered open loop at ``--request-rate``. Decode and
        concurrency levels, the rate sweep (its saturation rule compares latencies within a
        level) and ``--dataset-path`` prompts (bench_serving ignores the ratio for datasets)
        use fixed lengths (1.0), so their figure is one shape.
        """
        if self.random_range_ratio is not None:
            return self.random_range_ratio
        if self.request_rate and not self.dataset_path:
            return BENCH_SERVING_RANGE_RATIO
        return FIXED_RANGE_RATIO

    def reply_lengths(self) -> bool:
        """Whether each dataset prompt asks for its reply's length in tokens (bench_serving's
        ShareGPT default): with ``--dataset-path`` and ``--tokenizer`` (a reply is counted
        in tokens, exactly) and no ``--output-len``. Not in a rate sweep, whose saturation
        rule compares requests of one output length."""
        return bool(
            self.dataset_path and self.tokenizer and not self.fixed_output_len
            and not self.rate_sweep
        )  # fmt: skip

    def prompts_needed(self) -> int:
        """Distinct prompts built before the first request: enough for the largest level
        (cycled when running by duration) and the warmup."""
        need = max((self.prompts_for(c, r) or 2 * c) for c, r in self.level_points())
        return max(need, self.warmup, 1)

    def level_points(self) -> list[tuple[int, float | None]]:
        """(concurrency, rate) of each level: closed-loop levels have no rate; an open-loop
        level's concurrency is its ``--max-concurrency`` (0 = unbounded). A rate sweep's fixed
        first two levels (synchronous, then everything at once); its rates come later."""
        if self.rate_sweep:
            return [(1, None), (self.max_concurrency or 0, math.inf)]
        if self.request_rate:
            return [(self.max_concurrency or 0, r) for r in self.request_rate]
        return [(c, None) for c in self.concurrency]

    def prompts_for(self, concurrency: int, rate: float | None = None) -> int | None:
        if self.dataset_name == "mooncake" and self.trace_rows:
            return self.trace_rows  # every row, at its timestamp
        if self.dataset_name == "generated-shared-prefix" and self.num_prompts is None:
            n = self.gsp_num_groups * self.gsp_prompts_per_group  # bench_serving's count
            if self.duration is None or self.gsp_num_turns > 1:
                return n * self.gsp_num_turns if self.gsp_num_turns > 1 else n
        if self.rate_sweep and rate is None:  # the synchronous level: one at a time
            return max(5, (self.num_prompts or 200) // 10)
        if self.duration is not None:
            if rate is not None:  # arrivals are precomputed: enough for the duration, and then some
                return self.num_prompts or math.ceil(rate * self.duration * 1.5) + 16
            return self.num_prompts
        if self.num_prompts is not None:
            return self.num_prompts
        if rate is not None:
            return 200
        return 5 if self.mode == "decode" else 2 * concurrency

    def slots_for(self, concurrency: int, rate: float | None = None) -> int:
        """Streams a level may hold at once: its concurrency, or an open level's cap."""
        if rate is None:
            return concurrency
        total = self.prompts_for(concurrency, rate) or 1
        return min(self.max_concurrency or total, total)

    def workers_for(self, concurrency: int, rate: float | None = None) -> int:
        slots = self.slots_for(concurrency, rate)
        if self.gsp_num_turns > 1:  # conversations run in one process (bench.gsp_bench)
            return 1
        if self.workers is not None:
            return max(1, min(self.workers, slots))
        want = math.ceil(slots / SLOTS_PER_PROCESS)
        return max(1, min(want, os.cpu_count() or 1, slots))

    def to_dict(self, running: dict[str, Any] | None = None) -> dict[str, Any]:
        """JSON-ready (an infinite rate is "inf": strict JSON has no Infinity), with what a
        run learnt (``running``: base_url, model, dataset_rows) in place."""
        running = running or {}
        d: dict[str, Any] = {}
        for k, v in self.__dict__.items():
            if k == "fixed_output_len":
                continue
            d[k] = running.get(k, v)
            if k == "dataset_sha256":  # where it was always stored: after the digest
                d["dataset_rows"] = running.get("dataset_rows")
        d["random_range_ratio"] = self.range_ratio()  # the lengths used, never "default"
        if self.reply_lengths():
            d["output_len"] = "reply"  # each request: its conversation's reply, in tokens
        if d.get("request_rate"):
            d["request_rate"] = [r if math.isfinite(r) else "inf" for r in d["request_rate"]]
        return d

    # A settings value never aborts and signals nothing: the runner's functions take it as it
    # is (tests, tools) or a RunningBench, which has both.
    aborted = False
    failed = None


def resolve_inputs(settings: BenchSettings) -> BenchSettings:
    """The settings with what their input files say filled in: the dataset's digest (what
    compare checks), a trace's rows, digest and mean rate (``trace_replay.resolve``). A new
    value; idempotent."""
    from glmserve.bench.trace_replay import resolve

    s = settings
    if s.dataset_path is not None and s.dataset_sha256 is None:
        from glmserve.bench.workload import dataset_digest

        s = dataclasses.replace(s, dataset_sha256=dataset_digest(s.dataset_path))
    return resolve(s)


@dataclass
class RunningBench:
    """One bench while it runs: its settings plus what it learns or signals meanwhile.

    Reads through to the settings for everything else (``run.seed``), so the runner's
    functions take either."""

    settings: BenchSettings
    base_url: str = ""  # the endpoint measured (the run's, once found and verified)
    model: str | None = None  # the OpenAI "model" field sent
    dataset_rows: int | None = None  # distinct prompts the dataset gave (prepare_requests)
    # Set (by the run monitor) when the server died: the level stops at once, keeping what
    # it measured; in-flight requests are recorded as failed.
    abort: threading.Event = field(default_factory=threading.Event)
    # Set by the runner whenever a request fails, so the run monitor takes a closer look.
    failed: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def start(cls, settings: BenchSettings) -> RunningBench:
        return cls(settings, base_url=settings.base_url, model=settings.model)

    def __getattr__(self, name: str) -> Any:
        if name == "settings" or name.startswith("__"):  # unpickling, copying: not yet set
            raise AttributeError(name)
        return getattr(self.settings, name)

    @property
    def aborted(self) -> bool:
        return self.abort.is_set()

    def to_dict(self) -> dict[str, Any]:
        """The settings as stored, with the endpoint, model and dataset rows this run used."""
        return self.settings.to_dict(
            {"base_url": self.base_url, "model": self.model, "dataset_rows": self.dataset_rows}
        )


@dataclass
class LevelRun:
    """Raw outcome of one level: every record plus server-side readings and stop reasons."""

    concurrency: int
    workers: int
    records: list[StreamRecord] = field(default_factory=list)
    rate: float | None = None  # open loop: the offered request rate
    server: dict[str, Any] = field(default_factory=dict)
    stopped: str | None = None  # why the level ended early, if it did
    not_run: int = 0  # requests of client workers that died, never run or never recorded


# -- server probes -------------------------------------------------------------------------


def probe_server(base_url: str, timeout: float = 10.0) -> dict[str, Any]:
    """``/server_info`` (or ``/get_server_info``) as a dict; TransportError if unreachable."""
    try:
        with httpx.Client(timeout=timeout) as c:
            for path in ("/server_info", "/get_server_info"):
                r = c.get(base_url + path)
                if r.status_code == 200:
                    data = r.json()
                    return data if isinstance(data, dict) else {}
            r = c.get(base_url + "/health")
            if r.status_code >= 500:
                raise TransportError(f"server at {base_url} is not healthy (HTTP {r.status_code})")
            return {}
    except httpx.HTTPError as exc:
        raise TransportError(f"cannot reach server at {base_url}: {exc}") from exc
    except (ValueError, RecursionError):  # not JSON, or nested past Python's parser
        return {}


def resolve_model(base_url: str, timeout: float = 10.0) -> str:
    """The served model name for OpenAI requests (first of ``/v1/models``), else "default"."""
    try:
        with httpx.Client(timeout=timeout) as c:
            data = c.get(base_url + "/v1/models").json()
        return str(data["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError, RecursionError):
        return "default"


def last_gen_throughput(info: Any) -> float | None:
    """``internal_states[0].last_gen_throughput`` (top level in older releases); None where
    the server's answer has another shape (a list, a string or an object for the number)."""
    if not isinstance(info, dict):
        return None
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        v = _finite_number(states[0].get("last_gen_throughput"))
        if v is not None:
            return v
    return _finite_number(info.get("last_gen_throughput"))


def _finite_number(v: Any) -> float | None:
    """``v`` as a float when it is a finite JSON number (not a bool, string or object)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer past a double
        return None
    return f if math.isfinite(f) else None


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text -> {metric name: value summed over label sets} (pure)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, rest = line.rpartition(" ")
        if not head:
            continue
        if rest and head and not head.endswith("}") and " " in head:  # "name value timestamp"
            head, _, rest = head.rpartition(" ")
        name = head.split("{", 1)[0].strip()
        try:
            out[name] = out.get(name, 0.0) + float(rest)
        except ValueError:
            continue
    return out


def _metric(m: dict[str, float], *names: str) -> float | None:
    for n in names:
        if n in m:
            return m[n]
    return None


def metrics_delta(before: dict[str, float], after: dict[str, float], seconds: float) -> dict:
    """Server-side figures over a level from two ``/metrics`` scrapes (pure)."""
    out: dict[str, Any] = {}
    if not before or not after:
        return out

    def delta(*names: str) -> float | None:
        a, b = _metric(after, *names), _metric(before, *names)
        return None if a is None or b is None else a - b

    gen = delta("sglang:generation_tokens_total")
    if gen is not None:
        out["generation_tokens"] = gen
        if seconds > 0:
            out["generation_tok_s"] = gen / seconds
    for key, base in (
        ("ttft_mean_ms", "sglang:time_to_first_token_seconds"),
        ("itl_mean_ms", "sglang:inter_token_latency_seconds"),
        ("tpot_mean_ms", "sglang:time_per_output_token_seconds"),
        ("e2e_mean_ms", "sglang:e2e_request_latency_seconds"),
    ):
        s, c = delta(base + "_sum"), delta(base + "_count")
        if s is not None and c:
            out[key] = 1000.0 * s / c
    gauge = _metric(after, "sglang:gen_throughput")
    if gauge is not None:
        out["gen_throughput_gauge"] = gauge
    return out


def scrape_metrics(base_url: str, timeout: float = 5.0) -> dict[str, float]:
    """``/metrics`` parsed, or {} when the server runs without ``--enable-metrics``."""
    try:
        r = httpx.get(base_url + "/metrics", timeout=timeout)
    except httpx.HTTPError:
        return {}
    if r.status_code != 200:
        return {}
    return parse_prometheus(r.text)


class _ServerSampler:
    """Polls ``/server_info`` once a second on a thread during a level (never blocks it)."""

    def __init__(self, base_url: str, interval: float = 1.0) -> None:
        self.base_url = base_url
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        with httpx.Client(timeout=2.0) as c:
            while not self._stop.wait(self.interval):
                try:
                    r = c.get(self.base_url + "/server_info")
                    v = last_gen_throughput(r.json()) if r.status_code == 200 else None
                except (httpx.HTTPError, ValueError, RecursionError):
                    v = None
                if v is not None:
                    self.samples.append((time.perf_counter(), v))

    def __enter__(self) -> _ServerSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=3.0)


# -- the closed loop -----------------------------------------------------------------------


@dataclass
class _LoopSpec:
    base_url: str
    api: str
    requests: list[Request]
    indices: list[int] | None  # request indices this loop sends (None: cycle until deadline)
    slots: int
    stall_timeout: float
    start_at: float
    deadline: float | None
    arrivals: list[float] | None = None  # open loop: due time of request i, s after start_at
    # Trace replay: open the slots' connections before the first due time, so a request's
    # arrival is not a TCP connect (~7 ms on a busy host) later than the trace says.
    preconnect: bool = False


def arrival_offsets(
    count: int, rate: float, burstiness: float, seed: int, exact: bool = True
) -> list[float]:
    """Due times (s from the start) of ``count`` requests offered at ``rate`` req/s.

    Gaps are gamma(shape=burstiness, scale=1/(rate*burstiness)): mean 1/rate, Poisson
    arrivals for burstiness 1, burstier below 1, more regular above; the first request is due
    at once (bench_serving's ``get_request``). ``rate`` inf: everything at once. With
    ``exact`` (the default) the gaps are rescaled so that their mean is exactly ``1/rate``:
    ``count`` requests then span ``(count - 1) / rate`` seconds, so the offered rate is the
    one asked for, not a sample of it (bench_serving offers a sample: +-7% at 200 requests).
    """
    if count <= 0:
        return []
    if math.isinf(rate):
        return [0.0] * count
    rng = random.Random(seed)
    theta = 1.0 / (rate * burstiness)
    gaps = [rng.gammavariate(burstiness, theta) for _ in range(count - 1)]
    if exact and gaps:
        # 200 Poisson gaps miss their mean by ~7% (1/sqrt(n)); scaled to mean exactly 1/rate,
        # (the process conditioned on its count) the offered rate is R, the shape unchanged.
        scale = (len(gaps) / rate) / sum(gaps)
        gaps = [g * scale for g in gaps]
    out, t = [0.0], 0.0
    for g in gaps:
        t += g
        out.append(t)
    return out


async def _closed_loop(
    spec: _LoopSpec,
    records: list[StreamRecord],
    on_record: Callable[[StreamRecord], None],
    inflight: dict[int, StreamRecord],
    should_stop: Callable[[], bool] = lambda: False,
) -> str | None:
    """Keep ``spec.slots`` streams in flight; returns why it stopped early (or None)."""
    perf = time.perf_counter
    stopped: list[str] = []
    counter = iter(spec.indices) if spec.indices is not None else _count()
    client = make_client(spec.slots, spec.stall_timeout)
    wanted = set(spec.indices) if spec.indices is not None else range(len(spec.requests))
    prepared = {
        i % len(spec.requests): prepare_request(
            client, spec.base_url, spec.requests[i % len(spec.requests)]
        )
        for i in wanted
    }

    if spec.preconnect:
        n = min(spec.slots, len(wanted))
        with contextlib.suppress(httpx.HTTPError):
            await asyncio.gather(*(client.get(spec.base_url + "/health") for _ in range(n)))
        # the schedule starts a moment later: every slot is then waiting on its due time,
        # so the first request is not later than the rest by the slots' own start-up
        spec.start_at = max(spec.start_at, perf() + PRECONNECT_LEAD_S)

    async def slot() -> None:
        while not stopped:
            if should_stop():
                stopped.append("stopped")
                return
            if spec.deadline is not None and perf() >= spec.deadline:
                return
            i = next(counter, None)
            if i is None:
                return
            due = None
            if spec.arrivals is not None:
                due = spec.start_at + spec.arrivals[i]
                if spec.deadline is not None and due >= spec.deadline:
                    return
                if due > perf():
                    await asyncio.sleep(due - perf())
            rec = StreamRecord(dispatch=perf() if due is None else due)
            records.append(rec)
            inflight[id(rec)] = rec
            try:
                k = i % len(spec.requests)
                await stream_request(
                    client,
                    spec.base_url,
                    spec.requests[k],
                    spec.api,
                    rec,
                    prepared[k],
                    spec.stall_timeout,
                )
            except Exception as exc:  # a client bug fails its request, not the level
                rec.error = f"client error: {type(exc).__name__}: {exc}"[:200]
                rec.end = rec.end or perf()
            finally:
                inflight.pop(id(rec), None)
            if rec.prompt_tokens is None:
                rec.prompt_tokens = spec.requests[i % len(spec.requests)].input_len
            on_record(rec)
            if rec.error and rec.error.startswith(CONNECT_FAILED) and not stopped:
                stopped.append(f"server unreachable mid-run ({spec.base_url}): {rec.error}")

    delay = spec.start_at - perf()
    if delay > 0:
        await asyncio.sleep(delay)
    tasks = [asyncio.create_task(slot()) for _ in range(spec.slots)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await client.aclose()
    return stopped[0] if stopped else None


def _count() -> Any:
    i = 0
    while True:
        yield i
        i += 1


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


def _worker_main(spec: _LoopSpec, conn: Any, stop: Any, wid: int) -> None:
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
            _closed_loop(spec, records, on_record, inflight, should_stop=stop.is_set)
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
    with _ServerSampler(settings.base_url) as sampler:
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
        spec = _LoopSpec(
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
        loop_task = asyncio.create_task(_closed_loop(spec, run.records, on_record, inflight))
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
        spec = _LoopSpec(
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
    spec = _LoopSpec(
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
            _closed_loop(spec, recs, lambda r: None, {}, should_stop=lambda: settings.aborted)
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
    spec = _LoopSpec(base_url, api, requests, None, slots, stall_timeout, time.perf_counter(), None)
    return asyncio.run(_closed_loop(spec, records, lambda r: None, {}, should_stop=stop.is_set))


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
