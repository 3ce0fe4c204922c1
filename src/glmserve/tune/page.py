"""The tune page of ``glmserve report``: Pareto plot (inline SVG), trial table, failures with
their diagnoses. Pure: a stored tune in, an HTML fragment out (no scripts, no URLs)."""

from __future__ import annotations

import html
from typing import Any

from glmserve.tune import state as st

W, H, ML, MR, MT, MB = 640, 320, 60, 20, 30, 40


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _f(v: Any) -> str:
    return "-" if v is None else f"{float(v):.1f}"


def pareto_svg(tune: st.Tune) -> str:
    """Every successful trial as a point (output tok/s against p99 latency); the Pareto front
    joined by a line and drawn filled; SLO misses hollow."""
    lat = st.latency_key(tune)
    pts = [
        (float(t.metrics[lat]), float(t.metrics["output_tok_s"]), t)
        for t in tune.trials
        if t.status == st.OK
        and t.metrics.get(lat) is not None
        and t.metrics.get("output_tok_s") is not None
    ]
    title = f"tune {tune.tune_id}: output tok/s vs {lat}"
    head = (
        f'<svg class="chart" data-chart="tune-pareto" viewBox="0 0 {W} {H}" width="{W}" '
        f'height="{H}" role="img" aria-label="{_e(title)}" xmlns="http://www.w3.org/2000/svg">'
        f'<text x="{ML}" y="18" class="title">{_e(title)}</text>'
    )
    if not pts:
        return head + f'<text x="{ML}" y="{H / 2}">no successful trial</text></svg>'
    xmax = max(p[0] for p in pts) * 1.1 or 1.0
    ymax = max(p[1] for p in pts) * 1.1 or 1.0

    def xy(x: float, y: float) -> tuple[float, float]:
        return (
            ML + (W - ML - MR) * x / xmax,
            H - MB - (H - MT - MB) * y / ymax,
        )

    parts = [head]
    parts.append(f'<line class="axis" x1="{ML}" y1="{H - MB}" x2="{W - MR}" y2="{H - MB}"/>')
    parts.append(f'<line class="axis" x1="{ML}" y1="{MT}" x2="{ML}" y2="{H - MB}"/>')
    parts.append(f'<text class="unit" x="{W / 2}" y="{H - 8}">{_e(lat)} (ms)</text>')
    parts.append(
        f'<text class="unit" x="4" y="{MT - 6}">output tok/s (max {ymax / 1.1:.0f})</text>'
    )
    front = st.pareto(tune)
    line = sorted((float(t.metrics[lat]), float(t.metrics["output_tok_s"])) for t in front)
    if len(line) > 1:
        coords = " ".join(f"{a:.1f},{b:.1f}" for a, b in (xy(x, y) for x, y in line))
        parts.append(f'<polyline class="front" fill="none" stroke="#c33" points="{coords}"/>')
    front_keys = {t.key for t in front}
    for x, y, t in pts:
        cx, cy = xy(x, y)
        on = t.key in front_keys
        fill = "#c33" if on else ("#36c" if t.metrics.get("meets_slo") else "none")
        parts.append(
            f'<circle class="{"front" if on else "trial"}" data-trial="{_e(t.key)}" '
            f'cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{fill}" stroke="#36c">'
            f"<title>{_e(t.key)}: {y:.1f} tok/s, {x:.1f} ms</title></circle>"
        )
    return "".join(parts) + "</svg>"


def tune_section(tune: st.Tune) -> str:
    """The whole tune page as one HTML section."""
    keys = [k for k, _ in tune.space]
    best = st.best_trial(tune)
    front = {t.key for t in st.pareto(tune)}
    slo = ", ".join(f"{k} &lt;= {v:g}" for k, v in tune.slo.items()) or "none"
    best_line = (
        "no trial met the SLOs"
        if best is None
        else f"{_e(', '.join(f'{k}={v}' for k, v in best.config.items()))} at concurrency "
        f"{best.concurrency}: {_e(tune.objective)} {_f(st.objective_value(tune, best))}"
    )
    head = [*keys, *st.TRIAL_COLUMNS]
    rows = []
    for t in tune.trials:
        cells = st.trial_cells(t, keys)
        if t.key in front:
            cells[-1] += " · pareto"  # the SLO cell
        rows.append(
            f'<tr class="status-{_e(t.status)}" data-trial="{_e(t.key)}">'
            + "".join(f"<td>{_e(c)}</td>" for c in cells)
            + "</tr>"
        )
    failed = st.failed_trials(tune)
    fails = ""
    if failed:
        fails = (
            '<h3>Failed and skipped trials</h3><ul class="diagnoses">'
            + "".join(
                f"<li><b>{_e(t.key)}</b> ({_e(t.status)}{', ' + _e(t.host) if t.host else ''}): "
                f"{_e(st.why(t))}</li>"
                for t in failed
            )
            + "</ul>"
        )
    return (
        f'<section class="tune" data-tune="{_e(tune.tune_id)}"><h2>Tune {_e(tune.tune_id)}</h2>'
        f'<p class="meta">profile {_e(tune.profile)} · strategy {_e(tune.strategy)} · '
        f"objective {_e(tune.objective)} · SLO {slo} · hosts {_e(', '.join(tune.hosts))}"
        f"{' (simulated)' if tune.simulate else ''}</p>"
        f'<p class="best"><b>Best:</b> {best_line}</p>'
        + pareto_svg(tune)
        + '<table class="summary"><thead><tr>'
        + "".join(f"<th>{_e(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        + fails
        + "</section>"
    )
