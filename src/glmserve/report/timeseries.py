"""Time-series charts of a bench's telemetry, one group per level (``bench.telemetry``).

Why: a level's summary says a config lost; these say why (queue growing, KV pool full, cache
hit rate low, power capped, SM clock dropping). Each chart is inline SVG like the rest of the
report, with ``data-chart`` (``ts-throughput``, ``ts-requests``, ``ts-kv-usage``,
``ts-cache-hit``, ``ts-power``, ``ts-sm-clock``), ``data-result``/``data-level`` on the chart
and, per line, ``data-series``, ``data-n`` (points) and ``data-max`` so a DOM dump can be
checked against the stored result. Charts with no samples are left out (a server without
``--enable-metrics``, a host without ``nvidia-smi``).
"""

from __future__ import annotations

import html
from typing import Any

from glmserve.report.data import PALETTE, ReportData
from glmserve.report.svg import MB, ML, MR, MT, H, W, _frame, nice_axis

Line = tuple[list[float], list[float]]  # (t seconds from the level's start, values)


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _pairs(ts: list[Any], vs: list[Any]) -> Line:
    keep = [(float(t), float(v)) for t, v in zip(ts, vs, strict=False) if v is not None]
    return [t for t, _ in keep], [v for _, v in keep]


def ts_chart(chart: str, title: str, unit: str, lines: dict[str, Line], attrs: str) -> str:
    """One chart: a polyline per series over a linear time axis (s from the level's start)."""
    ymax, ticks = nice_axis(max(max(vs) for _, vs in lines.values()))
    colors = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(lines)}
    parts = _frame(chart, title, unit, ymax, list(colors.items()), len(ticks) - 1)
    parts[0] = parts[0].replace("<svg ", f"<svg {attrs} ", 1)
    pw, ph = W - ML - MR, H - MT - MB
    tmax = max((max(ts) for ts, _ in lines.values()), default=1.0) or 1.0
    for i in range(5):
        t = tmax * i / 4
        parts.append(
            f'<text class="xlabel" x="{ML + pw * i / 4:.1f}" y="{MT + ph + 16}" '
            f'text-anchor="middle">{t:.1f}</text>'
        )
    parts.append(
        f'<text class="unit" x="{ML + pw / 2:.0f}" y="{MT + ph + 32}" '
        'text-anchor="middle">seconds into the level</text>'
    )
    for name, (ts, vs) in lines.items():
        pts = " ".join(
            f"{ML + pw * t / tmax:.1f},{MT + ph - ph * v / ymax:.1f}"
            for t, v in zip(ts, vs, strict=True)
        )
        parts.append(
            f'<polyline class="ts-series" data-series="{_e(name)}" data-n="{len(vs)}" '
            f'data-max="{max(vs):.6g}" points="{pts}" fill="none" stroke="{colors[name]}" '
            f'stroke-width="1.5"><title>{_e(name)}</title></polyline>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def level_charts(tel: dict[str, Any]) -> list[tuple[str, str, str, dict[str, Line]]]:
    """Pure: (chart, title, unit, lines) of one level's telemetry, those with data only."""
    srv = tel.get("server") or {}
    ts = srv.get("t") or []

    def s(key: str, scale: float = 1.0) -> Line:
        t, v = _pairs(ts, srv.get(key) or [])
        return t, [x * scale for x in v]

    gpu = (tel.get("gpu") or {}).get("series") or {}

    def g(key: str) -> dict[str, Line]:
        return {f"GPU {i}": _pairs(d.get("t") or [], d.get(key) or []) for i, d in gpu.items()}

    specs = [
        ("ts-throughput", "Generation throughput (server)", "tok/s",
         {"gen_throughput gauge": s("gen_throughput"),
          "generation_tokens_total rate": s("generation_tok_s")}),
        ("ts-requests", "Running and queued requests", "requests",
         {"running": s("num_running_reqs"), "queued": s("num_queue_reqs")}),
        ("ts-kv-usage", "KV cache usage", "%", {"token_usage": s("token_usage", 100.0)}),
        ("ts-cache-hit", "Prefix cache hit rate", "%",
         {"cache_hit_rate": s("cache_hit_rate", 100.0)}),
        ("ts-power", "GPU power draw", "W", g("power_w")),
        ("ts-sm-clock", "GPU SM clock", "MHz", g("sm_mhz")),
    ]  # fmt: skip
    return [(c, t, u, {n: ln for n, ln in lines.items() if ln[1]}) for c, t, u, lines in specs
            if any(ln[1] for ln in lines.values())]  # fmt: skip


def timeseries_html(data: ReportData) -> str:
    """The report's "Time series" section; "" when no selected result has telemetry."""
    out = []
    for s in data.series:
        for row in s.results:
            res = row.get("result") or {}
            for n, lv in enumerate(res.get("levels") or []):
                tel = lv.get("telemetry") or {}
                charts = level_charts(tel)
                if not charts:
                    continue
                rate = lv.get("request_rate")
                where = f"rate {rate} req/s" if rate is not None else f"c={lv.get('concurrency')}"
                tpj = lv.get("output_tok_per_j")
                extra = f", {tpj:.3g} output tok/J" if tpj is not None else ""
                if lv.get("gpu_throttled"):
                    extra += ", GPU clocks throttled"
                out.append(f"<h3>{_e(s.name)}: level {n + 1} ({_e(where)}{_e(extra)})</h3>")
                attrs = f'data-result="{_e(row.get("id"))}" data-level="{n}"'
                out += [ts_chart(c, t, u, lines, attrs) for c, t, u, lines in charts]
    return "<h2>Time series</h2>" + "\n".join(out) if out else ""
