"""What a bench measures (``BenchSettings``, frozen), the inputs its files resolve to
(``resolve_inputs``), and what one bench holds while it runs (``RunningBench``, ``LevelRun``).

Kept apart from the runner so a stage that only builds or stores settings (options, sweep,
tune, views) need not import the client loops."""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import glmserve.bench.options as _o
from glmserve.bench.metrics import StreamRecord
from glmserve.bench.options import DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, DEFAULT_STALL_TIMEOUT

# Above this many slots a level is split over forked client processes (bench.runner).
SLOTS_PER_PROCESS = 128
# --random-range-ratio defaults: bench_serving's (sglang/bench_serving.py 0.5.9, line 3093)
# for open-loop random prompts; fixed lengths for decode and concurrency levels.
BENCH_SERVING_RANGE_RATIO = 0.0
FIXED_RANGE_RATIO = 1.0


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


@dataclass(frozen=True)
class Gates:
    """Pass/fail thresholds of a bench (``--min-decode-tok-s``, ``--max-ttft-ms``,
    ``--min-output-tok-s``); checked on the result, never on the settings."""

    min_decode_tok_s: float | None = None
    max_ttft_ms: float | None = None
    min_output_tok_s: list[tuple[int, float]] | None = None
