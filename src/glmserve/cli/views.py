"""Every rich table and view the verbs print, built from the data the library returns.

Library modules return dicts and dataclasses (a ``BenchResult``, a compare table, sweep rows,
a trace analysis, a deployment's check/launch/stop outcome); how they look on a terminal, and
the ``--json`` shapes of the lifecycle verbs, are decided here, so a verb reads parse -> call
-> render and a new column is one edit in one module. Cells that come from users or logs
(profile names, descriptions, root-cause lines) are ``Text``: data, never rich markup.

A single run and a host group come from the one :class:`~glmserve.deploy.deployment.Deployment`
result; where their shapes differ by contract (``launch --json``: ``{run, verdict}`` against
``{group_id, runs, verdict, stopped}``; group check rows carry their node), it is decided here.

Imported on every start-up by the verb modules, so it imports no stage module at the top:
what it needs from ``bench`` or ``diagnose`` is imported where it is used.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from glmserve.bench.progress import Progress
from glmserve.cli._app import err, is_interactive, out
from glmserve.errors import (
    JOB_END_ERRORS,
    DiagnosedError,
    GlmserveError,
    RunNotServing,
    ServerCrashed,
    ServerNotReady,
)

if TYPE_CHECKING:
    from glmserve.bench.results import BenchResult
    from glmserve.bench.runner import LevelRun
    from glmserve.diagnose import Diagnosis


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain(value: Any) -> str:
    """``str(value)`` safe for a terminal: control characters (an ANSI escape in a label
    clears the screen) are shown as ``\\xNN``, not sent."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def cell(value: Any, style: str = "") -> Text:
    """A table cell of data: never read as rich markup (a label ``[/bad]`` made every
    ``results`` listing fail with exit 70) and free of control characters."""
    return Text(plain(value), style=style)


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
        table.add_row(*(cell(c) for c in cells))
    return table


# -- diagnose ------------------------------------------------------------------------------


def render_diagnosis(diag: Diagnosis, label: str) -> Text:
    """The human view: one screen, log text never interpreted as rich markup."""
    from glmserve.diagnose import State

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


def _pct(d: dict[str, Any] | None, digits: int = 1, keys: tuple[str, ...] = ()) -> str:
    if not d:
        return "-"
    return "/".join(_f(d.get(k), digits) for k in keys or ("p50", "p90", "p99"))


def _pkeys(res: BenchResult) -> tuple[str, ...]:
    """The percentiles the narrow columns show: p50/p90/p99 where the result has them (the
    default ``--percentiles``), else up to three of those it has (``--percentiles 50,99.9``
    shows p50/p99.9, not p50/-/-)."""
    have: list[str] = []
    for lv in res.levels:
        for k in lv.get("ttft_ms") or {}:
            if k.startswith("p") and k not in have:
                have.append(k)
    have.sort(key=lambda k: float(k[1:]))
    if {"p50", "p90", "p99"} <= set(have) or not have:
        return ("p50", "p90", "p99")
    return tuple(have) if len(have) <= 3 else (have[0], have[len(have) // 2], have[-1])


def _pct_head(name: str, keys: tuple[str, ...]) -> str:
    return f"{name} " + "/".join(k if i == 0 else k[1:] for i, k in enumerate(keys))


# (header, priority): lower priority numbers survive a narrow terminal first. The latency
# headers are for the default percentiles; ``_pkeys`` respells them for others.
COLUMNS: tuple[tuple[str, int], ...] = (
    ("conc", 0), ("output tok/s", 1), ("TTFT ms p50/90/99", 2), ("TPOT ms p50/90/99", 3),
    ("ok/err", 4), ("decode tok/s p50", 5), ("req/s", 6), ("goodput req/s", 7),
    ("ITL ms p50/90/99", 8), ("E2E ms p50", 9), ("conc achieved", 10), ("server tok/s", 11),
    ("queue ms p50", 12), ("tok/J", 13),
)  # fmt: skip
_PCT_COLUMNS = {"TTFT ms p50/90/99": ("TTFT ms", "ttft_ms", 1),
                "TPOT ms p50/90/99": ("TPOT ms", "tpot_ms", 2),
                "ITL ms p50/90/99": ("ITL ms", "itl_ms", 2)}  # fmt: skip


def _cells(lv: dict[str, Any], keys: tuple[str, ...] = ("p50", "p90", "p99")) -> dict[str, str]:
    from glmserve.bench.results import level_label

    srv = lv.get("server") or {}
    srv_tok = srv.get("generation_tok_s") or srv.get("last_gen_throughput")
    cells = {
        "conc": level_label(lv),
        "output tok/s": _f(lv.get("output_tok_s")),
        "decode tok/s p50": _f((lv.get("decode_tok_s") or {}).get("p50"), 2),
        "E2E ms p50": _f((lv.get("e2e_ms") or {}).get("p50"), 0),
        "queue ms p50": _f((lv.get("queue_ms") or {}).get("p50"), 2),
        "ok/err": f"{lv.get('completed')}/{lv.get('errors')}",
        "server tok/s": _f(srv_tok),
        "req/s": _f(lv.get("request_throughput"), 2),
        "goodput req/s": _f(lv.get("goodput"), 2),
        "conc achieved": _f(lv.get("achieved_concurrency")),
        # GPU telemetry (bench.gpu_telemetry); "!" marks a level whose clocks throttled
        "tok/J": _f(lv.get("output_tok_per_j"), 3) + ("!" if lv.get("gpu_throttled") else ""),
    }
    for col, (_name, key, digits) in _PCT_COLUMNS.items():
        cells[col] = _pct(lv.get(key), digits, keys)
    return cells


def _has_errors(res: BenchResult) -> bool:
    return any(int(lv.get("errors") or 0) for lv in res.levels)


def table_columns(res: BenchResult, wide: bool = False, width: int = 80) -> list[str]:
    """The narrow table's columns: by priority while the table fits ``width`` (goodput only
    when SLOs were given; ``ok/err`` always when a request failed, so errors are never
    hidden by a narrow terminal); all of them with ``wide``."""
    keys = _pkeys(res)
    rows = [_cells(lv, keys) for lv in res.levels]
    names = [n for n, _ in COLUMNS]
    if not any(lv.get("goodput") is not None for lv in res.levels):
        names.remove("goodput req/s")
    if not any(lv.get("output_tok_per_j") is not None for lv in res.levels):
        names.remove("tok/J")
    if wide:
        return names

    def col_w(n: str) -> int:
        return max([len(n), *[len(r[n]) for r in rows]]) + 3  # padding and border

    order = sorted(COLUMNS, key=lambda c: c[1])
    if _has_errors(res):  # right after the level: a table without it hides the failures
        order = [c for c in order if c[0] in ("conc", "ok/err")] + [
            c for c in order if c[0] not in ("conc", "ok/err")
        ]
    chosen: list[str] = []
    used = 1
    for n, _ in order:
        if n in names and used + col_w(n) <= width:
            chosen.append(n)
            used += col_w(n)
    return [n for n in names if n in chosen]


# What ``--wide`` shows: every figure a level holds. Throughputs and counts first (key,
# header, digits), then every statistic (percentiles, mean, std) of every latency.
_WIDE_FIGURES = (
    ("output_tok_s", "output tok/s", 1), ("output_tok_s_full", "output tok/s full", 1),
    ("input_tok_s", "input tok/s", 1), ("total_tok_s", "total tok/s", 1),
    ("request_throughput", "req/s", 2), ("goodput", "goodput req/s", 2),
    ("achieved_concurrency", "conc achieved", 1), ("max_concurrency_seen", "max conc seen", 0),
    ("achieved_request_rate", "rate achieved", 2),
    ("output_tok_per_j", "tok/J", 3), ("power_w_mean", "GPU W", 0), ("energy_j", "GPU J", 0),
)  # fmt: skip
_WIDE_STATS = (("ttft_ms", "TTFT ms", 1), ("tpot_ms", "TPOT ms", 2), ("itl_ms", "ITL ms", 2),
               ("e2e_ms", "E2E ms", 0), ("queue_ms", "queue ms", 2),
               ("decode_tok_s", "decode tok/s", 2))  # fmt: skip


def _stat_order(k: str) -> tuple[int, float]:
    return (0, float(k[1:])) if k.startswith("p") and k[1:].replace(".", "").isdigit() else (
        1, 0.0 if k == "mean" else 1.0)  # fmt: skip


def wide_cells(lv: dict[str, Any]) -> dict[str, str]:
    """Every figure of one level, by header: what ``--wide`` and nothing less shows."""
    from glmserve.bench.results import level_label

    cells = {"conc": level_label(lv), "ok/err": f"{lv.get('completed')}/{lv.get('errors')}"}
    for key, head, digits in _WIDE_FIGURES:
        if lv.get(key) is not None:
            cells[head] = _f(lv[key], digits)
    for key, head, digits in _WIDE_STATS:
        d = lv.get(key) or {}
        for st in sorted(d, key=_stat_order):
            cells[f"{head} {st}"] = _f(d[st], digits)
    srv = lv.get("server") or {}
    srv_tok = srv.get("generation_tok_s") or srv.get("last_gen_throughput")
    cells["server tok/s"] = _f(srv_tok)
    return cells


def _wide_table(res: BenchResult, title: Text, width: int) -> Table:
    """All figures, untruncated: one column per figure where that fits ``width``, else one
    row per figure and one column per level (a terminal too narrow never cuts a value)."""
    rows = [wide_cells(lv) for lv in res.levels]
    heads: list[str] = []
    for r in rows:
        heads += [h for h in r if h not in heads]
    need = 1 + sum(max([len(h), *[len(r.get(h, "-")) for r in rows]]) + 3 for h in heads)
    t = Table(title=title, title_justify="left")
    if need <= width:
        for h in heads:
            t.add_column(h, justify="right", no_wrap=True)
        for r in rows:
            t.add_row(*[r.get(h, "-") for h in heads])
        return t
    t.add_column("figure", justify="left", no_wrap=True)
    for r in rows:
        t.add_column(r["conc"], justify="right", no_wrap=True)
    for h in heads[1:]:
        t.add_row(h, *[r.get(h, "-") for r in rows])
    return t


def render_table(res: BenchResult, wide: bool = False, width: int = 80) -> Table:
    """The final table: one row per level, headline in the title. Fits ``width`` columns by
    leaving out the lowest-priority columns; ``wide``: every figure and percentile the
    result holds (turned to one row per figure if it would not fit)."""
    title = f"glmserve bench ({res.mode})"
    if res.mode == "decode":
        title += f": decode {_f(res.decode_tok_s, 2)} tok/s, TTFT {_f(res.ttft_ms)} ms"
    if not res.complete:
        title += f"  [INCOMPLETE: {res.stopped}]"
    if wide:
        return _wide_table(res, cell(title), width)
    keys = _pkeys(res)
    cols = table_columns(res, wide, width)
    t = Table(title=cell(title), title_justify="left")
    for col in cols:
        head = col
        if col in _PCT_COLUMNS and keys != ("p50", "p90", "p99"):
            head = _pct_head(_PCT_COLUMNS[col][0], keys)
        t.add_column(head, justify="right")
    for lv in res.levels:
        cells = _cells(lv, keys)
        t.add_row(*[cells[c] for c in cols])
    if len(cols) < len(table_columns(res, wide=True)):
        t.caption = "some columns left out to fit; --wide shows all"
    return t


def sweep_line(sweep: dict[str, Any]) -> str:
    """One line saying where a rate sweep found saturation."""
    thr = sweep.get("max_request_throughput")
    top = f"{thr:.2f} req/s all at once" if thr else "unknown maximum"
    if sweep.get("rate") is None:
        return f"rate sweep: saturated at every rate tried ({top})"
    return f"rate sweep: kept up up to {sweep['rate']:g} req/s offered ({top})"


def _rate_level(run: LevelRun) -> str:
    """An open-loop level by its offered rate ("rate 5 req/s, max concurrency 8"), not its
    concurrency, which is only a cap (0: none)."""
    return _level_name(run.concurrency, run.rate)


def _level_name(concurrency: int, rate: float | None) -> str:
    if rate is None:
        return f"concurrency {concurrency}"
    shown = "inf" if math.isinf(rate) else f"{rate:g}"
    cap = f", max concurrency {concurrency}" if concurrency else ""
    return f"rate {shown} req/s{cap}"


class PlainProgress(Progress):
    """CI: one line per level start/end and one every few seconds, no control characters."""

    def __init__(self, every: float = 5.0) -> None:
        self.every = every
        self.last = 0.0
        self.total: int | None = None

    def level_started(
        self, concurrency: int, total: int | None, duration: float | None, rate: float | None = None
    ) -> None:
        self.total = total
        self.last = time.monotonic()
        what = f"{total} requests" if total is not None else f"{duration:g} s"
        err.print(f"bench: {_level_name(concurrency, rate)}: {what}", highlight=False)

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
        level = f"concurrency {run.concurrency}" if run.rate is None else _rate_level(run)
        err.print(
            f"bench: {level}: {len(run.records)} requests, {errors} errors{note}",
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

    def level_started(
        self, concurrency: int, total: int | None, duration: float | None, rate: float | None = None
    ) -> None:
        if self.task is None:
            self.rp.start()
        conc = concurrency if rate is None else f"{concurrency or 'inf'} r={rate:g}"
        self.task = self.rp.add_task("bench", total=total, conc=conc, rate="-", errors=0)

    def update(self, done: int, errors: int, tokens: int, elapsed: float) -> None:
        rate = f"{tokens / elapsed:,.1f}" if elapsed > 0 else "-"
        self.rp.update(self.task, completed=done, rate=rate, errors=errors)

    def level_finished(self, run: LevelRun) -> None:
        pass

    def close(self) -> None:
        if self.task is not None:
            self.rp.stop()


# -- compare and stored results ------------------------------------------------------------


def _x(v: float | None, row: dict[str, Any], flag: str | None = None) -> str:
    """A speedup cell; an incomparable or incomplete row, or a level either side never
    filled, says "n/c" instead of a number (the lines under the table say why)."""
    if not row.get("comparable", True) or flag:
        return "n/c"
    return _f(v, 2)


def render_compare(table: dict[str, Any]) -> Table:
    """The comparison table: decode tok/s and output tok/s per level, each with speedup."""
    t = Table(
        title=cell(f"glmserve compare (baseline: result {table['baseline']})"),
        title_justify="left",
    )
    for col in ("result", "run", "profile", "mode", "decode tok/s", "x", "TTFT ms"):
        t.add_column(col, justify="left" if col in ("run", "profile", "mode") else "right")
    # tokens per joule only where some result has GPU telemetry (bench.gpu_telemetry)
    tpj = any("output_tok_per_j" in lv for r in table["rows"] for lv in r["levels"].values())
    for c in table["concurrency"]:
        t.add_column(f"c={c} tok/s" if isinstance(c, int) else f"{c} tok/s", justify="right")
        t.add_column("x", justify="right")
        if tpj:
            t.add_column("tok/J", justify="right")
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
            cells += [_f(lv["output_tok_s"]), _x(lv["speedup"], r, lv.get("flag"))]
            if tpj:
                cells.append(_f(lv.get("output_tok_per_j"), 3))
        t.add_row(*(cell(c) for c in cells))
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
        cells = (
            r["id"],
            time.strftime("%Y-%m-%d %H:%M", time.gmtime(r["created_at"])),
            r.get("run_id") or "-",
            ctx["profile"] or "-",
            res.get("mode"),
            _headline(res),
            ",".join(str(x) for x in levels_of(r)),
            "yes" if res.get("complete") else "NO",
            ctx["sglang_version"] or "-",
            "-" if speed is None else f"x{speed:g}",
            ", ".join(f"{k}={v}" for k, v in (meta.get("labels") or {}).items()),
        )
        t.add_row(*(cell(c) for c in cells))
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
            r["status"] + (" (tie)" if r.get("tie") else ""),
            _short(r["diagnosis"]),
            f(r["decode_tok_s"]),
            f(r["ttft_ms"]),
            *[f(r["aggregate_tok_s"].get(c)) for c in levels],
            "-" if r["speedup"] is None else f"{r['speedup']:.2f}x",
        )
        table.add_row(*(cell(c) for c in cells))  # data, never rich markup
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
    from glmserve.sweep.summary import output_lines

    for line in output_lines(sw):
        out.print(line, highlight=False, markup=False)
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


# -- lifecycle verbs: check, launch, status, runs, logs, stop ----------------------------

_COLOR = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


def fmt_s(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def say(msg: str) -> None:
    """A progress line on stderr, printed as it is."""
    err.print(msg, highlight=False, markup=False)


def note(msg: str) -> None:
    """An aside on stderr, in parentheses (``logs``: a node ended, a connection was lost)."""
    err.print(f"({msg})", highlight=False, markup=False)


# -- check ---------------------------------------------------------------------------------------
def check_json(plan: Any, res: Any) -> dict[str, Any]:
    if not plan.grouped:
        rows = [r.to_dict() for r in res.rows]
        return {"host": plan.nodes[0].host.name, "profile": plan.profile, "rows": rows}
    return {
        "profile": plan.profile,
        "nodes": plan.names,
        "dist_init_addr": plan.dist_init_addr,
        "rows": [{**r.to_dict(), "node": r.node, "host": r.host} for r in res.rows],
    }


def print_check(plan: Any, res: Any) -> None:
    """The rows as a table (with a node column for a group) on stdout."""
    where = f"nodes {', '.join(plan.names)}" if plan.grouped else plan.nodes[0].host.name
    table = Table(title=Text(f"check {plan.profile} on {where}"))
    for c in (
        ("node", "check", "status", "detail") if plan.grouped else ("check", "status", "detail")
    ):
        table.add_column(c)
    for r in res.rows:
        cells = [Text(r.name), Text(r.status, style=_COLOR[r.status]), Text(r.detail)]
        if plan.grouped:
            cells.insert(0, Text("all" if r.node is None else f"{r.node} {r.host}"))
        table.add_row(*cells)
    out.print(table)


def blocking_error(res: Any) -> GlmserveError | None:
    """The error naming every blocking check (and its node, in a group); None: none."""
    if not res.blocking:
        return None
    where = ", ".join(
        f"{r.name}" + ("" if r.node is None else f" (node {r.node} {r.host})") for r in res.blocking
    )
    return GlmserveError(f"{len(res.blocking)} blocking check(s): {where}")


# -- launch --------------------------------------------------------------------------------------
def launched(dep: Any) -> None:
    """The line naming what was started (after its id on stdout)."""
    if not dep.grouped:
        run = dep.runs[0]
        say(
            f"run {run.run_id}: {dep.plan.profile} on {run.host}:{run.port}, pid {run.pid}, "
            f"log {run.run_dir}/server.log"
        )
        return
    names = ", ".join(f"{r.meta['node_rank']}:{r.host}" for r in dep.runs)
    say(f"group {dep.group_id}: {dep.plan.profile} on nodes {names}")


def launch_json(
    dep: Any, verdict: Any = None, stopped: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """``launch --json``: ``{run, verdict}`` for a single run, ``{group_id, runs, verdict,
    stopped}`` for a group; verdict None with ``--no-wait``."""
    runs = [r.to_dict() for r in dep.records()]
    v: dict[str, Any] | None = None
    if verdict is not None:
        d = verdict.decisive
        if dep.grouped:
            rank = verdict.failing_rank
            v = {
                "state": verdict.state,
                "failing_node": rank,
                "failing_host": None if rank is None else dep.runs[rank].host,
                "elapsed_s": round(verdict.elapsed_s, 2),
                **d.diagnosis.to_dict(),
            }
        else:
            v = {
                "state": d.state,
                "elapsed_s": round(d.elapsed_s, 2),
                "reconnects": d.reconnects,
                **d.diagnosis.to_dict(),
            }
    if v is not None and verdict.decisive.state == "STOPPED":
        v["state"] = "STOPPED"  # the log's phase stays in "phase"
    if not dep.grouped:
        return {"run": runs[0], "verdict": v}
    data = {"group_id": dep.group_id, "runs": runs, "verdict": v}
    if verdict is not None:
        data["stopped"] = stopped or []
    return data


_SGLANG_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]{0,40}\]\s*")


def brief_log_line(line: str, width: int) -> str:
    """A log line for a progress display: SGLang's ``[date time TPn]`` prefix dropped (the
    display has its own clock), the message kept from its start and cut at ``width``."""
    text = _SGLANG_PREFIX.sub("", line.strip())
    if not text:
        return "(no log line yet)"
    return text if len(text) <= width else text[: width - 1] + "…"


class _Progress:
    """One run's live phase / elapsed / last line: rich on a TTY, plain lines on change."""

    def __init__(self) -> None:
        self.live: Any = None
        self.last_state = ""
        self.last_note = ""

    def __enter__(self) -> _Progress:
        if is_interactive():
            from rich.live import Live

            self.live = Live(Text(""), console=err, refresh_per_second=4, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def __call__(self, _rank: int, tick: Any) -> None:
        line = brief_log_line(tick.last_line, 140)
        if self.live is not None:
            text = Text.assemble(
                (f"{tick.state:<16}", "bold cyan"),
                f" {fmt_s(tick.elapsed_s):>7}  ",
                (line, "dim"),
                (f"\n{tick.note}" if tick.note else "", "yellow"),
            )
            self.live.update(text)
            return
        if tick.state != self.last_state or (tick.note and tick.note != self.last_note):
            msg = f"[{fmt_s(tick.elapsed_s)}] {tick.state}: {line}"
            if tick.note:
                msg += f" ({tick.note})"
            err.print(msg, highlight=False, markup=False)
            self.last_state, self.last_note = tick.state, tick.note


@contextmanager
def watch_progress(dep: Any) -> Iterator[Any]:
    """The ``on_tick`` for a launch's watch: a single run's live progress, or a line each
    time a group's node changes phase."""
    if not dep.grouped:
        with _Progress() as progress:
            yield progress
        return
    last: dict[int, str] = {}

    def tick(rank: int, t: Any) -> None:
        if last.get(rank) != t.state:
            last[rank] = t.state
            say(
                f"[{fmt_s(t.elapsed_s)}] node {rank}: {t.state}: {brief_log_line(t.last_line, 120)}"
            )

    yield tick


def keeps_running(dep: Any) -> str:
    """What is left running when the watch ends early, and how to deal with it."""
    if dep.grouped:
        return f"group {dep.group_id} keeps running; stop it with `glmserve stop {dep.group_id}`"
    return _how_to(dep.id)


def _how_to(run_id: str) -> str:
    return (
        f"the server keeps running (run {run_id} is recorded): watch it with "
        f"`glmserve logs {run_id} -f` or `glmserve status`, stop it with `glmserve stop {run_id}`"
    )


def _failure(result: Any, run_id: str) -> GlmserveError:
    """Print a failed watch's diagnosis and return its error (exit 3 crashed, 4 stalled)."""
    d = result.diagnosis
    if result.state == "STOPPED":
        err.print(
            f"[yellow]STOPPED[/yellow] by `glmserve stop` in phase {escape(str(d.phase.value))}",
            highlight=False,
        )
        return RunNotServing(
            f"run {run_id} was stopped (glmserve stop) in phase {d.phase.value}, before READY"
        )
    if result.state in JOB_END_ERRORS:  # a Slurm job ended by the scheduler
        err.print(f"[red]{result.state}[/red]: {escape(d.root_cause or '')}", highlight=False)
        if d.hint:
            err.print(f"hint: {d.hint}", highlight=False, markup=False)
        msg = f"run {run_id} {result.state.lower()}: {d.root_cause}"
        return JOB_END_ERRORS[result.state](msg, diagnosis=d)
    if result.state in ("CRASHED", "EXITED"):
        cat = d.category.value if d.category else result.state
        where = f" at log line {d.line}" if d.line else ""
        head = f"[red]{result.state}[/red]" + (f" {escape(str(cat))}" if d.category else "")
        err.print(f"{head}{where}: {escape(d.root_cause or '')}", highlight=False)
        if d.hint:
            hint = d.hint.replace("glmserve logs RUN ", f"glmserve logs {run_id} ")
            err.print(f"hint: {hint}", highlight=False, markup=False)
        return ServerCrashed(f"run {run_id} {result.state.lower()}: {cat}", diagnosis=d)
    err.print(
        f"[yellow]{result.state}[/yellow] in phase {escape(str(d.phase.value))}", highlight=False
    )
    if d.hint:
        err.print(f"hint: {d.hint}", highlight=False, markup=False)
    what = "timed out" if result.state == "TIMEOUT" else "stalled"
    return ServerNotReady(
        f"run {run_id} {what} in phase {d.phase.value}; {_how_to(run_id)}", diagnosis=d
    )


def verdict_error(dep: Any, verdict: Any) -> GlmserveError | None:
    """None when READY; else the failure printed and its error (a group's names the node)."""
    if verdict.state == "READY":
        return None
    rank = verdict.failing_rank
    bad = dep.runs[rank or 0]
    error = _failure(verdict.decisive, bad.run_id)
    if not dep.grouped:
        return error
    msg = f"group {dep.group_id}: node {rank} ({bad.host}) {error}; every node stopped"
    if isinstance(error, DiagnosedError):
        return type(error)(msg, diagnosis=verdict.decisive.diagnosis)
    return type(error)(msg)


def ready(dep: Any, verdict: Any) -> None:
    """The READY line: where it serves (and on how many ranks a patch is active)."""
    head = dep.runs[0]
    if dep.grouped:
        err.print(
            f"[green]READY[/green] after {fmt_s(verdict.elapsed_s)}: group {escape(dep.id)}, "
            f"{len(dep.runs)} nodes, serving on {escape(head.host)}:{head.port} "
            f"(run {escape(head.run_id)})",
            highlight=False,
        )
        return
    spec = dep.plan.nodes[0].spec
    patch = verdict.decisive.diagnosis.patch_active or f"0/{spec.tp_size}"
    err.print(
        f"[green]READY[/green] after {fmt_s(verdict.elapsed_s)}: {escape(head.run_id)} on "
        f"{escape(head.host)}:{head.port}"
        + (f"; patch active on {escape(str(patch))} ranks" if spec.patches else ""),
        highlight=False,
    )


# -- status / runs -------------------------------------------------------------------------------
def print_status(rows: list[dict[str, Any]]) -> None:
    if not rows:
        err.print("no live runs (glmserve runs lists past ones)")
        return
    table = Table()
    for c in ("run", "state", "uptime", "host", "profile", "port", "pid", "note"):
        table.add_column(c)
    for row in rows:
        what = row.get("error") or ""
        if row.get("identity_problems"):  # READY, but another server answers on its port
            what = "NOT THIS RUN'S SERVER: " + "; ".join(row["identity_problems"]) + " " + what
        if row.get("group_id"):
            what = f"group {row['group_id']} node {row['node_rank']} " + what
        if row.get("patch_active"):
            what = f"patch active on {row['patch_active']} ranks " + what
        if row.get("category"):
            what = f"{row['category']}: {row.get('root_cause') or ''} " + what
        if row.get("group_problem"):  # first: a READY node of a broken group is no server
            what = f"NOT SERVING: {row['group_problem']}; " + what
        cells = (
            row["run_id"],
            row["state"],
            fmt_s(row["uptime_s"]),
            row["host"],
            row["profile"],
            str(row["port"]),
            str(row["pid"] or ""),
            what.strip()[:200],
        )
        table.add_row(*(cell(c) for c in cells))  # data, never rich markup
    out.print(table)


def print_runs(records: list[Any]) -> None:
    table = Table()
    for c in ("run", "created", "state", "host", "profile", "port", "launcher", "category"):
        table.add_column(c)
    for r in records:
        cells = (
            r.run_id,
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_at)),
            r.state,
            r.host,
            r.profile,
            str(r.port),
            r.launcher,
            r.category or "",
        )
        table.add_row(*(cell(c) for c in cells))  # data, never rich markup
    out.print(table)


# -- stop ----------------------------------------------------------------------------------------
def print_stop(reports: list[dict[str, Any]], as_table: bool) -> None:
    """One line for one run, else a table."""
    if as_table:
        _stop_table(reports)
    else:
        say(_stop_line(reports[0]))


def warn_unrecorded(reports: list[dict[str, Any]]) -> None:
    """A run stopped whose stop the store could not record (a full disk, say)."""
    for rep in reports:
        if rep["ok"] and not rep.get("recorded", True):
            say(f"warning: {rep['run_id']} stopped but not recorded: {rep['store_error']}")


def _stop_outcome(rep: dict[str, Any]) -> str:
    if not rep["ok"]:
        return f"FAILED: {rep['error']}"
    if not rep["signalled"]:
        return f"{rep.get('note', 'not running')}; nothing left"
    killed = f", killed {rep['killed']}" if "killed" in rep else ""
    return f"stopped: signalled {rep['signalled']}{killed}; nothing left"


def _stop_line(rep: dict[str, Any]) -> str:
    node = f" (group {rep['group_id']} node {rep['node_rank']})" if rep.get("group_id") else ""
    return f"{rep['run_id']}{node} on {rep['host']}: {_stop_outcome(rep)}"


def stop_title(reports: list[dict[str, Any]]) -> str:
    """``stop: 1 stopped, 1 not running, 1 FAILED (3 runs)``: a run whose processes had
    already ended was not stopped by this command, so it is not counted as stopped."""
    stopped = sum(1 for r in reports if r["ok"] and r["signalled"])
    ended = sum(1 for r in reports if r["ok"] and not r["signalled"])
    failed = len(reports) - stopped - ended
    parts = [f"{stopped} stopped"]
    if ended:
        parts.append(f"{ended} not running")
    if failed:
        parts.append(f"{failed} FAILED")
    return f"stop: {', '.join(parts)} ({len(reports)} run{'s' if len(reports) != 1 else ''})"


def _stop_table(reports: list[dict[str, Any]]) -> None:
    """One row per run tried by ``stop --all`` / a group stop (on stderr, like the lines)."""
    if not reports:
        err.print("no live runs to stop")
        return
    table = Table(title=Text(stop_title(reports)))
    for c in ("run", "host", "node", "outcome"):
        table.add_column(c)
    for rep in reports:
        node = f"{rep['group_id']}:{rep['node_rank']}" if rep.get("group_id") else ""
        style = "red" if not rep["ok"] else ""
        cells = (rep["run_id"], rep["host"], node, _stop_outcome(rep))
        table.add_row(*(cell(c, style) for c in cells))  # data, never markup
    err.print(table)
