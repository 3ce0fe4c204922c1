"""Verbs ``bench`` and ``compare``: parse options, call one library function, render."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from glmserve.bench.options import BenchOptions
from glmserve.bench.progress import Progress
from glmserve.cli._app import app, emit_json, err, is_interactive, out
from glmserve.cli.generate import from_options
from glmserve.cli.options import JsonOpt, LastOpt, WideOpt
from glmserve.cli.views import (
    PlainProgress,
    RichProgress,
    plain,
    render_compare,
    render_table,
    sweep_line,
)
from glmserve.errors import BenchInterrupted, BenchmarkGateFailed, ConfigError, StoreError


@app.command()
@from_options(BenchOptions, after="gpu_telemetry")
def bench(opts: BenchOptions, wide: WideOpt = False, as_json: JsonOpt = False) -> None:
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
    from glmserve.bench.repeats import run_repeated

    plan = opts.plan()
    if plan.note:
        err.print(f"bench: {plan.note}", highlight=False, markup=False)
    progress: Progress = RichProgress() if is_interactive() else PlainProgress()
    try:
        outcome = run_repeated(
            plan.settings, plan.run, plan.gates, progress, labels=plan.labels, probe=plan.probe,
            repeat=opts.repeat, gate_on=opts.gate_on, validated=True,
        )  # fmt: skip
    finally:
        if isinstance(progress, RichProgress):
            progress.close()
    _render(outcome, opts.output, wide, as_json)


def _render(outcome: Any, output: Path | None, wide: bool, as_json: bool) -> None:
    """Print (and ``--output``) a finished bench, then raise what its exit status says."""
    from glmserve.bench.probe import probe_lines
    from glmserve.bench.repeats import repeat_lines
    from glmserve.bench.results import render_plain
    from glmserve.strictjson import dumps as strict_dumps

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
