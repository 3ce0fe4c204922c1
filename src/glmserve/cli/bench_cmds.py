"""Verbs ``bench`` and ``compare``: parse options, call one library function, render."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer

from glmserve.bench.progress import Progress
from glmserve.cli._app import app, emit_json, err, is_interactive, out
from glmserve.cli.options import (
    ConcurrencyLevelsOpt,
    InputLenOpt,
    JsonOpt,
    LastOpt,
    NumPromptsOpt,
    WideOpt,
)
from glmserve.cli.views import (
    PlainProgress,
    RichProgress,
    plain,
    render_compare,
    render_table,
    sweep_line,
)
from glmserve.errors import BenchInterrupted, BenchmarkGateFailed, ConfigError, StoreError


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


# Labels are stored with every result and shown in every listing: a 120 KB label was taken.
MAX_LABEL_CHARS = 256
MAX_LABELS = 32


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


DEFAULT_LEVELS = "1,4,16,64,256"
DEFAULT_OUTPUT_LEN = 256


DATASET_NAMES = ("random", "sharegpt", "generated-shared-prefix", "mooncake")


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


@app.command()
def bench(
    run: str | None = typer.Argument(
        None, help="Run id or group id (from `glmserve launch`); a group is benched on node 0."
    ),
    url: str | None = typer.Option(
        None, "--url", "--base-url", help="Bench this server URL instead of a run."
    ),
    mode: str | None = typer.Option(
        None,
        "--mode",
        help="decode (one stream; the default) | concurrency (--concurrency levels, default "
        f"{DEFAULT_LEVELS}) | rate (open loop; implied by --request-rate, --rate-sweep).",
    ),
    concurrency: ConcurrencyLevelsOpt = None,
    input_len: InputLenOpt = 128,
    output_len: int | None = typer.Option(
        None,
        "--output-len",
        help=f"Output tokens per request (ignore_eos; default {DEFAULT_OUTPUT_LEN}). With "
        "--dataset-path and --tokenizer: default each prompt's reply length (bench_serving's).",
    ),
    random_output_len: int | None = typer.Option(
        None,
        "--random-output-len",
        help="bench_serving's: --output-len for random prompts (ignored with --dataset-path).",
    ),
    sharegpt_output_len: int | None = typer.Option(
        None,
        "--sharegpt-output-len",
        help="bench_serving's: --output-len for --dataset-path prompts (ignored without).",
    ),
    num_prompts: NumPromptsOpt = None,
    duration: float | None = typer.Option(None, "--duration", help="Seconds per level instead."),
    warmup: int = typer.Option(
        1, "--warmup", "--warmup-requests", help="Unmeasured requests before the first level."
    ),
    api: str = typer.Option("native", "--api", help="native (/generate) | openai | chat"),
    seed: int = typer.Option(0, "--seed", help="Seed of the random token-id prompts."),
    stall_timeout: float = typer.Option(
        120.0, "--stall-timeout", help="Fail a request that brings no token for this long (s)."
    ),
    workers: int | None = typer.Option(
        None, "--workers", help="Client processes per level (default: 1 per 128 streams)."
    ),
    min_decode_tok_s: float | None = typer.Option(
        None, "--min-decode-tok-s", help="Gate: exit 1 if median decode tok/s is lower."
    ),
    max_ttft_ms: float | None = typer.Option(
        None, "--max-ttft-ms", help="Gate: exit 1 if median TTFT (any level) is higher."
    ),
    min_output_tok_s: list[str] = typer.Option(
        (),
        "--min-output-tok-s",
        help="Gate C:X (e.g. 64:900): exit 1 if output tok/s at concurrency C is below X.",
    ),
    request_rate: str | None = typer.Option(
        None,
        "--request-rate",
        help="Open loop: offer R requests/s (comma list: one level each; inf = all at once).",
    ),
    rate_sweep: int | None = typer.Option(
        None,
        "--rate-sweep",
        help="Find saturation: synchronous, then all at once, then N rates between.",
    ),
    burstiness: float | None = typer.Option(
        None,
        "--burstiness",
        help="Open loop: gamma shape of arrival gaps, 1 (default) Poisson, <1 burstier.",
    ),
    max_concurrency: int | None = typer.Option(
        None, "--max-concurrency", help="Open loop: at most this many requests in flight."
    ),
    random_range_ratio: float | None = typer.Option(
        None,
        "--random-range-ratio",
        help="Lengths uniform in \\[len*ratio, len]; default 0.0 with --request-rate "
        "(bench_serving's), else 1.0 (fixed lengths).",
    ),
    dataset_path: str | None = typer.Option(
        None, "--dataset-path", help="Prompts from a ShareGPT JSON/JSONL or plain text file."
    ),
    dataset_name: str | None = typer.Option(
        None,
        "--dataset-name",
        help="bench_serving's: random (token ids, the default) | sharegpt (needs "
        "--dataset-path) | generated-shared-prefix (--gsp-*) | mooncake (a trace in "
        "--dataset-path).",
    ),
    # -- workload flags (issue 24): one block; fields of BenchSettings, checked in
    # bench.gsp_bench.check_workload. Names/defaults: sglang bench_serving.py 0.5.9 3319-3372.
    gsp_num_groups: int = typer.Option(
        64, "--gsp-num-groups", help="generated-shared-prefix: groups (one system prompt each)."
    ),
    gsp_prompts_per_group: int = typer.Option(
        16, "--gsp-prompts-per-group", help="generated-shared-prefix: prompts per group."
    ),
    gsp_system_prompt_len: int = typer.Option(
        2048, "--gsp-system-prompt-len", help="generated-shared-prefix: shared prefix tokens."
    ),
    gsp_question_len: int = typer.Option(
        128, "--gsp-question-len", help="generated-shared-prefix: question tokens per turn."
    ),
    gsp_output_len: int = typer.Option(
        256, "--gsp-output-len", help="generated-shared-prefix: output tokens per request."
    ),
    gsp_num_turns: int = typer.Option(
        1,
        "--gsp-num-turns",
        help="generated-shared-prefix: turns per conversation; turn k's prompt carries the "
        "server's reply to turn k-1 (--api native).",
    ),
    think_time: float = typer.Option(
        0.0, "--think-time", help="Seconds between a reply and the next turn (--gsp-num-turns)."
    ),
    flush_cache: bool = typer.Option(
        False, "--flush-cache", help="POST /flush_cache before each level (recorded per level)."
    ),
    trace_speedup: float = typer.Option(
        1.0, "--trace-speedup", help="mooncake: replay the trace this many times faster."
    ),
    tokenizer: str | None = typer.Option(
        None, "--tokenizer", help="Local tokenizer directory: exact token lengths for text."
    ),
    percentiles: str = typer.Option(
        "50,90,95,99", "--percentiles", help="Latency percentiles to report (comma list)."
    ),
    slo: str | None = typer.Option(
        None, "--slo", help="Goodput SLOs, ms: ttft_ms=..,tpot_ms=..,itl_ms=..,e2e_ms=.."
    ),
    output_details: bool = typer.Option(
        False, "--output-details", help="Per-request arrays (TTFT, TPOT, ITLs...) in the JSON."
    ),
    label: list[str] = typer.Option(
        (), "--label", help="k=v stored with the result (repeat); `glmserve results --label`."
    ),
    probe: bool = typer.Option(
        False, "--probe", help="After the levels, send the built-in probe set (greedy, logprobs)."
    ),
    reference: int | None = typer.Option(
        None,
        "--reference",
        help="Bench result id whose probe outputs the server must reproduce (implies --probe); "
        "WRONG_OUTPUT fails the output-agreement gate (exit 1).",
    ),
    max_excess_nll: float | None = typer.Option(
        None, "--max-excess-nll", help="WRONG_OUTPUT above this many nats/token (default 0.1)."
    ),
    min_greedy_agreement: float | None = typer.Option(
        None, "--min-greedy-agreement", help="WRONG_OUTPUT below this mean agreement (0.25)."
    ),
    repeat: int = typer.Option(
        1, "--repeat", help="Run the bench N times on the server: medians, 95% intervals."
    ),
    gate_on: str = typer.Option(
        "median", "--gate-on", help="median | lower: gates read the interval's bound."
    ),
    metrics_interval: float = typer.Option(
        1.0,
        "--metrics-interval",
        help="Scrape the server's /metrics (--enable-metrics) every this many seconds per "
        "level; 0: off.",
    ),
    gpu_telemetry: bool = typer.Option(
        True,
        "--gpu-telemetry/--no-gpu-telemetry",
        help="Sample nvidia-smi on the server's host: power, clocks, tokens per joule.",
    ),
    wide: WideOpt = False,
    as_json: JsonOpt = False,
    output: Path | None = typer.Option(
        None, "--output", "--output-file", help="Also write the JSON here."
    ),
) -> None:
    """Measure decode tok/s (one stream) or throughput under concurrency; store the result.

    Examples:
      glmserve bench 3fa2c1d0 --min-decode-tok-s 12
      glmserve bench --url http://127.0.0.1:30000 --mode concurrency \\
        --concurrency 1,16,64 --json
      glmserve bench 3fa2c1d0 --request-rate 20 --num-prompts 200 \\
        --slo ttft_ms=200,tpot_ms=50
      glmserve bench 3fa2c1d0 --rate-sweep 5 --max-concurrency 256 \\
        --label team=infra

    Open loop (--request-rate, --rate-sweep) offers requests on a Poisson/gamma schedule
    instead of keeping --concurrency in flight; see the docs' "Bench and metric definitions".

    A multi-node group (its g... id or any node's run id) is benched through node 0, the only
    node serving HTTP; the result is stored against node 0's run and lists every node.

    A run is measured only if the server on its port is that run's, alive and READY (else
    exit 2 stopped, 3 crashed/exited, 4 not ready, 5 another server answers; nothing stored).
    While it runs the run's processes and log are polled every second: a server that dies is
    reported with the log's diagnosis (exit 3), the partial result stored as incomplete.

    With --url there is no run to watch: after a failed request /health is asked, and a 5xx
    (a dead worker) ends the bench (exit 3); a server gone entirely is exit 5.

    A request is ok only when its stream ends with finish_reason length and exactly the
    asked number of tokens; an abort, fewer or more tokens, a payload of the wrong shape or
    no token for --stall-timeout seconds fails it, with the reason. A client worker that
    dies leaves its requests counted as not run.

    Exit codes: 0 ok, 1 a gate missed, 2 bad options or a stopped run, 3 the server crashed,
    4 not ready, 5 server unreachable or no request succeeded, 7 some requests failed or
    were not run (the result is stored, marked incomplete), 130 Ctrl-C (partial results
    stored, incomplete).
    """
    check_dataset_name(dataset_name, dataset_path)
    output_len = pick_output_len(output_len, random_output_len, sharegpt_output_len, dataset_path)
    gsp = dataset_name == "generated-shared-prefix"
    if dataset_name in ("generated-shared-prefix", "mooncake") and output_len is not None:
        where = "--gsp-output-len" if gsp else "each trace row's output_length"
        raise ConfigError(f"--dataset-name {dataset_name}: the output length is {where}")
    open_loop = request_rate is not None or rate_sweep is not None
    mode = resolve_mode(mode, open_loop or dataset_name == "mooncake")
    if mode == "concurrency":
        levels = _levels(DEFAULT_LEVELS if concurrency is None else concurrency)
    elif concurrency is not None:
        _levels(concurrency)  # a malformed value is named first
        raise ConfigError(
            f"--concurrency sets the levels of --mode concurrency; --mode {mode} "
            + ("is one stream" if mode == "decode" else "caps in-flight with --max-concurrency")
        )
    else:
        levels = [1]
    if burstiness is not None and not open_loop:
        raise ConfigError(
            "--burstiness shapes open-loop arrivals: give --request-rate or --rate-sweep too"
        )
    _check_output(output)
    from glmserve.bench.metrics import parse_percentiles, parse_slo
    from glmserve.bench.results import parse_output_gate, render_plain
    from glmserve.bench.runner import BenchSettings
    from glmserve.bench.session import Gates, validate_settings

    settings = BenchSettings(
        base_url=url or "",
        mode=mode,
        concurrency=levels,
        input_len=gsp_system_prompt_len + gsp_question_len if gsp else input_len,
        output_len=gsp_output_len
        if gsp
        else DEFAULT_OUTPUT_LEN
        if output_len is None
        else output_len,
        fixed_output_len=output_len is not None,
        num_prompts=num_prompts,
        duration=duration,
        warmup=warmup,
        api=api,
        seed=seed,
        stall_timeout=stall_timeout,
        workers=workers,
        request_rate=_rates(request_rate) if request_rate is not None else None,
        burstiness=1.0 if burstiness is None else burstiness,
        max_concurrency=max_concurrency,
        random_range_ratio=random_range_ratio,
        dataset_path=dataset_path,
        tokenizer=tokenizer,
        percentiles=list(_parse("--percentiles", parse_percentiles, percentiles)),
        slo=_parse("--slo", parse_slo, slo) if slo else {},
        per_request=output_details,
        rate_sweep=rate_sweep,
        metrics_interval=metrics_interval,
        gpu_telemetry=gpu_telemetry,
        dataset_name=dataset_name
        if dataset_name in ("generated-shared-prefix", "mooncake")
        else None,
        gsp_num_groups=gsp_num_groups,
        gsp_prompts_per_group=gsp_prompts_per_group,
        gsp_system_prompt_len=gsp_system_prompt_len,
        gsp_question_len=gsp_question_len,
        gsp_output_len=gsp_output_len,
        gsp_num_turns=gsp_num_turns,
        think_time=think_time,
        flush_cache=flush_cache,
        trace_speedup=trace_speedup,
    )
    gates = Gates(min_decode_tok_s, max_ttft_ms, [parse_output_gate(g) for g in min_output_tok_s])
    labels = parse_labels(label)
    if note := output_len_note(settings):
        validate_settings(settings, gates)  # a bad option is the one line, not after a note
        err.print(f"bench: {note}", highlight=False, markup=False)
    from glmserve.bench.probe import probe_lines, probe_spec
    from glmserve.bench.repeats import check_repeat, repeat_lines, run_repeated

    check_repeat(repeat, gate_on, rate_sweep)
    spec = probe_spec(probe, reference, max_excess_nll, min_greedy_agreement)
    progress: Progress = RichProgress() if is_interactive() else PlainProgress()
    try:
        outcome = run_repeated(
            settings, run, gates, progress, labels=labels, probe=spec, repeat=repeat,
            gate_on=gate_on,
        )  # fmt: skip
    finally:
        if isinstance(progress, RichProgress):
            progress.close()
    res = outcome.result
    group = res.meta.get("group")
    if group and not as_json:
        nodes = ", ".join(f"{n['node_rank']}:{n['host']}" for n in group["nodes"])
        err.print(
            f"bench: group {group['group_id']} (nodes {nodes}) via node 0, "
            f"run {res.meta['run_id']}",
            highlight=False,
            markup=False,
        )
    from glmserve.strictjson import dumps as strict_dumps

    data = {"id": outcome.result_id, **res.to_dict()}
    output_error = None
    if output is not None:
        try:
            output.write_text(strict_dumps(data, indent=2)[0] + "\n")
        except OSError as exc:
            output_error = ConfigError(f"--output {output}: {exc.strerror or exc}")
    kept = output is not None and output_error is None
    if as_json or (outcome.store_error and not kept):  # stored nowhere else: print it
        emit_json(data)
    if not as_json:
        out.print(render_table(res, wide=wide, width=out.width))
        for line in render_plain(res):  # may quote the server (a stop reason): data
            out.print(plain(line), highlight=False, markup=False)
        if res.sweep is not None:
            out.print(sweep_line(res.sweep), highlight=False, markup=False)
        for line in [*repeat_lines(res), *probe_lines(res.probe)]:
            out.print(plain(line), highlight=False, markup=False)
        if outcome.result_id is not None:
            out.print(f"stored as bench result {outcome.result_id}", highlight=False)
    if outcome.store_error:
        where = f"written to {output}" if kept else "printed above as JSON"
        raise StoreError(f"bench result not stored ({outcome.store_error}); it was {where}")
    if output_error is not None:
        raise output_error
    if outcome.interrupted:
        where = f" as bench result {outcome.result_id}" if outcome.result_id is not None else ""
        if not res.levels:  # Ctrl-C in the warmup: say so, not "partial results"
            raise BenchInterrupted(
                f"interrupted during the warmup: nothing measured (recorded{where}, incomplete)"
            )
        raise BenchInterrupted(f"interrupted: partial results stored{where}, marked incomplete")
    if outcome.failure is not None:
        raise outcome.failure
    failed = [g for g in res.gates if not g["ok"]]
    if failed:
        raise BenchmarkGateFailed(failed[0]["reason"])


@app.command()
def compare(
    items: list[str] = typer.Argument(None, help="Run ids or bench result ids."),
    last: LastOpt = None,
    baseline: str | None = typer.Option(
        None, "--baseline", help="Run id or result id to divide by (default: the first)."
    ),
    as_json: JsonOpt = False,
) -> None:
    """One table across runs/profiles with speedup against a baseline.

    A result measured differently from the baseline (lengths, dataset, API, load shape,
    num_prompts/duration, simulator speed) shows "n/c" instead of a speedup, and a line names
    each differing field; so does an incomplete result (failed requests, Ctrl-C, a crash) and
    a level whose concurrency was never in flight (fewer prompts than streams).

    Examples:
      glmserve compare --last 3
      glmserve compare 3fa2c1d0 7c41e9b2 --baseline 3fa2c1d0 --json
    """
    from glmserve.bench.compare import compare_notes, compare_results, load_entries

    entries = load_entries(items or [], last, baseline)
    table = compare_results(entries, baseline)
    if as_json:
        emit_json(table)
    else:
        out.print(render_compare(table))
        for line in compare_notes(table):
            out.print(plain(line), highlight=False, markup=False)
