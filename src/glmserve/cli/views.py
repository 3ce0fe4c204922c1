"""Every rich table and view the verbs print, built from the data the library returns.

Library modules return dicts and dataclasses (a ``BenchResult``, a compare table, sweep rows,
a trace analysis); how they look on a terminal is decided here, so a verb reads parse ->
call -> render and a new column is one edit in one module. Cells that come from users or
logs (profile names, descriptions, root-cause lines) are ``Text``: data, never rich markup.
"""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table
from rich.text import Text

from glmserve.bench.results import BenchResult, level_label
from glmserve.bench.runner import LevelRun, Progress
from glmserve.cli._app import err, out
from glmserve.diagnose import Diagnosis, State


def _f(v: Any, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


# -- profiles ------------------------------------------------------------------------------


def profiles_table(rows: list[dict[str, Any]]) -> Table:
    """``glmserve profiles``: name, parent, attention backend, patches, sglang range."""
    table = Table("profile", "extends", "attention backend", "patches", "sglang", "description")
    for col in table.columns[:5]:
        col.no_wrap = True
    for r in rows:
        cells = (
            r["name"],
            r["extends"] or "",
            r["attention_backend"] or "-",
            ",".join(r["patches"]) or "-",
            r["sglang"] or "-",
            r["description"],
        )
        table.add_row(*(Text(str(c)) for c in cells))
    return table


# -- diagnose ------------------------------------------------------------------------------


def render_diagnosis(diag: Diagnosis, label: str) -> Text:
    """The human view: one screen, log text never interpreted as rich markup."""
    colour = {State.CRASHED: "red", State.EXITED: "red", State.STALLED: "yellow"}.get(
        diag.state, "green"
    )
    t = Text()
    t.append("state     ", style="bold")
    t.append(diag.state.value, style=f"bold {colour}")
    if diag.state is not diag.phase:
        t.append(f"  (phase {diag.phase.value})")
    t.append("\n")
    if diag.category is not None:
        t.append("category  ", style="bold")
        t.append(diag.category.value + "\n", style=colour)
    if diag.line is not None and diag.root_cause:
        t.append(f"{label}:{diag.line}: ", style="bold")
        t.append(diag.root_cause[:400] + "\n")
    if diag.hint:
        t.append("hint      ", style="bold")
        t.append(diag.hint + "\n")
    if diag.patches:
        t.append("patches   ", style="bold")
        t.append(f"{', '.join(diag.patches)} active on {diag.patch_active or '?'} ranks\n")
    if diag.ready_line is not None:
        t.append("ready     ", style="bold")
        t.append(f"{label}:{diag.ready_line}\n")
    elif diag.last_progress_line is not None:
        t.append("progress  ", style="bold")
        t.append(f"{label}:{diag.last_progress_line}: {diag.last_progress or ''}\n")
    return t


# -- bench ---------------------------------------------------------------------------------


def _pct(d: dict[str, Any] | None, digits: int = 1) -> str:
    if not d:
        return "-"
    return "/".join(_f(d.get(k), digits) for k in ("p50", "p90", "p99"))


# (header, priority): lower priority numbers survive a narrow terminal first.
COLUMNS: tuple[tuple[str, int], ...] = (
    ("conc", 0), ("output tok/s", 1), ("TTFT ms p50/90/99", 2), ("TPOT ms p50/90/99", 3),
    ("ok/err", 4), ("decode tok/s p50", 5), ("req/s", 6), ("goodput req/s", 7),
    ("ITL ms p50/90/99", 8), ("E2E ms p50", 9), ("conc achieved", 10), ("server tok/s", 11),
    ("queue ms p50", 12),
)  # fmt: skip


def _cells(lv: dict[str, Any]) -> dict[str, str]:
    srv = lv.get("server") or {}
    srv_tok = srv.get("generation_tok_s") or srv.get("last_gen_throughput")
    return {
        "conc": level_label(lv),
        "output tok/s": _f(lv["output_tok_s"]),
        "decode tok/s p50": _f(lv["decode_tok_s"]["p50"], 2),
        "TTFT ms p50/90/99": _pct(lv["ttft_ms"]),
        "ITL ms p50/90/99": _pct(lv["itl_ms"], 2),
        "TPOT ms p50/90/99": _pct(lv["tpot_ms"], 2),
        "E2E ms p50": _f(lv["e2e_ms"]["p50"], 0),
        "queue ms p50": _f(lv["queue_ms"]["p50"], 2),
        "ok/err": f"{lv['completed']}/{lv['errors']}",
        "server tok/s": _f(srv_tok),
        "req/s": _f(lv.get("request_throughput"), 2),
        "goodput req/s": _f(lv.get("goodput"), 2),
        "conc achieved": _f(lv.get("achieved_concurrency")),
    }


def table_columns(res: BenchResult, wide: bool = False, width: int = 80) -> list[str]:
    """The columns shown: all with ``wide``; else by priority while the table fits ``width``
    (goodput only when SLOs were given)."""
    rows = [_cells(lv) for lv in res.levels]
    names = [n for n, _ in COLUMNS]
    if not any(lv.get("goodput") is not None for lv in res.levels):
        names.remove("goodput req/s")
    if wide:
        return names

    def col_w(n: str) -> int:
        return max([len(n), *[len(r[n]) for r in rows]]) + 3  # padding and border

    chosen: list[str] = []
    used = 1
    for n, _ in sorted(COLUMNS, key=lambda c: c[1]):
        if n in names and used + col_w(n) <= width:
            chosen.append(n)
            used += col_w(n)
    return [n for n in names if n in chosen]


def render_table(res: BenchResult, wide: bool = False, width: int = 80) -> Table:
    """The final table: one row per level, headline in the title. Fits ``width`` columns by
    leaving out the lowest-priority columns (``wide``: all of them)."""
    title = f"glmserve bench ({res.mode})"
    if res.mode == "decode":
        title += f": decode {_f(res.decode_tok_s, 2)} tok/s, TTFT {_f(res.ttft_ms)} ms"
    if not res.complete:
        title += f"  [INCOMPLETE: {res.stopped}]"
    cols = table_columns(res, wide, width)
    t = Table(title=title, title_justify="left")
    for col in cols:
        t.add_column(col, justify="right")
    for lv in res.levels:
        cells = _cells(lv)
        t.add_row(*[cells[c] for c in cols])
    if not wide and len(cols) < len(table_columns(res, wide=True)):
        t.caption = "some columns left out to fit; --wide shows all"
    return t


def sweep_line(sweep: dict[str, Any]) -> str:
    """One line saying where a rate sweep found saturation."""
    thr = sweep.get("max_request_throughput")
    top = f"{thr:.2f} req/s all at once" if thr else "unknown maximum"
    if sweep.get("rate") is None:
        return f"rate sweep: saturated at every rate tried ({top})"
    return f"rate sweep: kept up up to {sweep['rate']:g} req/s offered ({top})"


class PlainProgress(Progress):
    """CI: one line per level start/end and one every few seconds, no control characters."""

    def __init__(self, every: float = 5.0) -> None:
        self.every = every
        self.last = 0.0
        self.total: int | None = None

    def level_started(self, concurrency: int, total: int | None, duration: float | None) -> None:
        self.total = total
        self.last = time.monotonic()
        what = f"{total} requests" if total is not None else f"{duration:g} s"
        err.print(f"bench: concurrency {concurrency}: {what}", highlight=False)

    def update(self, done: int, errors: int, tokens: int, elapsed: float) -> None:
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        total = "?" if self.total is None else str(self.total)
        rate = tokens / elapsed if elapsed > 0 else 0.0
        err.print(
            f"bench:   {done}/{total} done, {errors} errors, {rate:,.1f} tok/s", highlight=False
        )

    def level_finished(self, run: LevelRun) -> None:
        errors = sum(1 for r in run.records if not r.ok)
        note = f" (stopped: {run.stopped})" if run.stopped else ""
        err.print(
            f"bench: concurrency {run.concurrency}: {len(run.records)} requests, "
            f"{errors} errors{note}",
            highlight=False,
        )


class RichProgress(Progress):
    """TTY: a live bar with done/total and tok/s."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RP

        self.rp = RP(
            TextColumn("[bold]c={task.fields[conc]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} tok/s, {task.fields[errors]} err"),
            TimeElapsedColumn(),
            console=err,
            transient=False,
        )
        self.task: Any = None

    def level_started(self, concurrency: int, total: int | None, duration: float | None) -> None:
        if self.task is None:
            self.rp.start()
        self.task = self.rp.add_task("bench", total=total, conc=concurrency, rate="-", errors=0)

    def update(self, done: int, errors: int, tokens: int, elapsed: float) -> None:
        rate = f"{tokens / elapsed:,.1f}" if elapsed > 0 else "-"
        self.rp.update(self.task, completed=done, rate=rate, errors=errors)

    def level_finished(self, run: LevelRun) -> None:
        pass

    def close(self) -> None:
        if self.task is not None:
            self.rp.stop()


# -- compare and stored results ------------------------------------------------------------


def _x(v: float | None, row: dict[str, Any]) -> str:
    """A speedup cell; an incomparable row says so instead of a number."""
    if row.get("incomparable"):
        return "n/c"
    return _f(v, 2)


def render_compare(table: dict[str, Any]) -> Table:
    """The comparison table: decode tok/s and output tok/s per level, each with speedup."""
    t = Table(
        title=f"glmserve compare (baseline: result {table['baseline']})", title_justify="left"
    )
    for col in ("result", "run", "profile", "mode", "decode tok/s", "x", "TTFT ms"):
        t.add_column(col, justify="left" if col in ("run", "profile", "mode") else "right")
    for c in table["concurrency"]:
        t.add_column(f"c={c} tok/s" if isinstance(c, int) else f"{c} tok/s", justify="right")
        t.add_column("x", justify="right")
    for r in table["rows"]:
        mark = "*" if r["baseline"] else ""
        flag = "" if r["complete"] else " (incomplete)"
        cells = [
            f"{r['id']}{mark}",
            str(r["run_id"] or "-"),
            str(r["profile"] or "-") + flag,
            str(r["mode"]),
            _f(r["decode_tok_s"], 2),
            _x(r["decode_speedup"], r),
            _f(r["ttft_ms"]),
        ]
        for c in table["concurrency"]:
            lv = r["levels"][str(c)]
            cells += [_f(lv["output_tok_s"]), _x(lv["speedup"], r)]
        t.add_row(*cells)
    return t


def _headline(res: dict[str, Any]) -> str:
    if res.get("decode_tok_s") is not None:
        return f"decode {res['decode_tok_s']:,.2f} tok/s"
    best = max((lv.get("output_tok_s") or 0.0 for lv in res.get("levels") or []), default=0.0)
    return f"max {best:,.1f} out tok/s" if best else "-"


def list_table(rows: list[dict[str, Any]]) -> Table:
    """One line per result: id, date, run, profile, mode, headline, levels, sim, labels."""
    from glmserve.bench.comparable import context, levels_of, sim_speed

    t = Table(title=f"glmserve results ({len(rows)})", title_justify="left")
    for col in ("id", "date", "run", "profile", "mode", "headline", "levels", "complete",
                "sglang", "sim", "labels"):  # fmt: skip
        t.add_column(col, justify="right" if col == "id" else "left")
    for r in rows:
        res, ctx = r["result"], context(r)
        meta = {**(res.get("meta") or {}), **(r.get("meta") or {})}
        speed = sim_speed(r)
        t.add_row(
            str(r["id"]),
            time.strftime("%Y-%m-%d %H:%M", time.gmtime(r["created_at"])),
            str(r.get("run_id") or "-"),
            str(ctx["profile"] or "-"),
            str(res.get("mode")),
            _headline(res),
            ",".join(str(x) for x in levels_of(r)),
            "yes" if res.get("complete") else "NO",
            str(ctx["sglang_version"] or "-"),
            "-" if speed is None else f"x{speed:g}",
            ", ".join(f"{k}={v}" for k, v in (meta.get("labels") or {}).items()),
        )
    return t


# -- sweep ---------------------------------------------------------------------------------


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def print_sweep(sw: Any) -> None:
    """The sweep's table (one row per profile, speedup against the first success), then a
    line per host group, per hint and the simulator-speed note."""
    from glmserve.sweep.summary import speed_note, sweep_rows

    rows = sweep_rows(sw)
    levels = sorted({c for r in rows for c in r["aggregate_tok_s"]})
    table = Table(title=f"sweep {sw.sweep_id}")
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
    note = speed_note(sw)
    if note:
        out.print(note, highlight=False, markup=False)


# -- profile (trace analysis) --------------------------------------------------------------


def _top_table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> Table:
    """One "top N" table of a rank: the given columns, each folding rather than cut."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def print_analysis(analysis: Any, top: int = 8, all_ranks: bool = False) -> None:
    """Rich tables for the first rank (all ranks with ``all_ranks``), one line per other rank,
    then the findings."""
    for i, r in enumerate(analysis.ranks):
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

        def per_step(total_us: float, steps: int = r.steps) -> str:
            return f"{total_us / max(steps, 1) / 1000:.2f}"

        if r.kernels:
            kernels = [
                (k.short_name, k.kind, f"{k.share:.1%}", per_step(k.total_us), str(k.count),
                 k.launched_by)
                for k in r.kernels[:top]
            ]  # fmt: skip
            columns = ("kernel", "kind", "share", "ms/step", "calls", "launched by")
            out.print(_top_table(title + " — top GPU kernels", columns, kernels))
        what = "GPU time of launched kernels" if r.has_gpu else "CPU self time"
        ops = [
            (o.name, o.label, f"{o.share:.1%}", per_step(o.total_us), str(o.count))
            for o in r.ops[:top]
        ]
        columns = ("op", "what", "share", "ms/step", "calls")
        out.print(_top_table(f"{title} — top ops ({what})", columns, ops))
    if not analysis.findings:
        out.print("no findings: no single pattern dominates the decode step")
    for fd in analysis.findings:
        ranks_s = ",".join(str(x) for x in fd.ranks)
        out.print(f"[{fd.severity}] {fd.message} (ranks {ranks_s})", highlight=False, markup=False)
