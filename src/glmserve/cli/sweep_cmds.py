"""Verbs ``sweep``, ``profile`` and ``report``: parse options, call one library function."""

from __future__ import annotations

from pathlib import Path

import typer

from glmserve.cli._app import app, emit_json, err, out


@app.command()
def report(
    ids: list[str] = typer.Argument(..., help="Sweep ids and/or run ids (or run id prefixes)."),
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
