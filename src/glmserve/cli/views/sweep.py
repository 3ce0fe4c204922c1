"""The sweep summary and the trace-analysis view of ``profile`` (``cli/sweep_cmds.py``)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from glmserve.cli._app import err, out
from glmserve.cli.views.common import cell

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
