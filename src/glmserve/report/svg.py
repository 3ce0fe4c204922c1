"""Inline SVG charts of the report, and the chart specs that also drive the PNGs.

Every bar and point carries ``data-*`` attributes (label, series, value), so a headless
browser's DOM dump can be checked chart by chart. The y axis (``nice_axis``) is shared with
the PNGs, so a PNG and the page never disagree.
"""

from __future__ import annotations

import html
import math
from typing import Any

from glmserve.report.data import LATENCY_METRICS, PALETTE, PERCENTILES, ReportData


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def nice_axis(vmax: float) -> tuple[float, list[float]]:
    """The y axis of every chart, SVG and PNG alike: from 0 to the lowest multiple of a nice
    step (1, 2, 2.5 or 5 x 10^k) at or above the data's maximum that takes 3 to 6 steps
    (the fewer on a tie), so the top tick sits close to the data: 274 -> 0, 100, 200, 300
    (never 0..500), 41 -> 0, 10, ..., 50."""
    if not vmax > 0 or not math.isfinite(vmax):
        return 1.0, [0.0, 0.25, 0.5, 0.75, 1.0]
    mag = 10 ** math.floor(math.log10(vmax))
    best: tuple[float, int, float] | None = None
    for scale in (mag / 100, mag / 10, mag):
        for m in (1, 2, 2.5, 5):
            step = m * scale
            n = max(1, math.ceil(vmax / step - 1e-9))
            if 3 <= n <= 6 and (best is None or (n * step, n) < best[:2]):
                best = (n * step, n, step)
    top, n, step = best or (vmax, 1, vmax)
    return round(top, 12), [round(i * step, 12) for i in range(n + 1)]


def _num(v: float) -> str:
    if v == 0:
        return "0"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 1 else f"{v:.2f}"


def tick_labels(ymax: float, n: int = 4) -> list[str]:
    """Labels of the ``n + 1`` ticks 0..ymax, all with the same number of decimals: the
    fewest that show every tick exactly (0, 0.5, 1.0, 1.5 -- never 0, 0.62, 1.2, 1.9)."""
    values = [ymax * i / n for i in range(n + 1)]
    for d in range(6):
        if all(abs(round(v, d) - v) <= 1e-9 * max(ymax, 1e-12) for v in values):
            break
    return [f"{v:,.{d}f}" for v in values]


W, H = 720, 300


ML, MR, MT, MB = 64, 16, 36, 56


def _frame(
    chart: str, title: str, unit: str, ymax: float, legend: list[tuple[str, str]], n: int = 4
) -> list[str]:
    parts = [
        f'<svg class="chart" data-chart="{_e(chart)}" viewBox="0 0 {W} {H}" width="{W}" '
        f'height="{H}" role="img" aria-label="{_e(title)}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="{ML}" y="20" class="title">{_e(title)}</text>',
    ]
    ph = H - MT - MB
    for i, label in enumerate(tick_labels(ymax, n)):
        y = MT + ph - ph * i / n
        parts.append(f'<line class="grid" x1="{ML}" x2="{W - MR}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(
            f'<text class="tick" x="{ML - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>'
        )
    parts.append(
        f'<text class="unit" x="14" y="{MT + ph / 2:.0f}" '
        f'transform="rotate(-90 14 {MT + ph / 2:.0f})" '
        f'text-anchor="middle">{_e(unit)}</text>'
    )
    x = ML
    for label, color in legend:
        parts.append(f'<rect x="{x}" y="{H - 16}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text class="legend" x="{x + 14}" y="{H - 7}">{_e(label)}</text>')
        x += 24 + 7 * len(label)
    return parts


def bar_chart(
    chart: str,
    title: str,
    unit: str,
    groups: list[str],
    series: list[str],
    values: dict[tuple[str, str], float],
    colors: dict[str, str],
    notes: dict[str, str] | None = None,
) -> str:
    """Grouped bars: ``values[(group, series)]``; each bar a ``rect.bar`` with data attributes.

    ``notes`` labels groups that have no bar (a crashed profile says "crashed" in place).
    """
    if not values:
        return _no_data(chart, title)
    ymax, ticks = nice_axis(max(values.values()))
    parts = _frame(
        chart,
        title,
        unit,
        ymax,
        [(s, colors[s]) for s in series] if len(series) > 1 else [],
        len(ticks) - 1,
    )
    pw, ph = W - ML - MR, H - MT - MB
    gw = pw / max(len(groups), 1)
    bw = min(48.0, gw * 0.8 / max(len(series), 1))
    for gi, g in enumerate(groups):
        x0 = ML + gi * gw + (gw - bw * len(series)) / 2
        if notes and g in notes:
            parts.append(
                f'<text class="missing" data-group="{_e(g)}" x="{ML + gi * gw + gw / 2:.1f}" '
                f'y="{MT + ph - 8}" text-anchor="middle">{_e(notes[g])}</text>'
            )
        for si, s in enumerate(series):
            v = values.get((g, s))
            if v is None:
                continue
            h = ph * v / ymax
            x, y = x0 + si * bw, MT + ph - h
            parts.append(
                f'<rect class="bar" data-group="{_e(g)}" data-series="{_e(s)}" '
                f'data-value="{v:.6g}" '
                f'x="{x:.1f}" y="{y:.1f}" width="{bw - 2:.1f}" height="{h:.1f}" fill="{colors[s]}">'
                f"<title>{_e(g)} {_e(s)}: {_num(v)} {_e(unit)}</title></rect>"
            )
            if len(series) == 1:
                parts.append(
                    f'<text class="value" x="{x + bw / 2:.1f}" y="{y - 4:.1f}" '
                    f'text-anchor="middle">{_num(v)}</text>'
                )
        parts.append(
            f'<text class="xlabel" x="{ML + gi * gw + gw / 2:.1f}" y="{MT + ph + 16}" '
            f'text-anchor="middle">{_e(g)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def line_chart(
    chart: str,
    title: str,
    unit: str,
    xlabel: str,
    lines: dict[str, dict[int, float]],
    colors: dict[str, str],
) -> str:
    """One polyline per series over a log2 x axis; each point a ``circle.point``."""
    lines = {k: v for k, v in lines.items() if v}
    if not lines:
        return _no_data(chart, title)
    xs = sorted({x for pts in lines.values() for x in pts})
    ymax, ticks = nice_axis(max(y for pts in lines.values() for y in pts.values()))
    parts = _frame(chart, title, unit, ymax, [(s, colors[s]) for s in lines], len(ticks) - 1)
    pw, ph = W - ML - MR, H - MT - MB
    lo, hi = math.log2(max(xs[0], 1)), math.log2(max(xs[-1], 1))

    def px(x: int) -> float:
        if hi == lo:
            return ML + pw / 2
        return ML + 12 + (pw - 24) * (math.log2(max(x, 1)) - lo) / (hi - lo)

    for x in xs:
        parts.append(
            f'<text class="xlabel" x="{px(x):.1f}" y="{MT + ph + 16}" '
            f'text-anchor="middle">{x}</text>'
        )
    parts.append(
        f'<text class="unit" x="{ML + pw / 2:.0f}" y="{MT + ph + 32}" '
        f'text-anchor="middle">{_e(xlabel)}</text>'
    )
    for name, pts in lines.items():
        coords = [(px(x), MT + ph - ph * y / ymax, x, y) for x, y in sorted(pts.items())]
        path = " ".join(f"{cx:.1f},{cy:.1f}" for cx, cy, _, _ in coords)
        parts.append(
            f'<polyline class="series" data-series="{_e(name)}" points="{path}" '
            f'fill="none" stroke="{colors[name]}" stroke-width="2"/>'
        )
        for cx, cy, x, y in coords:
            parts.append(
                f'<circle class="point" data-series="{_e(name)}" data-x="{x}" data-value="{y:.6g}" '
                f'cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{colors[name]}">'
                f"<title>{_e(name)} @{x}: {_num(y)} {_e(unit)}</title></circle>"
            )
    parts.append("</svg>")
    return "\n".join(parts)


def _no_data(chart: str, title: str) -> str:
    return (
        f'<p class="no-data" data-chart="{_e(chart)}">'
        f"{_e(title)}: no data in the selected results"
        f"{' (bench with --mode concurrency)' if chart == 'throughput' else ''}</p>"
    )


def chart_specs(data: ReportData) -> list[dict[str, Any]]:
    """Pure: what each chart plots (also drives the PNGs), in page order."""
    colors = {s.name: PALETTE[i % len(PALETTE)] for i, s in enumerate(data.series)}
    decode = {(s.name, "decode tok/s"): s.decode_tok_s for s in data.series if s.decode_tok_s}
    specs: list[dict[str, Any]] = [
        {
            "kind": "bar",
            "chart": "decode-tok-s",
            "title": "Decode tok/s (single stream, median)",
            "unit": "tok/s",
            "groups": [s.name for s in data.series],
            "series": ["decode tok/s"],
            "values": decode,
            "colors": {"decode tok/s": PALETTE[0]},
            "notes": {s.name: s.status for s in data.series if not s.decode_tok_s},
        },
        {
            "kind": "line",
            "chart": "throughput",
            "title": "Aggregate output tok/s vs concurrency",
            "unit": "tok/s",
            "xlabel": "concurrency",
            "lines": {s.name: s.throughput for s in data.series},
            "colors": colors,
        },
    ]
    pcolors = dict(zip(PERCENTILES, ("#4269d0", "#efb118", "#ff725c"), strict=True))
    for key, label in LATENCY_METRICS:
        vals = {
            (s.name, p): v
            for s in data.series
            for p, v in (s.latency.get(key) or {}).items()
            if v is not None
        }
        groups = [s.name for s in data.series if any((s.name, p) in vals for p in PERCENTILES)]
        specs.append(
            {
                "kind": "bar",
                "chart": f"latency-{key.removesuffix('_ms')}",
                "title": f"{label} percentiles (ms, lowest concurrency measured)",
                "unit": "ms",
                "groups": groups,
                "series": list(PERCENTILES),
                "values": vals,
                "colors": pcolors,
            }
        )
    return specs


def _svg_for(spec: dict[str, Any]) -> str:
    if spec["kind"] == "bar":
        return bar_chart(
            spec["chart"],
            spec["title"],
            spec["unit"],
            spec["groups"],
            spec["series"],
            spec["values"],
            spec["colors"],
            spec.get("notes"),
        )
    return line_chart(
        spec["chart"], spec["title"], spec["unit"], spec["xlabel"], spec["lines"], spec["colors"]
    )
