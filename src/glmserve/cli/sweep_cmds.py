"""Verbs ``sweep``, ``profile`` and ``report``: parse options, call one library function."""

from __future__ import annotations

from pathlib import Path

import typer

from glmserve.cli._app import app, emit_json, err, out
from glmserve.cli.options import (
    ConcurrencyOpt,
    HostOpt,
    InputLenOpt,
    JsonOpt,
    NodesOpt,
    NumPromptsOpt,
    OutputLenOpt,
    ReadyTimeoutOpt,
    ResumeOpt,
    SetOpt,
    SimulateOpt,
    StallBudgetOpt,
)
from glmserve.errors import ConfigError


def _report_paths(html_file: str, png: Path | None) -> Path:
    """Refuse output paths ``report`` cannot write before anything is rendered: an empty
    ``--html`` (an unset shell variable, which Path() would read as "."), a directory, a
    missing directory, glmserve's own state; a ``--png`` that is a file or whose parent is
    missing (see ``paths.check_output_file``/``check_output_dir``)."""
    from glmserve.paths import check_output_dir, check_output_file

    path = check_output_file("--html", html_file)
    if png is not None:
        check_output_dir("--png", png)
    return path


@app.command()
def report(
    ids: list[str] = typer.Argument(..., help="Sweep, tune, run (or prefix) or bench result ids."),
    html_file: str = typer.Option(..., "--html", help="Write the self-contained HTML here."),
    png: Path | None = typer.Option(None, "--png", help="Also write one PNG per chart here."),
    as_json: JsonOpt = False,
) -> None:
    """Render stored sweeps/runs as one self-contained HTML report (inline SVG) and PNGs.

    Nothing is re-measured: decode tok/s per profile, throughput vs concurrency, latency
    percentiles and each failure's diagnosis come from the stored results.

    A bench result id (a number, as `glmserve results` lists it) reports that one result,
    a `bench --url` one included. A crashed or incomplete result gets no speedup.

    Example:
      glmserve report sw-20261130-193000-ab12 --html report.html --png plots/
    """
    from glmserve.report import load_report_data, write_html, write_pngs

    html_path = _report_paths(html_file, png)
    data = load_report_data(ids)
    try:
        path = write_html(data, html_path)
    except OSError as exc:
        raise ConfigError(f"--html {html_file}: {exc.strerror or exc}") from exc
    try:
        pngs = write_pngs(data, png) if png is not None else []
    except OSError as exc:
        raise ConfigError(f"--png {png}: {exc.strerror or exc}") from exc
    if as_json:
        emit_json({"html": str(path), "png": [str(p) for p in pngs], "series": len(data.series),
                   "tunes": len(data.tunes)})  # fmt: skip
        return
    what = f"{len(data.series)} profiles/runs"
    if data.tunes:
        what += f", {len(data.tunes)} tune(s)"
    out.print(f"wrote {path} ({what})", highlight=False)
    for p in pngs:
        out.print(f"wrote {p}", highlight=False)
    if not data.series and not data.tunes:
        err.print("warning: no results in the selected ids", highlight=False)


@app.command()
def sweep(
    profiles: str = typer.Option(
        None, "--profiles", help="Comma-separated profiles, in order (the first success is 1.00x)."
    ),
    host: HostOpt = None,
    nodes: NodesOpt = None,
    bench: list[str] = typer.Option(
        (), "--bench", help="decode and/or concurrency (repeatable; default decode)."
    ),
    concurrency: ConcurrencyOpt = "1,4,16",
    input_len: InputLenOpt = 128,
    output_len: OutputLenOpt = 256,
    num_prompts: NumPromptsOpt = None,
    sets: SetOpt = (),
    until_first_success: bool = typer.Option(
        False, "--until-first-success", help="Stop at the first profile that benchmarks."
    ),
    continue_on_error: bool = typer.Option(
        False, "--continue-on-error", help="Record tool errors (check/bench/transport) and go on."
    ),
    max_parallel: int = typer.Option(
        1,
        "--max-parallel",
        help="On a Slurm host: K profiles' jobs at once (slot k serves on server.port + k).",
    ),
    capture_steps: int = typer.Option(
        0, "--profile-steps", help="Also capture a torch-profiler trace of N decode steps."
    ),
    timeout: ReadyTimeoutOpt = None,
    stall_budgets: StallBudgetOpt = (),
    stall_timeout: float = typer.Option(
        60.0, "--stall-timeout", help="Bench: seconds a stream may stay silent (then an error)."
    ),
    repeat: int = typer.Option(
        3, "--repeat", help="Bench each profile N times: medians, 95% intervals, ties."
    ),
    probe: bool = typer.Option(
        False, "--probe", help="Probe every profile's output against --reference (greedy)."
    ),
    reference: str | None = typer.Option(
        None,
        "--reference",
        help="Profile (or bench result id) whose outputs are right (implies --probe; default: "
        "the first profile that starts). WRONG_OUTPUT profiles get no speedup, never win.",
    ),
    max_excess_nll: float | None = typer.Option(
        None, "--max-excess-nll", help="WRONG_OUTPUT above this many nats/token (default 0.1)."
    ),
    min_greedy_agreement: float | None = typer.Option(
        None, "--min-greedy-agreement", help="WRONG_OUTPUT below this mean agreement (0.25)."
    ),
    resume: ResumeOpt = None,
    simulate: SimulateOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Launch, bench and stop each profile in turn; crashes are recorded with their diagnosis.

    The sweep lives in $GLMSERVE_HOME/sweeps/<id>/ (sweep.json, sweep.md). Ctrl-C (or SIGTERM)
    stops the running server; `--resume <id>` continues where it stopped, first stopping a
    server the sweep recorded and left up (it was killed outright). Exit 0 when some profile
    succeeded, 3 when every profile crashed or stalled, 130 on Ctrl-C/SIGTERM.

    A profile with `nodes:` (or every profile, with --nodes) runs as a host group: every
    node is checked, launched, watched and stopped together, the bench goes through node 0,
    and a crash is recorded with the node it happened on. --host applies to the others.

    Example:
      glmserve sweep --simulate --profiles flashinfer_gtc,trtllm_mla,cutlass_mla
    """
    from glmserve.cli.views import print_sweep
    from glmserve.errors import ConfigError, ServerCrashed, SweepInterrupted
    from glmserve.sweep.backend import LifecycleBackend, check_plans
    from glmserve.sweep.loop import run_sweep
    from glmserve.sweep.state import (
        OK,
        SweepOptions,
        load_sweep,
        resume_options,
        start_sweep,
        sweep_dir,
    )

    def say(msg: str) -> None:
        err.print(f"sweep: {msg}", highlight=False, markup=False)

    if resume:
        sw = load_sweep(resume)
        if profiles:
            raise ConfigError("--resume: the sweep keeps its own --profiles; drop --profiles")
        opts = resume_options(sw)
        host, simulate, group = sw.host, sw.simulate, list(sw.nodes)
    else:
        if not profiles:
            raise ConfigError("--profiles is required (or --resume SWEEP_ID)")
        opts = SweepOptions.from_cli(
            bench,
            concurrency,
            stall_budgets,
            input_len=input_len,
            output_len=output_len,
            num_prompts=num_prompts,
            overrides=list(sets),
            until_first_success=until_first_success,
            continue_on_error=continue_on_error,
            capture_steps=capture_steps,
            timeout_s=timeout,
            stall_timeout_s=stall_timeout,
            repeat=repeat,
            probe=probe or reference is not None,
            reference=reference,
            max_excess_nll=max_excess_nll,
            min_greedy_agreement=min_greedy_agreement,
            max_parallel=max_parallel,
        )
        from glmserve.commalist import comma_list

        group = comma_list(nodes, "--nodes", "a,b") if nodes is not None else []
        if group and host:
            raise ConfigError("give --host or --nodes, not both")
        if nodes is not None and len(group) < 2:
            raise ConfigError(f"--nodes: expected at least 2 host names like a,b, got {nodes!r}")
        names = comma_list(profiles, "--profiles", "flashinfer,trtllm_mla")
        opts.check_probe(names)
        from glmserve.bench.repeats import check_repeat

        check_repeat(repeat, "median")
        _parallel_slots(opts, host, group)  # before the sweep is created
        check_plans(names, host, group, opts, simulate)  # before the sweep is created
        sw = start_sweep(names, host, simulate, opts, group)
    say(f"{sw.sweep_id}: {', '.join(sw.profiles)}{' (simulated)' if simulate else ''}")
    parallel = _parallel_slots(opts, host, group)
    try:
        if parallel > 1:
            from glmserve.sweep.parallel import run_sweep_parallel

            run_sweep_parallel(
                sw, opts, lambda: LifecycleBackend(host, simulate, say, group), parallel, say
            )
        else:
            run_sweep(sw, opts, LifecycleBackend(host, simulate, say, group), say)
    except KeyboardInterrupt:
        # Raised as a glmserve error so the exit status is 130 however typer treats Ctrl-C.
        raise SweepInterrupted(
            f"sweep {sw.sweep_id} interrupted; the running server was stopped. "
            f"Resume: glmserve sweep --resume {sw.sweep_id}"
        ) from None
    if as_json:
        emit_json(sw.to_dict())
    else:
        print_sweep(sw)
        err.print(f"saved {sweep_dir(sw.sweep_id)}/sweep.json and sweep.md", highlight=False)
    if not any(e.status == OK for e in sw.entries):
        raise ServerCrashed(f"sweep {sw.sweep_id}: no profile succeeded")


@app.command()
def profile(
    run_id: str = typer.Argument(
        ..., help="A READY run (id or unique prefix), or a trace file / directory to analyse."
    ),
    steps: int = typer.Option(5, "--steps", help="Forward steps to record (num_steps)."),
    load: str = typer.Option("decode", "--load", help="decode or concurrency:C during capture."),
    timeout: float = typer.Option(180.0, "--timeout", help="Seconds to wait for the traces."),
    top: int = typer.Option(8, "--top", help="Rows per table.", min=1),
    all_ranks: bool = typer.Option(False, "--all-ranks", help="Full tables for every rank."),
    as_json: JsonOpt = False,
) -> None:
    """Capture a torch-profiler trace of a live run and say where decode time goes, per rank.

    POSTs /start_profile (output_dir in the run dir, num_steps), drives the load, fetches the
    {id}-TP-{r}.trace.json.gz files, streams them, prints the top GPU kernels and ops by share
    of decode step time and findings (e.g. the whole-pool FP8 -> BF16 cast).

    Given a trace file or a directory of them instead (SGLang's *-TP-*.trace.json.gz), only
    analyses them, offline. A file that is not a trace (malformed JSON, nested deeper than
    ~1000 levels, a gzip stream inflating over 100x past 64 MiB) exits 2 with one line.

    Example: glmserve profile 3fa2c1d0 --steps 5 --load concurrency:8
    """
    from glmserve.cli.views import print_analysis
    from glmserve.profiling.analysis import analyze_path
    from glmserve.profiling.capture import capture_profile

    if not Path(run_id).exists() and ("/" in run_id or "." in run_id):
        from glmserve.errors import ConfigError

        raise ConfigError(f"{run_id}: no such trace file or directory")
    if Path(run_id).exists():
        analysis = analyze_path(run_id)
        if as_json:
            emit_json(analysis.to_dict())
        else:
            print_analysis(analysis, top, all_ranks)
        return
    analysis = capture_profile(
        run_id,
        steps=steps,
        load=load,
        timeout_s=timeout,
        say=lambda m: err.print(f"profile: {m}", highlight=False, markup=False),
    )
    if as_json:
        emit_json(analysis.to_dict())
        return
    print_analysis(analysis, top, all_ranks)


def _parallel_slots(opts: object, host: str | None, group: list[str]) -> int:
    """``--max-parallel K``: K jobs at once, on a Slurm host only (an ssh host runs one
    server at a time; a host group is one job per profile already). ConfigError otherwise."""
    from glmserve.errors import ConfigError
    from glmserve.remote.hosts import get_host

    k = getattr(opts, "max_parallel", 1)
    if not isinstance(k, int) or k < 1:
        raise ConfigError(f"--max-parallel: expected an integer >= 1, got {k}")
    if k > 1 and (group or not get_host(host).is_slurm):
        raise ConfigError("--max-parallel: only on a kind: slurm host (--host)")
    return k
