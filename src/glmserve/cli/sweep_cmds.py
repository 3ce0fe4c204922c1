"""Verbs ``sweep``, ``profile`` and ``report``: parse options, call one library function."""

from __future__ import annotations

from pathlib import Path

import typer

from glmserve.cli._app import app, emit_json, err, out
from glmserve.cli.generate import from_options
from glmserve.cli.options import JsonOpt
from glmserve.errors import ConfigError
from glmserve.sweep.options import SweepCommand


def _report_paths(html_file: str, png: Path | None) -> Path:
    """Refuse output paths ``report`` cannot write before anything is rendered: an empty
    ``--html`` (an unset shell variable, which Path() would read as "."), a directory, a
    missing directory, glmserve's own state; a ``--png`` that is a file or whose parent is
    missing (see ``paths.check_output_file``/``check_output_dir``)."""
    from glmserve.paths import check_output_dir, check_output_file

    path = check_output_file("--html", html_file)
    if png is not None:
        # one path for both: the HTML was written there, then the PNG folder failed on it
        if png.resolve() == path.resolve():
            raise ConfigError(
                f"--html {html_file} and --png {png} name the same path; give the PNG folder "
                "another name"
            )
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
@from_options(SweepCommand)
def sweep(opts: SweepCommand, as_json: JsonOpt = False) -> None:
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
    from glmserve.errors import ServerCrashed, SweepInterrupted
    from glmserve.sweep.backend import LifecycleBackend
    from glmserve.sweep.loop import run_sweep
    from glmserve.sweep.state import OK, sweep_dir

    def say(msg: str) -> None:
        err.print(f"sweep: {msg}", highlight=False, markup=False)

    p = opts.plan()
    sw = p.sweep
    say(f"{sw.sweep_id}: {', '.join(sw.profiles)}{' (simulated)' if p.simulate else ''}")
    backend = lambda: LifecycleBackend(p.host, p.simulate, say, p.group)  # noqa: E731
    try:
        if p.parallel > 1:
            from glmserve.sweep.parallel import run_sweep_parallel

            run_sweep_parallel(sw, p.opts, backend, p.parallel, say)
        else:
            run_sweep(sw, p.opts, backend(), say)
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
