"""The sweep's final table and markdown (pure): one row per profile, speedups against the first
successful one, and a note when simulated speeds make figures incomparable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from glmserve.bench.agreement import WRONG_OUTPUT
from glmserve.bench.stats import overlaps
from glmserve.sweep.state import OK

if TYPE_CHECKING:
    from glmserve.sweep.state import Sweep

# --------------------------------------------------------------------------- table (pure)


def sweep_rows(sweep: Sweep) -> list[dict[str, Any]]:
    """The final table: one row per profile, speedup against the first successful profile."""
    from glmserve.sweep.agreement import is_wrong

    base = next(
        (e for e in sweep.entries if e.status == OK and e.decode_tok_s() and not is_wrong(e)),
        None,
    )
    baseline = base.decode_tok_s() if base else None
    base_profile = base.profile if base else None
    rows = []
    for e in sweep.entries:
        tok = e.decode_tok_s() if e.status == OK else None
        diag = e.diagnosis or {}
        diagnosis = ""
        if diag.get("category") or diag.get("root_cause"):
            diagnosis = ": ".join(
                str(x) for x in (diag.get("category"), diag.get("root_cause")) if x
            )
            if diag.get("node_rank") is not None and e.status != OK:
                diagnosis = f"node {diag['node_rank']} ({diag.get('host')}): {diagnosis}"
        elif e.error:
            diagnosis = e.error
        wrong = is_wrong(e)
        if wrong:
            diagnosis = "; ".join((e.output or {}).get("reasons") or []) or diagnosis
        rows.append(
            {
                "profile": e.profile,
                "status": WRONG_OUTPUT if wrong else e.status,
                "run_id": e.run_id,
                "group_id": e.group_id,
                "nodes": [n.get("host") for n in e.nodes or []],
                "diagnosis": diagnosis,
                "hint": diag.get("hint"),
                "decode_tok_s": tok,
                "ttft_ms": e.ttft_ms() if e.status == OK else None,
                "aggregate_tok_s": e.aggregate_tok_s() if e.status == OK else {},
                "speedup": (tok / baseline) if tok and baseline and not wrong else None,
                "baseline": base_profile,
                "output": e.output,
                # a Slurm job's wait in the queue, apart from the profile's own time
                "queued_s": e.queued_s,
                "requeued": list(e.requeued),
                "decode_ci": decode_ci(e) if e.status == OK else None,
                "tie": False,
            }
        )
    best = winner(sweep)
    best_ci = next((r["decode_ci"] for r in rows if r["profile"] == best), None)
    for r in rows:
        # ranked by median; a profile whose interval overlaps the winner's is a tie with it
        if r["profile"] != best and r["status"] == OK and overlaps(r["decode_ci"], best_ci):
            r["tie"] = True
    return rows


def decode_ci(e: Any) -> tuple[float, float] | None:
    """The 95% interval of the entry's decode figure (its decode bench's, else its lowest
    concurrency level's) when its bench was repeated."""
    d = e.decode_result()
    if d and (d.get("ci") or {}).get("decode_tok_s"):
        return tuple(d["ci"]["decode_tok_s"])  # type: ignore[return-value]
    levels = [lv for b in e.bench for lv in b.get("levels", [])]
    if not levels:
        return None
    low = min(levels, key=lambda lv: lv.get("concurrency", 0))
    ci = (low.get("ci") or {}).get("decode_tok_s")
    return tuple(ci) if ci else None  # type: ignore[return-value]


def winner(sweep: Sweep) -> str | None:
    """The fastest profile by decode tok/s among those that succeeded and whose output is not
    WRONG_OUTPUT (a config that computes another model is never a winner), nor, in a probed
    sweep, left unjudged (``output`` with no verdict: not shown to compute the same model)."""
    from glmserve.sweep.agreement import is_wrong

    def judged(e: Any) -> bool:
        return not e.output or e.output.get("verdict") is not None

    ok = [
        e
        for e in sweep.entries
        if e.status == OK and e.decode_tok_s() and not is_wrong(e) and judged(e)
    ]
    return max(ok, key=lambda e: e.decode_tok_s() or 0.0).profile if ok else None


def format_figure(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def render_markdown(sweep: Sweep) -> str:
    """``sweep.md``: the table plus each failure's diagnosis and hint."""
    rows = sweep_rows(sweep)
    levels = sorted({c for r in rows for c in r["aggregate_tok_s"]})
    head = ["profile", "status", "diagnosis", "decode tok/s", "TTFT ms"]
    head += [f"agg tok/s @{c}" for c in levels] + ["speedup"]
    lines = [
        f"# Sweep {sweep.sweep_id}",
        "",
        f"host: {_where(sweep)}{' (simulated)' if sweep.simulate else ''} · "
        f"status: {sweep.status} · bench: {', '.join(sweep.bench) or 'none'}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
    ]
    for r in rows:
        cells = [
            r["profile"],
            r["status"] + (" (tie)" if r["tie"] else ""),
            (r["diagnosis"] or "").replace("|", "\\|")[:120],
            format_figure(r["decode_tok_s"]),
            format_figure(r["ttft_ms"]),
            *[format_figure(r["aggregate_tok_s"].get(c)) for c in levels],
            "-" if r["speedup"] is None else f"{r['speedup']:.2f}x",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    note = speed_note(sweep)
    if note:
        lines += ["", note]
    out_lines = output_lines(sweep)
    if out_lines:
        lines += ["", "## Output agreement", ""] + [f"- {x}" for x in out_lines]
    base = next((r["baseline"] for r in rows if r["baseline"]), None)
    if base:
        lines += ["", f"Speedup is decode tok/s against `{base}`, the first successful profile."]
    groups = [e for e in sweep.entries if e.group_id]
    if groups:
        lines += ["", "## Host groups", ""]
        lines += [
            f"- **{e.profile}**: group {e.group_id}: "
            + ", ".join(
                f"node {n['node_rank']} {n['host']} (run {n['run_id']})" for n in e.nodes or []
            )
            for e in groups
        ]
    hints = [r for r in rows if r["hint"]]
    if hints:
        lines += ["", "## Diagnoses", ""]
        lines += [f"- **{r['profile']}**: {r['diagnosis']} — {r['hint']}" for r in hints]
    findings = [(e.profile, f) for e in sweep.entries for f in (e.trace or {}).get("findings", [])]
    if findings:
        lines += ["", "## Profiler findings", ""]
        lines += [f"- **{p}**: {f['message']}" for p, f in findings]
    return "\n".join(lines) + "\n"


def _where(sweep: Sweep) -> str:
    """Where the sweep ran: its --nodes group, else its host (multi-node profiles name their
    own nodes in the Host groups section)."""
    if sweep.nodes:
        return "nodes " + ", ".join(sweep.nodes)
    return sweep.host or "local"


def speed_note(sweep: Sweep) -> str | None:
    """Simulated sweeps run the clock faster (``--set sim.speed=N``): say so next to figures."""
    if not sweep.simulate:
        return None
    speeds = [
        o.split("=", 1)[1] for o in sweep.options.get("overrides", []) if o.startswith("sim.speed=")
    ]
    if not speeds or speeds[-1] in ("1", "1.0"):
        return "Simulated: figures follow the simulator's cost model of the target box."
    return (
        f"Simulated at sim.speed={speeds[-1]}: absolute figures are {speeds[-1]}x the modeled "
        "box; ratios (speedup) are what carry over."
    )


def output_lines(sweep: Sweep) -> list[str]:
    """One line per probed profile: the reference, its agreement, or WRONG_OUTPUT and why."""
    from glmserve.bench.probe import describe_agreement

    lines = []
    for e in sweep.entries:
        o = e.output
        if not o:
            continue
        if o.get("verdict") == "reference":
            lines.append(f"{e.profile}: the output reference")
        elif o.get("verdict") is None:
            lines.append(f"{e.profile}: output not judged ({o.get('note')})")
        elif "greedy_agreement" in o:
            lines.append(f"{e.profile}: {describe_agreement(o)}")
        else:
            lines.append(f"{e.profile}: {WRONG_OUTPUT}: " + "; ".join(o.get("reasons") or []))
    w = winner(sweep)
    if lines and w:
        lines.append(f"winner: {w} (fastest decode among profiles whose output agrees)")
    ties = [r["profile"] for r in sweep_rows(sweep) if r["tie"]]
    if ties and w:
        lines.append(
            f"tie with {w} (95% intervals overlap, not a measurable difference): " + ", ".join(ties)
        )
    return lines
