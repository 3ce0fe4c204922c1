"""The compare table and the stored-results listing (``cli/results_cmds.py``)."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table

from glmserve.cli.views.common import _f, cell

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
