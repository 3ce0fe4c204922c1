"""``glmserve report``: stored sweeps and runs -> one self-contained HTML file (+ PNGs).

Renderers only consume stored results (sweep.json files and the run store's bench results);
nothing is re-measured. The HTML has no external references at all: charts are inline SVG
generated here, every bar / point carrying ``data-*`` attributes (label, series, value) so a
headless browser's DOM dump can be checked chart by chart. PNGs (``--png DIR``) are drawn
with matplotlib when it is installed (an optional dependency).

    load_report_data(ids) ─► ReportData (pure from here) ─► render_html(data) -> str
                                                         └► write_pngs(data, dir)
"""

from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glmserve.errors import ConfigError, RunNotFound
from glmserve.profiling.analysis import PROFILED_EVENT
from glmserve.sweep.state import OK, Sweep, list_sweep_ids, load_sweep
from glmserve.sweep.summary import speed_note, sweep_rows

PALETTE = ["#4269d0", "#efb118", "#ff725c", "#6cc5b0", "#3ca951", "#ff8ab7", "#a463f2", "#97bbf5"]
PERCENTILES = ("p50", "p90", "p99")
LATENCY_METRICS = (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E latency"))


@dataclass
class ReportSeries:
    """One profile (from a sweep) or one run: what every chart and table reads."""

    name: str
    status: str
    run_id: str | None = None
    source: str = ""
    diagnosis: str = ""
    hint: str | None = None
    decode_tok_s: float | None = None
    ttft_ms: float | None = None
    speedup: float | None = None
    throughput: dict[int, float] = field(default_factory=dict)  # concurrency -> output tok/s
    latency: dict[str, dict[str, float | None]] = field(default_factory=dict)  # at lowest level
    latency_level: int | None = None
    findings: list[str] = field(default_factory=list)
    # What a reader needs before sharing the report: where each figure came from.
    results: list[dict[str, Any]] = field(default_factory=list)  # bench rows {id, result, meta}
    argv: list[str] | None = None  # the profile's rendered server argv
    # The rest of what configures the server: the launch env (GLMSERVE_PATCHES selects the
    # runtime patch) and the patches; None where unknown (a --url result has no run record).
    env: dict[str, str] | None = None
    patches: list[str] | None = None


@dataclass
class ReportData:
    title: str
    sources: list[str]
    series: list[ReportSeries]
    generated_at: float = field(default_factory=time.time)
    notes: list[str] = field(default_factory=list)  # e.g. "simulated at sim.speed=20 ..."
    tunes: list[Any] = field(default_factory=list)  # stored tunes: one tune page each


# --------------------------------------------------------------------------- inputs


def _latency_from(bench: list[dict[str, Any]]) -> tuple[dict[str, dict[str, float | None]], int]:
    """Percentiles at the lowest concurrency measured (decode bench preferred)."""
    levels = [lv for b in bench if b.get("mode") == "decode" for lv in b.get("levels", [])]
    levels = levels or [lv for b in bench for lv in b.get("levels", [])]
    if not levels:
        return {}, 0
    low = min(levels, key=lambda lv: lv.get("concurrency", 0))
    lat = {
        key: {p: (low.get(key) or {}).get(p) for p in PERCENTILES}
        for key, _ in LATENCY_METRICS
        if low.get(key)
    }
    return lat, int(low.get("concurrency", 1))


def series_from_sweep(sweep: Sweep) -> list[ReportSeries]:
    """Pure: one series per profile of the sweep, table values from ``sweep_rows``."""
    out = []
    for row, entry in zip(sweep_rows(sweep), sweep.entries, strict=True):
        lat, level = _latency_from(entry.bench) if entry.status == OK else ({}, 0)
        out.append(
            ReportSeries(
                name=entry.profile,
                status=entry.status,
                run_id=entry.run_id,
                source=sweep.sweep_id,
                diagnosis=row["diagnosis"],
                hint=row["hint"],
                decode_tok_s=row["decode_tok_s"],
                ttft_ms=row["ttft_ms"],
                speedup=row["speedup"],
                throughput=row["aggregate_tok_s"],
                latency=lat,
                latency_level=level or None,
                findings=[f["message"] for f in (entry.trace or {}).get("findings", [])],
                results=[
                    {"id": None, "result": b, "meta": b.get("meta") or {}} for b in entry.bench
                ],
                argv=_argv_of(entry.bench, entry.profile),
                patches=_recorded_patches(entry.bench),
            )
        )
    return out


def _recorded_patches(bench: list[dict[str, Any]]) -> list[str] | None:
    """The patches a sweep's bench recorded (its run's), None where none says."""
    for b in bench:
        patches = (b.get("meta") or {}).get("patches")
        if isinstance(patches, list):
            return [str(x) for x in patches]
    return None


def _profile_launch(s: ReportSeries, profile: str | None) -> None:
    """Env and patches of the profile as it renders now, for a series whose run record is
    gone (the same fallback ``_argv_of`` makes for the argv); left unknown if it does not
    load."""
    if not profile or (s.env is not None and s.patches is not None):
        return
    from glmserve.config.profiles import load_profile
    from glmserve.errors import GlmserveError

    try:
        spec = load_profile(profile)
    except (GlmserveError, OSError):
        return
    if s.env is None:
        s.env = dict(spec.env)
    if s.patches is None:
        s.patches = list(spec.patches)


def _argv_of(results: list[dict[str, Any]], profile: str | None) -> list[str] | None:
    """The rendered server argv a result recorded, else the profile's as it renders now."""
    import shlex

    for b in results:
        argv = (b.get("meta") or {}).get("argv")
        if isinstance(argv, str):
            return shlex.split(argv)
        if isinstance(argv, list) and argv:
            return [str(a) for a in argv]
    if not profile:
        return None
    from glmserve.config.profiles import load_profile
    from glmserve.errors import GlmserveError

    try:
        return list(load_profile(profile).argv)
    except (GlmserveError, OSError):
        return None


def series_from_run(
    run: dict[str, Any], bench: list[dict[str, Any]], profiled: dict[str, Any] | None = None
) -> ReportSeries:
    """Pure: a stored run plus its bench results (newest first, as the store lists them) and
    the summary of its latest profiler capture, if any."""
    from glmserve.sweep.state import SweepEntry

    results = [b.get("result", b) for b in bench]
    entry = SweepEntry(profile=run.get("profile", "?"), status=OK if results else "no bench")
    # Open-loop (rate) levels are keyed by rate, not concurrency: they stay out of the
    # concurrency charts (the metadata block lists them).
    entry.bench = [r for r in _latest_per_mode(results) if r.get("mode") != "rate"]
    crashed = run.get("state") in ("CRASHED", "STALLED")
    diag = ": ".join(str(x) for x in (run.get("category"), run.get("root_cause")) if x)
    lat, level = _latency_from(entry.bench)
    return ReportSeries(
        name=f"{entry.profile} ({run.get('run_id', '?')})",
        status=run.get("state", "?").lower() if crashed or not results else OK,
        run_id=run.get("run_id"),
        source=run.get("run_id", ""),
        diagnosis=diag,
        hint=run.get("hint"),
        decode_tok_s=entry.decode_tok_s(),
        ttft_ms=entry.ttft_ms(),
        throughput=entry.aggregate_tok_s(),
        latency=lat,
        latency_level=level or None,
        findings=[f["message"] for f in (profiled or {}).get("findings", [])],
        results=[_with_launch(b, run) for b in _latest_rows_per_mode(bench)],
        argv=_argv_of(
            [{"meta": {"argv": (run.get("spec") or {}).get("command")}}, *results],
            run.get("profile"),
        ),
        env=dict((run.get("spec") or {}).get("env") or {}),
        patches=list(run.get("patches") or []),
    )


def _with_launch(row: dict[str, Any], run: dict[str, Any] | None) -> dict[str, Any]:
    """The bench row with its run's launch env and patches attached (``row["launch"]``, read
    by ``bench.comparable.config_hash``): bench meta never recorded the env."""
    if not run:
        return row
    spec = run.get("spec") or {}
    return {**row, "launch": {"env": dict(spec.get("env") or {}),
                              "patches": list(run.get("patches") or [])}}  # fmt: skip


def _run_status(run: dict[str, Any] | None) -> str:
    if run and run.get("state") in ("CRASHED", "STALLED"):
        return str(run["state"]).lower()
    return OK


def series_from_result(row: dict[str, Any], run: dict[str, Any] | None) -> ReportSeries:
    """Pure: one stored bench result (``report 64``), with its run record where it has one.

    A ``--url`` result has no run: its name is its result id, and where it was measured is
    the server URL and the client host (``bench.comparable.where_text``), never a host name.
    """
    from glmserve.sweep.state import SweepEntry

    res = row["result"]
    meta = {**(res.get("meta") or {}), **(row.get("meta") or {})}
    entry = SweepEntry(profile=meta.get("profile") or "?", status=OK)
    entry.bench = [res] if res.get("mode") != "rate" else []
    lat, level = _latency_from(entry.bench)
    name = f"result {row['id']}"
    if meta.get("profile"):
        name = f"{meta['profile']} ({name})"
    spec = (run or {}).get("spec") or {}
    return ReportSeries(
        name=name,
        status=_run_status(run),
        run_id=row.get("run_id"),
        source=str(row["id"]),
        decode_tok_s=entry.decode_tok_s(),
        ttft_ms=entry.ttft_ms(),
        throughput=entry.aggregate_tok_s(),
        latency=lat,
        latency_level=level or None,
        results=[_with_launch(row, run)],
        argv=_argv_of([{"meta": {"argv": spec.get("command")}}, res], meta.get("profile"))
        if run or meta.get("argv")
        else None,
        env=dict(spec.get("env") or {}) if run else None,
        patches=list((run or {}).get("patches") or meta.get("patches") or []) if run else None,
    )


def _latest_rows_per_mode(bench: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for b in bench:  # newest first
        if "result" in b:
            seen.setdefault(str(b["result"].get("mode")), b)
    return list(seen.values())


def _latest_per_mode(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for r in results:  # newest first: keep the first of each mode
        seen.setdefault(str(r.get("mode")), r)
    return list(seen.values())


def unfit_reasons(s: ReportSeries) -> list[str]:
    """Why a series' figures get no speedup whatever the baseline: a run that crashed or
    stalled, a result that is incomplete (failed requests, Ctrl-C, the server died)."""
    from glmserve.bench.comparable import incomplete_reason, wrong_output_reason

    out = []
    if s.status not in (OK, "no bench") and s.results:
        out.append(f"server {s.status}")
    for row in s.results:
        why = incomplete_reason(row) or wrong_output_reason(row)
        if why:
            out.append(f"{row['result'].get('mode')}: {why}")
    return out


def with_speedups(series: list[ReportSeries]) -> list[ReportSeries]:
    """Speedups against the first series with a decode figure and complete results.

    Recomputed here even for a sweep (whose own table divides by its first successful
    profile): a crashed or incomplete series is neither a baseline nor given a speedup.
    """
    fit = [s for s in series if not unfit_reasons(s)]
    base = next((s.decode_tok_s for s in fit if s.decode_tok_s), None)
    for s in series:
        s.speedup = s.decode_tok_s / base if s in fit and s.decode_tok_s and base else None
    return series


def load_report_data(ids: list[str]) -> ReportData:
    """Each id is a sweep id (``$GLMSERVE_HOME/sweeps/<id>``), a tune id, a run id (or
    prefix) or a bench result id (a number, as ``compare`` takes it: a ``--url`` result has
    no run). An exact run id wins over a number, as in ``compare``."""
    if not ids:
        raise ConfigError("report: give at least one SWEEP, RUN or bench RESULT id")
    ids = list(dict.fromkeys(ids))  # `report 1 1`: one series, as `compare 1 1` shows one row
    sweeps = set(list_sweep_ids())
    series: list[ReportSeries] = []
    titles = []
    notes: list[str] = []
    tunes: list[Any] = []
    store = None
    try:
        for ident in ids:
            if ident.startswith("tu-"):
                from glmserve.tune.state import load_tune

                tunes.append(load_tune(ident))
                titles.append(f"tune {ident}")
                continue
            if ident in sweeps:
                sw = load_sweep(ident)
                if store is None:
                    from glmserve.store import RunStore

                    store = RunStore.open()
                series += _launch_from_runs(series_from_sweep(sw), store)
                titles.append(f"sweep {ident}")
                note = speed_note(sw)
                if note and note not in notes:
                    notes.append(note)
                continue
            if store is None:
                from glmserve.store import RunStore

                store = RunStore.open()
            try:
                run = store.get_run(ident)
            except RunNotFound as exc:
                if not ident.isdigit():
                    raise RunNotFound(
                        f"{ident!r} is neither a sweep nor a run nor a bench result id "
                        "(see `glmserve runs`, `glmserve results`)"
                    ) from exc
                run = None
            if ident.isdigit() and (run is None or run.run_id != ident):
                try:
                    row = store.get_bench_result(int(ident))
                except RunNotFound:
                    if run is None:
                        raise  # "no bench result N (see `glmserve results`)"
                    row = None  # no such result: the digits are a run id prefix
                if row is not None:
                    owner = _run_or_none(store, row.get("run_id"))
                    series.append(series_from_result(row, owner))
                    titles.append(f"result {ident}")
                    continue
            assert run is not None
            profiled = [
                e["data"] for e in store.list_events(run.run_id) if e["state"] == PROFILED_EVENT
            ]
            series.append(
                series_from_run(
                    run.to_dict(),
                    store.list_bench_results(run.run_id),
                    profiled[-1] if profiled else None,
                )
            )
            titles.append(f"run {run.run_id}")
    finally:
        if store is not None:
            store.close()
    return ReportData(
        title="glmserve report: " + ", ".join(titles),
        sources=ids,
        series=with_speedups(series),
        notes=notes,
        tunes=tunes,
    )


def _run_or_none(store: Any, run_id: str | None) -> dict[str, Any] | None:
    if not run_id:
        return None
    try:
        return store.get_run(run_id).to_dict()
    except RunNotFound:
        return None


def _launch_from_runs(series: list[ReportSeries], store: Any) -> list[ReportSeries]:
    """A sweep stores bench dicts, not launch env: take env and patches from each profile's
    run record, where it is still in the store."""
    for s in series:
        run = _run_or_none(store, s.run_id)
        if run is None:
            _profile_launch(s, s.name)
            continue
        s.env = dict((run.get("spec") or {}).get("env") or {})
        s.patches = list(run.get("patches") or [])
        s.results = [_with_launch(r, run) for r in s.results]
    return series


# --------------------------------------------------------------------------- SVG charts


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


# --------------------------------------------------------------------------- HTML


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


def flag_map(argv: list[str] | None) -> dict[str, str]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` of an argv -> {flag: value}."""
    out: dict[str, str] = {}
    argv = argv or []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("--"):
            if "=" in tok:
                key, val = tok.split("=", 1)
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                key, val = tok, argv[i + 1]
                i += 1
            else:
                key, val = tok, "(set)"
            out[key] = val
        i += 1
    return out


UNKNOWN = "(unknown)"


def config_map(s: ReportSeries) -> dict[str, str]:
    """Everything that configures a series' server, as rows of the flag-diff table: its argv
    flags, ``env NAME`` per launch env var and ``patches``. The env decides as much as a
    flag (``GLMSERVE_PATCHES`` turns the gather-cast patch on), so a diff without it can
    show "only --port differs" beside a 1.33x speedup. Unknown env (a sweep whose run record
    is gone) is "(unknown)", never "(absent)"."""
    out = flag_map(s.argv)
    if s.env is None:
        out["env"] = UNKNOWN
    else:
        out.update({f"env {k}": str(v) for k, v in sorted(s.env.items())})
    if s.patches is not None:
        out["patches"] = ",".join(s.patches) or "(none)"
    else:
        out["patches"] = UNKNOWN
    return out


def flag_diff(series: list[ReportSeries]) -> tuple[list[str], dict[str, dict[str, str]]]:
    """Flags, env vars and patches whose value differs between the series (absent counts as
    a value), and each series' map (``config_map``); series without a known argv are left
    out. An env var is compared only between series whose env is known."""
    maps = {s.name: config_map(s) for s in series if s.argv}
    keys = sorted({k for m in maps.values() for k in m if k != "env"})

    def value(m: dict[str, str], k: str) -> str | None:
        if k.startswith("env ") and m.get("env") == UNKNOWN:
            return UNKNOWN
        return m.get(k)

    differing = [
        k
        for k in keys
        if len({value(m, k) for m in maps.values() if value(m, k) != UNKNOWN}) > 1
        or (k == "patches" and len({m.get(k) for m in maps.values()}) > 1)
    ]
    maps = {n: {k: value(m, k) or "(absent)" for k in keys} for n, m in maps.items()}
    return differing, maps


def comparability(series: list[ReportSeries]) -> dict[str, list[str]]:
    """Per series, the results measured differently from the first series' result of the
    same mode, as "mode: field value vs baseline" (see ``bench.comparable``)."""
    from glmserve.bench.comparable import describe, differences

    base: dict[str, dict[str, Any]] = {}
    for s in series:
        for row in s.results:
            base.setdefault(str(row["result"].get("mode")), row)
    out: dict[str, list[str]] = {}
    for s in series:
        for row in s.results:
            ref = base[str(row["result"].get("mode"))]
            diffs = differences(ref, row) if ref is not row else []
            if diffs:
                out.setdefault(s.name, []).append(f"{row['result'].get('mode')}: {describe(diffs)}")
    return out


def unfilled_levels(s: ReportSeries) -> dict[int, str]:
    """Closed-loop levels of a series that never had their concurrency in flight: their
    cells are marked, not read as a c=N figure (``bench.comparable.underfilled``)."""
    from glmserve.bench.comparable import unfit

    out: dict[int, str] = {}
    for row in s.results:
        if row["result"].get("mode") == "rate":
            continue
        for c, why in unfit(row)["levels"].items():
            out[int(c)] = why
    return out


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


def shown_status(s: ReportSeries) -> str:
    """The summary's status: the run's state, or "incomplete" for a run that served but
    whose result had failed requests or was cut short (an audit saw those marked "ok")."""
    from glmserve.bench.comparable import incomplete_reason

    if s.status == OK and any(incomplete_reason(row) for row in s.results):
        return "incomplete"
    return s.status


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


def write_pngs(data: ReportData, directory: Path) -> list[Path]:
    """One PNG per chart with data (matplotlib, optional dependency)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError("--png needs matplotlib: pip install matplotlib") from exc
    directory.mkdir(exist_ok=True)  # its parent exists (``paths.check_output_dir``)
    written = []
    for spec in chart_specs(data):
        fig = png_figure(spec, plt)
        if fig is None:
            continue
        out = directory / f"{spec['chart']}.png"
        fig.savefig(out)
        plt.close(fig)
        written.append(out)
    return written


def png_figure(spec: dict[str, Any], plt: Any) -> Any:
    """One chart as a matplotlib figure (None without data), on the SVG's y axis
    (``nice_axis``: from 0, the same ticks), so a PNG and the page never disagree."""
    fig, ax = plt.subplots(figsize=(7.2, 3.0), dpi=100)
    if spec["kind"] == "bar":
        if not spec["values"]:
            plt.close(fig)
            return None
        top = max(spec["values"].values())
        n = len(spec["series"])
        width = 0.8 / n
        for si, s in enumerate(spec["series"]):
            xs = [
                gi + si * width - 0.4 + width / 2
                for gi, g in enumerate(spec["groups"])
                if (g, s) in spec["values"]
            ]
            ys = [spec["values"][(g, s)] for g in spec["groups"] if (g, s) in spec["values"]]
            ax.bar(xs, ys, width=width * 0.95, color=spec["colors"][s], label=s)
        ax.set_xticks(range(len(spec["groups"])), spec["groups"])
        if n > 1:
            ax.legend(fontsize=8)
    else:
        lines = {k: v for k, v in spec["lines"].items() if v}
        if not lines:
            plt.close(fig)
            return None
        top = max(y for pts in lines.values() for y in pts.values())
        for name, pts in lines.items():
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], marker="o", color=spec["colors"][name], label=name)
        ax.set_xscale("log", base=2)
        xticks = sorted({x for pts in lines.values() for x in pts})
        ax.set_xticks(xticks, [str(x) for x in xticks])
        ax.minorticks_off()
        ax.set_xlabel(spec["xlabel"])
        ax.legend(fontsize=8)
    ymax, ticks = nice_axis(top)
    ax.set_ylim(0, ymax)
    ax.set_yticks(ticks, tick_labels(ymax, len(ticks) - 1))
    ax.set_title(spec["title"], fontsize=10)
    ax.set_ylabel(spec["unit"])
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig
