"""Verbs ``sweep``, ``profile`` and ``report``: parse options, call one library function."""

from __future__ import annotations

from pathlib import Path

import typer

from glmserve.cli._app import app, emit_json, err, out


@app.command()
def report(
    ids: list[str] = typer.Argument(..., help="Sweep, tune and/or run ids (or run prefixes)."),
    html_file: Path = typer.Option(..., "--html", help="Write the self-contained HTML here."),
    png: Path | None = typer.Option(None, "--png", help="Also write one PNG per chart here."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Render stored sweeps/runs as one self-contained HTML report (inline SVG) and PNGs.

    Nothing is re-measured: decode tok/s per profile, throughput vs concurrency, latency
    percentiles and each failure's diagnosis come from the stored results.

    Example: glmserve report sw-20261130-193000-ab12 --html report.html --png plots/
    """
    from glmserve.report import load_report_data, write_html, write_pngs

    data = load_report_data(ids)
    path = write_html(data, html_file)
    pngs = write_pngs(data, png) if png is not None else []
    if as_json:
        emit_json({"html": str(path), "png": [str(p) for p in pngs], "series": len(data.series)})
        return
    out.print(f"wrote {path} ({len(data.series)} profiles/runs)", highlight=False)
    for p in pngs:
        out.print(f"wrote {p}", highlight=False)
    if not data.series:
        err.print("warning: no results in the selected ids", highlight=False)


def _csv_ints(text: str, flag: str) -> list[int]:
    from glmserve.errors import ConfigError

    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise ConfigError(f"{flag}: expected comma-separated integers, got {text!r}") from exc
    if not vals or any(v <= 0 for v in vals):
        raise ConfigError(f"{flag}: expected positive integers, got {text!r}")
    return vals


@app.command()
def sweep(
    profiles: str = typer.Option(
        None, "--profiles", help="Comma-separated profiles, in order (the first success is 1.00x)."
    ),
    host: str = typer.Option(None, "--host", "-H", help="Host from hosts.yaml (default local)."),
    nodes: str = typer.Option(
        None, "--nodes", help="Host group a,b (node 0 first): run every profile over it."
    ),
    bench: list[str] = typer.Option(
        [], "--bench", help="decode and/or concurrency (repeatable; default decode)."
    ),
    concurrency: str = typer.Option(
        "1,4,16", "--concurrency", help="Levels for --bench concurrency."
    ),
    input_len: int = typer.Option(128, "--input-len", help="Prompt tokens per request."),
    output_len: int = typer.Option(256, "--output-len", help="Output tokens per request."),
    num_prompts: int = typer.Option(None, "--num-prompts", help="Requests per level."),
    sets: list[str] = typer.Option(
        [], "--set", help="Override for every profile, e.g. sim.speed=20."
    ),
    until_first_success: bool = typer.Option(
        False, "--until-first-success", help="Stop at the first profile that benchmarks."
    ),
    continue_on_error: bool = typer.Option(
        False, "--continue-on-error", help="Record tool errors (check/bench/transport) and go on."
    ),
    capture_steps: int = typer.Option(
        0, "--profile-steps", help="Also capture a torch-profiler trace of N decode steps."
    ),
    timeout: float = typer.Option(
        None,
        "--timeout",
        help="Seconds to wait for READY per profile (default 7200; 0: no deadline).",
        min=0,
    ),
    stall_budgets: list[str] = typer.Option(
        [],
        "--stall-budget",
        help="Start-up: PHASE=SECONDS without log progress = STALLED (repeatable; README).",
    ),
    stall_timeout: float = typer.Option(
        60.0, "--stall-timeout", help="Bench: seconds a stream may stay silent (then an error)."
    ),
    resume: str = typer.Option(None, "--resume", help="Continue this sweep id (finished kept)."),
    simulate: bool = typer.Option(False, "--simulate", help="Launch the simulator, same flags."),
    as_json: bool = typer.Option(False, "--json", help="Print the stored sweep as JSON."),
) -> None:
    """Launch, bench and stop each profile in turn; crashes are recorded with their diagnosis.

    The sweep lives in $GLMSERVE_HOME/sweeps/<id>/ (sweep.json, sweep.md). Ctrl-C (or SIGTERM)
    stops the running server; `--resume <id>` continues where it stopped. Exit 0 when some
    profile succeeded, 3 when every profile crashed or stalled, 130 on Ctrl-C/SIGTERM.

    A profile with ``nodes:`` (or every profile, with --nodes) runs as a host group: every
    node is checked, launched, watched and stopped together, the bench goes through node 0,
    and a crash is recorded with the node it happened on. --host applies to the others.

    Example: glmserve sweep --simulate --profiles flashinfer_gtc,trtllm_mla,cutlass_mla
    """
    from glmserve.deploy.watch import parse_stall_budgets
    from glmserve.errors import ConfigError, ServerCrashed
    from glmserve.sweep import (
        OK,
        LifecycleBackend,
        SweepInterrupted,
        SweepOptions,
        load_sweep,
        resume_options,
        run_sweep,
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
        modes = bench or ["decode"]
        bad = [m for m in modes if m not in ("decode", "concurrency")]
        if bad:
            raise ConfigError(f"--bench: expected decode or concurrency, got {', '.join(bad)}")
        opts = SweepOptions(
            bench=modes,
            concurrency=_csv_ints(concurrency, "--concurrency"),
            input_len=input_len,
            output_len=output_len,
            num_prompts=num_prompts,
            overrides=list(sets),
            until_first_success=until_first_success,
            continue_on_error=continue_on_error,
            capture_steps=capture_steps,
            timeout_s=timeout,
            stall_timeout_s=stall_timeout,
            stall_budgets=list(stall_budgets),
        )
        parse_stall_budgets(opts.stall_budgets)  # a typo fails before anything starts
        group = [n.strip() for n in nodes.split(",") if n.strip()] if nodes else []
        if group and host:
            raise ConfigError("give --host or --nodes, not both")
        if nodes is not None and len(group) < 2:
            raise ConfigError(f"--nodes: expected at least 2 host names like a,b, got {nodes!r}")
        names = [p.strip() for p in profiles.split(",") if p.strip()]
        from glmserve.config.profiles import load_profile

        for name in names:  # fail fast on a typo before anything is launched
            load_profile(name, list(sets))
        sw = start_sweep(names, host, simulate, opts, group)
    say(f"{sw.sweep_id}: {', '.join(sw.profiles)}{' (simulated)' if simulate else ''}")
    backend = LifecycleBackend(host, simulate, say, group)
    try:
        run_sweep(sw, opts, backend, say)
    except KeyboardInterrupt:
        # Raised as a glmserve error so the exit status is 130 however typer treats Ctrl-C.
        raise SweepInterrupted(
            f"sweep {sw.sweep_id} interrupted; the running server was stopped. "
            f"Resume: glmserve sweep --resume {sw.sweep_id}"
        ) from None
    if as_json:
        emit_json(sw.to_dict())
    else:
        _print_table(sw)
        err.print(f"saved {sweep_dir(sw.sweep_id)}/sweep.json and sweep.md", highlight=False)
    if not any(e.status == OK for e in sw.entries):
        raise ServerCrashed(f"sweep {sw.sweep_id}: no profile succeeded")


def _print_table(sw: object) -> None:
    from rich.table import Table
    from rich.text import Text

    from glmserve.sweep import speed_note, sweep_rows

    rows = sweep_rows(sw)  # type: ignore[arg-type]
    levels = sorted({c for r in rows for c in r["aggregate_tok_s"]})
    table = Table(title=f"sweep {sw.sweep_id}")  # type: ignore[attr-defined]
    for col in ["profile", "status", "diagnosis", "decode tok/s", "TTFT ms"]:
        table.add_column(col, overflow="fold")
    for c in levels:
        table.add_column(f"agg tok/s @{c}", justify="right")
    table.add_column("speedup", justify="right")

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    for r in rows:
        cells = (
            r["profile"] + (f" ({len(r['nodes'])} nodes)" if r["nodes"] else ""),
            r["status"],
            _short(r["diagnosis"]),
            f(r["decode_tok_s"]),
            f(r["ttft_ms"]),
            *[f(r["aggregate_tok_s"].get(c)) for c in levels],
            "-" if r["speedup"] is None else f"{r['speedup']:.2f}x",
        )
        table.add_row(*(Text(c) for c in cells))  # data, never rich markup
    # Not a terminal (CI, a file): do not squeeze the table into 80 columns.
    out.print(table, width=None if out.is_terminal else 160)
    for r in rows:
        if r["group_id"]:
            nodes = ", ".join(r["nodes"])
            out.print(
                f"{r['profile']}: group {r['group_id']} on nodes {nodes} "
                f"(node 0 run {r['run_id']})",
                highlight=False,
                markup=False,
            )
    for r in rows:
        if r["hint"]:
            out.print(f"{r['profile']}: {r['hint']}", highlight=False, markup=False)
    note = speed_note(sw)  # type: ignore[arg-type]
    if note:
        out.print(note, highlight=False, markup=False)


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@app.command()
def profile(
    run_id: str = typer.Argument(
        ..., help="A READY run (id or unique prefix), or a trace file / directory to analyse."
    ),
    steps: int = typer.Option(5, "--steps", help="Forward steps to record (num_steps)."),
    load: str = typer.Option("decode", "--load", help="decode or concurrency:C during capture."),
    timeout: float = typer.Option(180.0, "--timeout", help="Seconds to wait for the traces."),
    top: int = typer.Option(8, "--top", help="Rows per table."),
    all_ranks: bool = typer.Option(False, "--all-ranks", help="Full tables for every rank."),
    as_json: bool = typer.Option(False, "--json", help="The whole analysis as JSON."),
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


def print_analysis(analysis: object, top: int = 8, all_ranks: bool = False) -> None:
    """Rich tables for the first rank (all ranks with ``all_ranks``), one line per other rank,
    then the findings."""
    from rich.table import Table

    ranks = analysis.ranks  # type: ignore[attr-defined]
    for i, r in enumerate(ranks):
        busy = r.gpu_busy_us / max(r.window_us, 1e-9)
        for note in r.notes:
            err.print(f"rank {r.rank}: note: {note}", highlight=False, markup=False)
        title = (
            f"rank {r.rank}: {r.steps} step(s), {r.step_us / 1000:.2f} ms/step "
            f"({r.step_source})" + (f", GPU busy {busy:.0%}" if r.has_gpu else "")
        )
        if i > 0 and not all_ranks:
            lead = r.kernels[0] if r.kernels else r.ops[0] if r.ops else None
            what = (
                f"; top: {getattr(lead, 'short_name', None) or lead.name} {lead.share:.0%}"
                if lead
                else ""
            )
            out.print(title + what, highlight=False, markup=False)
            continue
        if r.kernels:
            kt = Table(title=title + " — top GPU kernels")
            for col in ("kernel", "kind", "share", "ms/step", "calls", "launched by"):
                kt.add_column(col, overflow="fold")
            for k in r.kernels[:top]:
                kt.add_row(
                    k.short_name,
                    k.kind,
                    f"{k.share:.1%}",
                    f"{k.total_us / max(r.steps, 1) / 1000:.2f}",
                    str(k.count),
                    k.launched_by,
                )
            out.print(kt)
        what = "GPU time of launched kernels" if r.has_gpu else "CPU self time"
        ot = Table(title=f"{title} — top ops ({what})")
        for col in ("op", "what", "share", "ms/step", "calls"):
            ot.add_column(col, overflow="fold")
        for o in r.ops[:top]:
            ot.add_row(
                o.name,
                o.label,
                f"{o.share:.1%}",
                f"{o.total_us / max(r.steps, 1) / 1000:.2f}",
                str(o.count),
            )
        out.print(ot)
    findings = analysis.findings  # type: ignore[attr-defined]
    if not findings:
        out.print("no findings: no single pattern dominates the decode step")
    for fd in findings:
        ranks_s = ",".join(str(x) for x in fd.ranks)
        out.print(f"[{fd.severity}] {fd.message} (ranks {ranks_s})", highlight=False, markup=False)
