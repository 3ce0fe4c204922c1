#!/usr/bin/env python3
"""The issue-26 results and targets tables (markdown) from a ``mla_fp8_decode_gpu.py`` JSON.

Why a script: the doc's numbers are read off the committed raw output, not copied by hand.

    python3 benchmarks/mla_fp8_decode_table.py \\
        benchmarks/results/mla_fp8_decode/h200_2026-12-05_run2/bench.json --entry new_cfg5

``--entry``: which of the kernel's entries is the shipped config (``new`` = the default the
run had). Times are the median of the eager CUDA-event timings with a flushed L2, and the
CUDA-graph replay time where the run measured one (in brackets).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

BIG = {(8, 32768), (64, 7680), (256, 1917)}  # >= 100 MB of FP8 KV read


def _us(r: dict, key: str) -> float | None:
    e = r.get(key)
    return e.get("us") if isinstance(e, dict) else None


def _best_sglang(r: dict, tag: str) -> tuple[float, int, dict] | None:
    s = r.get(f"sglang_{tag}_best_splits")
    if not s:
        return None
    e = r[f"sglang_{tag}_s{s}"]
    return e["us"], s, e


def results_table(rows: list[dict], bw: float, entry: str) -> list[str]:
    out = [
        "| heads | batch x ctx | FP8 MB | read once at copy BW (us) | new kernel (us) | % of "
        "copy BW | SGLang 0.5.9 best (splits) | SGLang 0.5.23 best (splits) | whole-pool "
        "cast + FI | gather-cast + FI | max rel err: new / 0.5.9 / 0.5.23 / FI BF16 |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        e = r[entry]
        read = r["fp8_bytes"] / bw * 1e6
        g = f" [{e['graph_us']:.1f}]" if "graph_us" in e else ""
        cells = []
        errs = [f"{e['max_rel_err']:.4f}"]
        for tag in ("0.5.9", "0.5.23"):
            b = _best_sglang(r, tag)
            if b is None:
                cells.append("-")
                errs.append("-")
                continue
            gg = f" [{b[2]['graph_us']:.1f}]" if "graph_us" in b[2] else ""
            cells.append(f"{b[0]:.1f}{gg} ({b[1]})")
            errs.append(f"{b[2]['max_rel_err']:.4f}")
        fi = r.get("fi_gather_cast", {})
        errs.append(f"{fi['max_rel_err']:.4f}" if "max_rel_err" in fi else "-")
        whole, gather = _us(r, "fi_whole_pool"), _us(r, "fi_gather_cast")
        out.append(
            f"| {r['heads']} | {r['batch']} x {r['ctx']} | {r['fp8_bytes'] / 1e6:.0f} | "
            f"{read:.1f} | {e['us']:.1f}{g} | {read / e['us']:.0%} | {cells[0]} | {cells[1]} | "
            f"{whole:.1f} | {gather:.1f} | {' / '.join(errs)} |"
        )
    return out


def _dev(e: dict) -> tuple[float, str]:
    """Device time: the graph replay where measured (eager small shapes are host-bound)."""
    if "graph_us" in e:
        return e["graph_us"], f"{e['us']:.1f} [{e['graph_us']:.1f}]"
    return e["us"], f"{e['us']:.1f}"


def versus_table(rows: list[dict], bw: float, entry: str, other: str) -> list[str]:
    """``entry`` against ``other`` of the same call, shape by shape (graph time where
    measured), with the copy-bandwidth share and SGLang 0.5.23's best."""
    out = [
        f"| heads | batch x ctx | {entry} (us) | {other} (us) | change | % of copy BW "
        f"| SGLang 0.5.23 best (splits) | max rel err |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if entry not in r or other not in r or "us" not in r[entry] or "us" not in r[other]:
            continue
        a, at = _dev(r[entry])
        b, bt = _dev(r[other])
        read = r["fp8_bytes"] / bw * 1e6
        sg = _best_sglang(r, "0.5.23")
        sgt = "-"
        if sg is not None:
            sgt = f"{_dev(sg[2])[1]} ({sg[1]})"
        out.append(
            f"| {r['heads']} | {r['batch']} x {r['ctx']} | {at} | {bt} | {a / b - 1:+.0%} | "
            f"{read / a:.0%} | {sgt} | {r[entry]['max_rel_err']:.4f} |"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", type=Path)
    ap.add_argument("--entry", default="new")
    ap.add_argument("--versus", default="",
                    help="another entry of the same run: a shape-by-shape comparison")
    args = ap.parse_args()
    data = json.loads(args.json.read_text())
    bw = data["env"]["copy_bw_Bps"]
    print(f"copy bandwidth (read + write): {bw / 1e9:.0f} GB/s; config: "
          f"{data['rows'][0][args.entry].get('config')}\n")  # fmt: skip
    if args.versus:
        print("\n".join(versus_table(data["rows"], bw, args.entry, args.versus)))
        return
    print("\n".join(results_table(data["rows"], bw, args.entry)))


if __name__ == "__main__":
    main()
