"""The bench result table and the live progress views (``cli/bench_cmds.py``)."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from glmserve.bench.progress import Progress
from glmserve.cli._app import err
from glmserve.cli.views.common import _f, cell

if TYPE_CHECKING:
    from glmserve.bench.results import BenchResult
    from glmserve.bench.settings import LevelRun


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


def warmup_line(requests: int) -> str:
    """The one line both progress views print when the warmup starts."""
    return f"bench: warmup: {requests} request{'s' if requests != 1 else ''} (not measured)"


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

    def warmup_started(self, requests: int) -> None:
        err.print(warmup_line(requests), highlight=False)

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

    def warmup_started(self, requests: int) -> None:
        err.print(warmup_line(requests), highlight=False)

    def level_finished(self, run: LevelRun) -> None:
        pass

    def close(self) -> None:
        if self.task is not None:
            self.rp.stop()
