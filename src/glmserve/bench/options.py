"""``BenchOptions``: every option of ``glmserve bench``, declared once, and its rules.

Each field is one option: its type and default are the option's, its ``opt(...)`` the flag
spellings (bench_serving's aliases included), help and metavar (``glmserve.optmodel``). The
verb's typer parameters are generated from this model (``glmserve.cli.generate``), and
``plan()`` applies every rule once, in the order the verb always applied them, into a frozen
``BenchPlan``: the ``BenchSettings`` to run, gates, labels, probe spec.

Adding a bench option is adding one field here (and reading it in ``plan()``): the CLI flag,
``--help``, the docs' CLI reference and the parameter test follow from the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from glmserve.errors import ConfigError
from glmserve.optmodel import Options, arg, opt, same_as

# Defaults shared with the stages that bench (sweep, tune): declared here, once.
DEFAULT_INPUT_LEN = 128
DEFAULT_OUTPUT_LEN = 256
DEFAULT_STALL_TIMEOUT = 120.0
DEFAULT_LEVELS = "1,4,16,64,256"  # --mode concurrency without --concurrency
DEFAULT_PERCENTILES = "50,90,95,99"
# The shared-prefix workload's knobs (bench_serving.py 0.5.9 lines 3319-3372), read by the
# model and by BenchSettings (a library caller's defaults), declared here once.
GSP_NUM_GROUPS = 64
GSP_PROMPTS_PER_GROUP = 16
GSP_SYSTEM_PROMPT_LEN = 2048
GSP_QUESTION_LEN = 128
GSP_OUTPUT_LEN = 256
DATASET_NAMES = ("random", "sharegpt", "generated-shared-prefix", "mooncake")
# Labels are stored with every result and shown in every listing: a 120 KB label was taken.
MAX_LABEL_CHARS = 256
MAX_LABELS = 32


# --------------------------------------------------------------------------- composed load
# A sweep and a tune bench every server they launch: the load shape they share is declared
# here, once, and composed (inherited) by their options models.
STAGE_REPEAT = 3  # a sweep's or tune's bench N times per server: medians, intervals (vLLM: 3)


class LoadOptions(Options):
    """The bench a sweep or tune runs on each server (``--input-len``... ``--repeat``)."""

    input_len: Annotated[
        int,
        opt(
            "--input-len", "--random-input-len", help="Prompt tokens per request (random prompts)."
        ),
    ] = DEFAULT_INPUT_LEN
    output_len: Annotated[
        int,
        opt("--output-len", "--random-output-len", help="Output tokens per request (ignore_eos)."),
    ] = DEFAULT_OUTPUT_LEN
    num_prompts: Annotated[
        int | None,
        opt("--num-prompts", help="Requests per level (default: decode 5, concurrency 2 x level)."),
    ] = None
    max_excess_nll: Annotated[
        float | None,
        opt("--max-excess-nll", help="WRONG_OUTPUT above this many nats/token (default 0.1)."),
    ] = None
    min_greedy_agreement: Annotated[
        float | None,
        opt("--min-greedy-agreement", help="WRONG_OUTPUT below this mean agreement (0.25)."),
    ] = None


class BenchOptions(Options):
    """``glmserve bench``'s options (the verb's ``--json``/``--wide`` are rendering only)."""

    run: Annotated[
        str | None,
        arg("Run id or group id (from `glmserve launch`); a group is benched on node 0."),
    ] = None
    url: Annotated[
        str | None, opt("--url", "--base-url", help="Bench this server URL instead of a run.")
    ] = None
    mode: Annotated[
        str | None,
        opt(
            "--mode",
            help="decode (one stream; the default) | concurrency (--concurrency levels, default "
            f"{DEFAULT_LEVELS}) | rate (open loop; implied by --request-rate, --rate-sweep).",
        ),
    ] = None
    # None when not given, so a --concurrency that the mode ignores is refused, not dropped
    concurrency: Annotated[
        str | None,
        opt("--concurrency", help="Concurrency levels to bench, a comma list like 1,4,16."),
    ] = None
    input_len: Annotated[int, same_as(LoadOptions, "input_len")] = DEFAULT_INPUT_LEN
    output_len: Annotated[
        int | None,
        opt(
            "--output-len",
            help=f"Output tokens per request (ignore_eos; default {DEFAULT_OUTPUT_LEN}). With "
            "--dataset-path and --tokenizer: default each prompt's reply length (bench_serving's).",
        ),
    ] = None
    random_output_len: Annotated[
        int | None,
        opt(
            "--random-output-len",
            help="bench_serving's: --output-len for random prompts (ignored with --dataset-path).",
        ),
    ] = None
    sharegpt_output_len: Annotated[
        int | None,
        opt(
            "--sharegpt-output-len",
            help="bench_serving's: --output-len for --dataset-path prompts (ignored without).",
        ),
    ] = None
    num_prompts: Annotated[int | None, same_as(LoadOptions, "num_prompts")] = None
    duration: Annotated[float | None, opt("--duration", help="Seconds per level instead.")] = None
    warmup: Annotated[
        int,
        opt("--warmup", "--warmup-requests", help="Unmeasured requests before the first level."),
    ] = 1
    api: Annotated[str, opt("--api", help="native (/generate) | openai | chat")] = "native"
    seed: Annotated[int, opt("--seed", help="Seed of the random token-id prompts.")] = 0
    stall_timeout: Annotated[
        float,
        opt("--stall-timeout", help="Fail a request that brings no token for this long (s)."),
    ] = DEFAULT_STALL_TIMEOUT
    workers: Annotated[
        int | None,
        opt("--workers", help="Client processes per level (default: 1 per 128 streams)."),
    ] = None
    min_decode_tok_s: Annotated[
        float | None,
        opt("--min-decode-tok-s", help="Gate: exit 1 if median decode tok/s is lower."),
    ] = None
    max_ttft_ms: Annotated[
        float | None,
        opt("--max-ttft-ms", help="Gate: exit 1 if median TTFT (any level) is higher."),
    ] = None
    min_output_tok_s: Annotated[
        list[str],
        opt(
            "--min-output-tok-s",
            help="Gate C:X (e.g. 64:900): exit 1 if output tok/s at concurrency C is below X.",
        ),
    ] = Field(default_factory=list)
    request_rate: Annotated[
        str | None,
        opt(
            "--request-rate",
            help="Open loop: offer R requests/s (comma list: one level each; inf = all at once).",
        ),
    ] = None
    rate_sweep: Annotated[
        int | None,
        opt(
            "--rate-sweep",
            help="Find saturation: synchronous, then all at once, then N rates between.",
        ),
    ] = None
    burstiness: Annotated[
        float | None,
        opt(
            "--burstiness",
            help="Open loop: gamma shape of arrival gaps, 1 (default) Poisson, <1 burstier.",
        ),
    ] = None
    max_concurrency: Annotated[
        int | None,
        opt("--max-concurrency", help="Open loop: at most this many requests in flight."),
    ] = None
    random_range_ratio: Annotated[
        float | None,
        opt(
            "--random-range-ratio",
            help="Lengths uniform in \\[len*ratio, len]; default 0.0 with --request-rate "
            "(bench_serving's), else 1.0 (fixed lengths).",
        ),
    ] = None
    dataset_path: Annotated[
        str | None,
        opt("--dataset-path", help="Prompts from a ShareGPT JSON/JSONL or plain text file."),
    ] = None
    dataset_name: Annotated[
        str | None,
        opt(
            "--dataset-name",
            help="bench_serving's: random (token ids, the default) | sharegpt (needs "
            "--dataset-path) | generated-shared-prefix (--gsp-*) | mooncake (a trace in "
            "--dataset-path).",
        ),
    ] = None
    # -- workload knobs (docs/workload.md), checked in bench.gsp_bench.check_workload.
    # Names/defaults: sglang bench_serving.py 0.5.9 lines 3319-3372.
    gsp_num_groups: Annotated[
        int,
        opt("--gsp-num-groups", help="generated-shared-prefix: groups (one system prompt each)."),
    ] = GSP_NUM_GROUPS
    gsp_prompts_per_group: Annotated[
        int, opt("--gsp-prompts-per-group", help="generated-shared-prefix: prompts per group.")
    ] = GSP_PROMPTS_PER_GROUP
    gsp_system_prompt_len: Annotated[
        int,
        opt("--gsp-system-prompt-len", help="generated-shared-prefix: shared prefix tokens."),
    ] = GSP_SYSTEM_PROMPT_LEN
    gsp_question_len: Annotated[
        int, opt("--gsp-question-len", help="generated-shared-prefix: question tokens per turn.")
    ] = GSP_QUESTION_LEN
    gsp_output_len: Annotated[
        int, opt("--gsp-output-len", help="generated-shared-prefix: output tokens per request.")
    ] = GSP_OUTPUT_LEN
    gsp_num_turns: Annotated[
        int,
        opt(
            "--gsp-num-turns",
            help="generated-shared-prefix: turns per conversation; turn k's prompt carries the "
            "server's reply to turn k-1 (--api native).",
        ),
    ] = 1
    think_time: Annotated[
        float,
        opt("--think-time", help="Seconds between a reply and the next turn (--gsp-num-turns)."),
    ] = 0.0
    flush_cache: Annotated[
        bool, opt("--flush-cache", help="POST /flush_cache before each level (recorded per level).")
    ] = False
    trace_speedup: Annotated[
        float, opt("--trace-speedup", help="mooncake: replay the trace this many times faster.")
    ] = 1.0
    tokenizer: Annotated[
        str | None,
        opt("--tokenizer", help="Local tokenizer directory: exact token lengths for text."),
    ] = None
    percentiles: Annotated[
        str, opt("--percentiles", help="Latency percentiles to report (comma list).")
    ] = DEFAULT_PERCENTILES
    slo: Annotated[
        str | None,
        opt("--slo", help="Goodput SLOs, ms: ttft_ms=..,tpot_ms=..,itl_ms=..,e2e_ms=.."),
    ] = None
    output_details: Annotated[
        bool,
        opt("--output-details", help="Per-request arrays (TTFT, TPOT, ITLs...) in the JSON."),
    ] = False
    label: Annotated[
        list[str],
        opt("--label", help="k=v stored with the result (repeat); `glmserve results --label`."),
    ] = Field(default_factory=list)
    probe: Annotated[
        bool,
        opt("--probe", help="After the levels, send the built-in probe set (greedy, logprobs)."),
    ] = False
    reference: Annotated[
        int | None,
        opt(
            "--reference",
            help="Bench result id whose probe outputs the server must reproduce (implies "
            "--probe); WRONG_OUTPUT fails the output-agreement gate (exit 1).",
        ),
    ] = None
    max_excess_nll: Annotated[float | None, same_as(LoadOptions, "max_excess_nll")] = None
    min_greedy_agreement: Annotated[float | None, same_as(LoadOptions, "min_greedy_agreement")] = (
        None
    )
    repeat: Annotated[
        int, opt("--repeat", help="Run the bench N times on the server: medians, 95% intervals.")
    ] = 1
    gate_on: Annotated[
        str, opt("--gate-on", help="median | lower: gates read the interval's bound.")
    ] = "median"
    metrics_interval: Annotated[
        float,
        opt(
            "--metrics-interval",
            help="Scrape the server's /metrics (--enable-metrics) every this many seconds per "
            "level; 0: off.",
        ),
    ] = 1.0
    gpu_telemetry: Annotated[
        bool,
        opt(
            "--gpu-telemetry/--no-gpu-telemetry",
            help="Sample nvidia-smi on the server's host: power, clocks, tokens per joule.",
        ),
    ] = True
    output: Annotated[
        Path | None, opt("--output", "--output-file", help="Also write the JSON here.")
    ] = None

    def plan(self) -> BenchPlan:
        """Every rule of the options, applied once, in order; ConfigError (exit 2) names the
        flag. Nothing is measured and no server is asked."""
        from glmserve.bench.metrics import parse_percentiles, parse_slo
        from glmserve.bench.probe import probe_spec
        from glmserve.bench.repeats import check_repeat
        from glmserve.bench.results import parse_output_gate
        from glmserve.bench.settings import BenchSettings, Gates
        from glmserve.bench.validate import validate_settings

        check_dataset_name(self.dataset_name, self.dataset_path)
        output_len = pick_output_len(
            self.output_len, self.random_output_len, self.sharegpt_output_len, self.dataset_path
        )
        gsp = self.dataset_name == "generated-shared-prefix"
        if self.dataset_name in ("generated-shared-prefix", "mooncake") and output_len is not None:
            where = "--gsp-output-len" if gsp else "each trace row's output_length"
            raise ConfigError(f"--dataset-name {self.dataset_name}: the output length is {where}")
        open_loop = self.request_rate is not None or self.rate_sweep is not None
        mode = resolve_mode(self.mode, open_loop or self.dataset_name == "mooncake")
        levels = self._levels(mode)
        if self.burstiness is not None and not open_loop:
            raise ConfigError(
                "--burstiness shapes open-loop arrivals: give --request-rate or --rate-sweep too"
            )
        _check_output(self.output)
        settings = BenchSettings(
            base_url=self.url or "",
            mode=mode,
            concurrency=levels,
            input_len=self.gsp_system_prompt_len + self.gsp_question_len if gsp else self.input_len,
            output_len=self.gsp_output_len
            if gsp
            else (DEFAULT_OUTPUT_LEN if output_len is None else output_len),
            fixed_output_len=output_len is not None,
            num_prompts=self.num_prompts,
            duration=self.duration,
            warmup=self.warmup,
            api=self.api,
            seed=self.seed,
            stall_timeout=self.stall_timeout,
            workers=self.workers,
            request_rate=_rates(self.request_rate) if self.request_rate is not None else None,
            burstiness=1.0 if self.burstiness is None else self.burstiness,
            max_concurrency=self.max_concurrency,
            random_range_ratio=self.random_range_ratio,
            dataset_path=self.dataset_path,
            tokenizer=self.tokenizer,
            percentiles=list(_parse("--percentiles", parse_percentiles, self.percentiles)),
            slo=_parse("--slo", parse_slo, self.slo) if self.slo else {},
            per_request=self.output_details,
            rate_sweep=self.rate_sweep,
            metrics_interval=self.metrics_interval,
            gpu_telemetry=self.gpu_telemetry,
            dataset_name=self.dataset_name
            if self.dataset_name in ("generated-shared-prefix", "mooncake")
            else None,
            gsp_num_groups=self.gsp_num_groups,
            gsp_prompts_per_group=self.gsp_prompts_per_group,
            gsp_system_prompt_len=self.gsp_system_prompt_len,
            gsp_question_len=self.gsp_question_len,
            gsp_output_len=self.gsp_output_len,
            gsp_num_turns=self.gsp_num_turns,
            think_time=self.think_time,
            flush_cache=self.flush_cache,
            trace_speedup=self.trace_speedup,
        )
        gates = Gates(
            self.min_decode_tok_s,
            self.max_ttft_ms,
            [parse_output_gate(g) for g in self.min_output_tok_s],
        )
        labels = parse_labels(self.label)
        validate_settings(settings, gates)  # once: run_bench is told so
        check_repeat(self.repeat, self.gate_on, self.rate_sweep)
        spec = probe_spec(self.probe, self.reference, self.max_excess_nll,
                          self.min_greedy_agreement)  # fmt: skip
        return BenchPlan(self.run, settings, gates, labels, spec, output_len_note(settings))

    def _levels(self, mode: str) -> list[int]:
        if mode == "concurrency":
            return _levels(DEFAULT_LEVELS if self.concurrency is None else self.concurrency)
        if self.concurrency is not None:
            _levels(self.concurrency)  # a malformed value is named first
            raise ConfigError(
                f"--concurrency sets the levels of --mode concurrency; --mode {mode} "
                + ("is one stream" if mode == "decode" else "caps in-flight with --max-concurrency")
            )
        return [1]


@dataclass(frozen=True)
class BenchPlan:
    """What ``BenchOptions.plan()`` resolved: the input of one ``run_repeated``."""

    run: str | None
    settings: Any  # bench.settings.BenchSettings, validated
    gates: Any  # bench.session.Gates
    labels: dict[str, str]
    probe: Any  # bench.probe.ProbeSpec | None
    note: str | None  # said on stderr before the bench (output_len_note)


def _items(flag: str, text: str, example: str) -> list[str]:
    """A comma list's items (``glmserve.commalist``: an empty item is refused, not skipped)."""
    from glmserve.commalist import comma_list

    return comma_list(text, f"--{flag}", example)


def _rates(text: str) -> list[float]:
    """``--request-rate``: positive req/s, ``inf`` meaning all at once; NaN never."""
    example = "5,10,inf"
    items = _items("request-rate", text, example)
    try:
        rates = [float(x) for x in items]
    except ValueError as exc:
        raise ConfigError(f"--request-rate: expected req/s like {example}, got {text!r}") from exc
    if any(math.isnan(r) or not r > 0 for r in rates):
        raise ConfigError(f"--request-rate: expected positive req/s like {example}, got {text!r}")
    return rates


def _parse(flag: str, fn: Any, text: str) -> Any:
    try:
        return fn(text)
    except ValueError as exc:
        raise ConfigError(f"{flag}: {exc}") from exc


def parse_labels(items: list[str]) -> dict[str, str]:
    """``["team=infra", "gpu=h200"]`` -> dict; ConfigError names a malformed or repeated one
    (``k=v --label k=w`` silently keeping the last would store or filter something else)."""
    out: dict[str, str] = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise ConfigError(f"--label: expected KEY=VALUE, got {item!r}")
        if k.strip() in out:
            raise ConfigError(
                f"--label: {k.strip()} given twice ({out[k.strip()]!r}, {v.strip()!r})"
            )
        if len(item) > MAX_LABEL_CHARS:
            raise ConfigError(f"--label {k.strip()[:40]}: at most {MAX_LABEL_CHARS} characters")
        out[k.strip()] = v.strip()
    if len(out) > MAX_LABELS:
        raise ConfigError(f"--label: at most {MAX_LABELS} labels, got {len(out)}")
    return out


def _levels(text: str) -> list[int]:
    example = "1,4,16"
    items = _items("concurrency", text, example)
    try:
        return [int(x) for x in items]
    except ValueError as exc:
        raise ConfigError(f"--concurrency: expected integers like {example}, got {text!r}") from exc


def _check_output(output: Path | None) -> None:
    """Refuse an ``--output`` that cannot be written before the bench runs, not after it."""
    if output is not None:
        from glmserve.paths import check_output_file

        check_output_file("--output", output)


def resolve_mode(mode: str | None, open_loop: bool) -> str:
    """``--mode`` as given, or implied: ``rate`` with --request-rate/--rate-sweep, else decode.

    An explicit closed-loop mode with an open-loop flag is refused: ``--mode decode
    --request-rate 5`` used to become a rate bench silently."""
    if mode is None:
        return "rate" if open_loop else "decode"
    if open_loop and mode in ("decode", "concurrency"):
        raise ConfigError(
            f"--mode {mode}: --request-rate/--rate-sweep are open loop (--mode rate); "
            "leave out one of them"
        )
    return mode


def check_dataset_name(name: str | None, path: str | None) -> None:
    """bench_serving's ``--dataset-name``, so its command lines carry over: ``random`` is
    glmserve's default (random token ids), ``sharegpt`` reads ``--dataset-path`` (nothing is
    downloaded: the file must be given). Its other datasets are not built in."""
    if name is None:
        return
    if name not in DATASET_NAMES:
        raise ConfigError(
            f"--dataset-name {name}: expected {' or '.join(DATASET_NAMES)} (other bench_serving "
            "datasets: convert to ShareGPT JSON/JSONL and give --dataset-path)"
        )
    if name in ("sharegpt", "mooncake") and not path:
        raise ConfigError(f"--dataset-name {name} needs --dataset-path FILE (none is downloaded)")
    if name == "generated-shared-prefix" and path:
        raise ConfigError(f"--dataset-name {name} generates its prompts: leave out --dataset-path")
    if name == "random" and path:
        raise ConfigError("--dataset-name random sends random token ids: leave out --dataset-path")


def pick_output_len(
    output_len: int | None, random_len: int | None, sharegpt_len: int | None, dataset: str | None
) -> int | None:
    """bench_serving's three output lengths: ``--random-output-len`` applies to random prompts
    and ``--sharegpt-output-len`` to dataset prompts, each ignored for the other (so a
    bench_serving command line that keeps ``--random-output-len 1024`` beside a ShareGPT file
    still gets the replies' lengths); ``--output-len`` is both and is refused beside either."""
    given = [f for f, v in (("--random-output-len", random_len),
                            ("--sharegpt-output-len", sharegpt_len)) if v is not None]  # fmt: skip
    if output_len is not None and given:
        raise ConfigError(f"--output-len and {given[0]} both set the output length: give one")
    if output_len is not None:
        return output_len
    return sharegpt_len if dataset else random_len


def output_len_note(s: Any) -> str | None:
    """Why dataset prompts get a fixed output length where bench_serving would take each
    conversation's reply length (said on stderr, so the figure is not misread)."""
    if not s.dataset_path or s.dataset_name or s.fixed_output_len or s.reply_lengths():
        return None
    why = (
        "--rate-sweep compares one output length"
        if s.rate_sweep
        else "no --tokenizer to count replies"
    )
    return (
        f"every dataset prompt asks for {s.output_len} output tokens ({why}; bench_serving "
        "would use each reply's length)"
    )
