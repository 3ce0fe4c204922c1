"""The self-contained HTML page of the report: inline CSS and SVG, no scripts, no URLs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from glmserve.report.data import (
    ReportData,
    ReportSeries,
    comparability,
    flag_diff,
    shown_status,
    unfilled_levels,
    unfit_reasons,
)
from glmserve.report.svg import _e, _svg_for, chart_specs
from glmserve.sweep.state import OK

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d1d1f}
h1{font-size:20px} h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-size:13px} th,td{border:1px solid #ddd;padding:4px 8px}
th{background:#f4f4f6;text-align:left} td.diag{max-width:460px;font-size:12px}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.status-ok td.status{color:#18794e} tr:not(.status-ok) td.status{color:#b42318;font-weight:600}
svg.chart{display:block;margin:12px 0;background:#fff;border:1px solid #eee}
svg .title{font-size:14px;font-weight:600}
svg .tick,svg .xlabel,svg .legend,svg .value,svg .unit,svg .missing{font-size:11px;fill:#444}
svg .missing{fill:#b42318;font-weight:600}
svg .grid{stroke:#eee} .no-data{color:#b42318} .meta{color:#666;font-size:12px}
table.metadata td,table.flag-diff td{font-size:12px;max-width:420px;word-break:break-word}
ul.incomparable{color:#b42318}
"""


def _settings_text(st: dict[str, Any], levels: list[Any]) -> str:
    parts = [f"mode={st.get('mode')}", f"api={st.get('api')}", f"input={st.get('input_len')}",
             f"output={st.get('output_len')}"]  # fmt: skip
    for key in ("random_range_ratio", "dataset_path", "burstiness", "max_concurrency"):
        if st.get(key) not in (None, 1.0) or (key == "burstiness" and st.get("request_rate")):
            parts.append(f"{key}={st.get(key)}")
    if st.get("request_rate"):
        parts.append("rates=" + ",".join(str(r) if isinstance(r, str) else f"{r:g}"
                                         for r in st["request_rate"]))  # fmt: skip
    else:
        parts.append("concurrency=" + ",".join(str(x) for x in levels))
    for key in ("num_prompts", "duration", "warmup", "seed"):
        if st.get(key) is not None:
            parts.append(f"{key}={st[key]}")
    return " ".join(parts)


def metadata_rows(series: list[ReportSeries]) -> list[dict[str, str]]:
    """One row per stored bench result in the report: ids, date, settings, versions, host."""
    from glmserve.bench.comparable import context, levels_of, sim_speed, where_text

    rows = []
    for s in series:
        for row in s.results:
            res, meta = row["result"], {**(row["result"].get("meta") or {}), **row["meta"]}
            ctx = context(row)
            when = meta.get("finished_at") or row.get("created_at")
            speed = sim_speed(row)
            gpus = meta.get("gpus")
            rows.append({
                "series": s.name,
                "result": "-" if row.get("id") is None else str(row["id"]),
                "run": str(meta.get("run_id") or s.run_id or "-"),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(when)) if when else "-",
                "settings": _settings_text(res.get("settings") or {}, levels_of(row)),
                "sglang": str(ctx["sglang_version"] or "-"),
                "host": where_text(ctx),
                "gpus": (f"{ctx['gpu_count']} x {ctx['gpu_model']}" if ctx["gpu_count"]
                         else "; ".join(gpus) if isinstance(gpus, list) and gpus
                         else f"TP {ctx['tp_size']} (server's /server_info)" if ctx["tp_size"]
                         else "-"),
                "simulated": "-" if speed is None else f"sim-speed {speed:g}",
                "argv hash": str(ctx["argv_hash"] or "-"),
                "config hash": str(ctx["config_hash"] or "-"),
                "server args": _server_args_text(res),
                "labels": ", ".join(f"{k}={v}" for k, v in (meta.get("labels") or {}).items())
                or "-",
            })  # fmt: skip
    return rows


def _server_args_text(res: dict[str, Any]) -> str:
    """What the server said about itself (``/server_info``): the only account of a ``--url``
    result's configuration, so it is shown for every result."""
    args = (res.get("server") or {}).get("args") or {}
    return " ".join(f"{k}={v}" for k, v in args.items() if v is not None) or "-"


def _html_table(cls: str, head: list[str], rows: list[list[str]]) -> str:
    return (
        f'<table class="{cls}"><thead><tr>'
        + "".join(f"<th>{_e(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
        + "</tbody></table>"
    )


def metadata_html(data: ReportData) -> str:
    """The block a reader needs before sharing: metadata table, flag diff, comparability."""
    rows = metadata_rows(data.series)
    parts = ['<section id="metadata"><h2>Metadata</h2>']
    if rows:
        head = list(rows[0])
        parts.append(_html_table("metadata", head, [[r[h] for h in head] for r in rows]))
    else:
        parts.append('<p class="meta">no stored bench results in this report</p>')
    bad = _no_speedup(data.series)
    if bad:
        parts.append(
            '<ul class="incomparable">'
            + "".join(_no_speedup_item(n, kind, why) for n, kind, why in bad)
            + "</ul>"
        )
    differing, maps = flag_diff(data.series)
    parts.append("<h2>Flag differences</h2>")
    if len(maps) < 2:
        parts.append('<p class="meta flag-diff-none">fewer than two profiles with known flags</p>')
    elif not differing:
        parts.append(
            '<p class="meta flag-diff-none">the profiles\' flags, env and patches are identical</p>'
        )
    else:
        names = list(maps)
        parts.append(
            _html_table(
                "flag-diff",
                ["flag", *names],
                [[k, *[maps[n].get(k, "(absent)") for n in names]] for k in differing],
            )
        )
        same = len({k for m in maps.values() for k in m}) - len(differing)
        parts.append(
            f'<p class="meta">{same} other flags, env vars and patch settings are identical '
            "across the profiles</p>"
        )
    parts.append("</section>")
    return "".join(parts)


def _no_speedup(series: list[ReportSeries]) -> list[tuple[str, str, list[str]]]:
    """(series, kind, reasons) for every series or level without a true figure: "settings"
    (measured differently), "unfit" (crashed or incomplete), "levels" (never filled)."""
    out = [(n, "settings", why) for n, why in comparability(series).items()]
    for s in series:
        why = unfit_reasons(s)
        if why:
            out.append((s.name, "unfit", why))
        lv = unfilled_levels(s)
        if lv:
            out.append((s.name, "levels", list(lv.values())))
    return out


def _no_speedup_item(name: str, kind: str, why: list[str]) -> str:
    text = "; ".join(why)
    if kind == "settings":
        text = f"is NOT comparable with the first result of its mode: {text} (no speedup shown)"
    elif kind == "unfit":
        text = f"{text} (no speedup shown)"
    else:
        text = f"{text} (not a measurement at that concurrency: its cell is marked)"
    return f'<li data-series="{_e(name)}" data-kind="{_e(kind)}"><b>{_e(name)}</b> {_e(text)}</li>'


def render_html(data: ReportData) -> str:
    """Pure: the whole self-contained page (inline CSS + SVG, no scripts, no URLs)."""
    levels = sorted({c for s in data.series for c in s.throughput})
    bad = comparability(data.series)
    head = [
        "profile / run",
        "status",
        "decode tok/s",
        "TTFT ms",
        *[f"agg tok/s @{c}" for c in levels],
        "speedup",
        "diagnosis",
    ]
    rows = []
    for s in data.series:
        unfilled = unfilled_levels(s)
        status = shown_status(s)
        cells = [
            f"<td>{_e(s.name)}</td>",
            f'<td class="status">{_e(status)}</td>',
            f'<td class="num">{_fmt(s.decode_tok_s)}</td>',
            f'<td class="num">{_fmt(s.ttft_ms)}</td>',
            *[_throughput_cell(s, c, unfilled) for c in levels],
            f'<td class="num">{_speedup_cell(s, bad)}</td>',
            f'<td class="diag">{_e(s.diagnosis)}{" — " + _e(s.hint) if s.hint else ""}</td>',
        ]
        rows.append(
            f'<tr class="status-{_e(status)}" data-series="{_e(s.name)}">{"".join(cells)}</tr>'
        )
    table = (
        '<table class="summary"><thead><tr>'
        + "".join(f"<th>{_e(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )
    charts = "\n".join(_svg_for(spec) for spec in chart_specs(data))
    findings = [(s.name, f) for s in data.series for f in s.findings]
    diag = [s for s in data.series if s.status != OK and (s.diagnosis or s.hint)]
    extra = ""
    if diag:
        extra += (
            '<h2>Diagnoses</h2><ul class="diagnoses">'
            + "".join(
                f"<li><b>{_e(s.name)}</b> ({_e(s.status)}): {_e(s.diagnosis)}"
                f"{'<br><i>' + _e(s.hint) + '</i>' if s.hint else ''}</li>"
                for s in diag
            )
            + "</ul>"
        )
    if findings:
        extra += (
            '<h2>Profiler findings</h2><ul class="findings">'
            + "".join(f"<li><b>{_e(n)}</b>: {_e(f)}</li>" for n, f in findings)
            + "</ul>"
        )
    from glmserve.report.timeseries import timeseries_html

    extra += timeseries_html(data)  # per-level telemetry, when a result has it
    if data.tunes:
        from glmserve.tune.page import tune_section

        extra += "".join(tune_section(t) for t in data.tunes)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(data.generated_at))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(data.title)}</title><style>{_CSS}</style></head><body>"
        f'<h1>{_e(data.title)}</h1><p class="meta">generated {stamp} from stored results '
        f"({_e(', '.join(data.sources))}); nothing was re-measured.</p>"
        + "".join(f'<p class="meta note">{_e(n)}</p>' for n in data.notes)
        + metadata_html(data)
        + f"<h2>Summary</h2>{table}<h2>Charts</h2>{charts}{extra}</body></html>\n"
    )


def _speedup_cell(s: ReportSeries, bad: dict[str, list[str]]) -> str:
    """The speedup, or why there is none: settings differ, or the series is crashed or
    incomplete (``unfit_reasons``: "n/c (incomplete: 8 of 16 requests failed)")."""
    unfit = unfit_reasons(s)
    if s.name in bad:
        return _e(f"n/c ({'; '.join(['settings differ', *unfit])})")
    if unfit:
        return _e(f"n/c ({'; '.join(unfit)})")
    return "-" if s.speedup is None else f"{s.speedup:.2f}x"


def _throughput_cell(s: ReportSeries, c: int, unfilled: dict[int, str]) -> str:
    v = s.throughput.get(c)
    if c in unfilled and v is not None:
        why = _e(unfilled[c])
        return f'<td class="num unfilled" title="{why}">{_fmt(v)} (never filled: {why})</td>'
    return f'<td class="num">{_fmt(v)}</td>'


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def write_html(data: ReportData, path: Path) -> Path:
    path.write_text(render_html(data), encoding="utf-8")
    return path
