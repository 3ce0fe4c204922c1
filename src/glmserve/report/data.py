"""The report's data: stored sweeps, tunes, runs and bench results -> ``ReportData``.

``load_report_data`` is the only part that reads the store; everything after it is pure, so
the HTML, SVG and PNG renderers only consume a ``ReportData`` (nothing is re-measured).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from glmserve.config.flags import Flags
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
                if "ambiguous" in str(exc):  # a prefix of two runs: say so, not "no such id"
                    raise
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


def flag_map(argv: list[str] | None) -> dict[str, str]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` of an argv -> {flag: value}
    (every value of a flag that takes several, the last occurrence's, as argparse)."""
    return Flags.parse(argv).as_dict()


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


def shown_status(s: ReportSeries) -> str:
    """The summary's status: the run's state, or "incomplete" for a run that served but
    whose result had failed requests or was cut short (an audit saw those marked "ok")."""
    from glmserve.bench.comparable import incomplete_reason

    if s.status == OK and any(incomplete_reason(row) for row in s.results):
        return "incomplete"
    return s.status
