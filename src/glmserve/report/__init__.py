"""``glmserve report``: stored sweeps and runs -> one self-contained HTML file (+ PNGs).

Renderers only consume stored results (sweep.json files and the run store's bench results);
nothing is re-measured. The HTML has no external references at all: charts are inline SVG
generated here, every bar / point carrying ``data-*`` attributes (label, series, value) so a
headless browser's DOM dump can be checked chart by chart. PNGs (``--png DIR``) are drawn
with matplotlib when it is installed (an optional dependency).

    load_report_data(ids) ─► ReportData (pure from here) ─► render_html(data) -> str
                                                         └► write_pngs(data, dir)

The package splits that pipeline by concern: ``data`` (inputs -> ReportData, comparability),
``svg`` (charts and their specs), ``html`` (the page), ``png`` (matplotlib, optional).
"""

from __future__ import annotations

from glmserve.report.data import (
    LATENCY_METRICS,
    PALETTE,
    PERCENTILES,
    UNKNOWN,
    ReportData,
    ReportSeries,
    comparability,
    config_map,
    flag_diff,
    flag_map,
    load_report_data,
    series_from_result,
    series_from_run,
    series_from_sweep,
    shown_status,
    unfilled_levels,
    unfit_reasons,
    with_speedups,
)
from glmserve.report.html import (
    metadata_html,
    metadata_rows,
    render_html,
    write_html,
)
from glmserve.report.png import (
    png_figure,
    write_pngs,
)
from glmserve.report.svg import (
    bar_chart,
    chart_specs,
    line_chart,
    nice_axis,
    tick_labels,
)

__all__ = [
    "LATENCY_METRICS",
    "PALETTE",
    "PERCENTILES",
    "UNKNOWN",
    "ReportData",
    "ReportSeries",
    "bar_chart",
    "chart_specs",
    "comparability",
    "config_map",
    "flag_diff",
    "flag_map",
    "line_chart",
    "load_report_data",
    "metadata_html",
    "metadata_rows",
    "nice_axis",
    "png_figure",
    "render_html",
    "series_from_result",
    "series_from_run",
    "series_from_sweep",
    "shown_status",
    "tick_labels",
    "unfilled_levels",
    "unfit_reasons",
    "with_speedups",
    "write_html",
    "write_pngs",
]
