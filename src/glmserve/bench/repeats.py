"""``bench --repeat N``: the same bench N times on the same server, every repeat stored, the
figures the median of the repeats with a 95% bootstrap interval (``bench.stats``).

The repeats run one after another, each a whole pass over the levels (run-major: c=1,4,16
then c=1,4,16 again), so slow drift of the box spreads over every level rather than landing on
one; only the first warms up. The merged result keeps its usual shape (``levels``,
``decode_tok_s``, ``ttft_ms``: medians, so every reader of a result reads medians) plus:

* ``repeats``: each repeat's own levels and headline figures, as measured;
* ``ci``: the headline's 95% intervals, and each level's in ``level["ci"]``;
* ``repeat_values``: the per-repeat values those intervals were drawn from (``compare``
  bootstraps speedup intervals from them).

``--gate-on lower`` checks a gate on the interval's pessimistic bound (the lower bound of a
throughput, the upper bound of a TTFT) instead of the median.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from glmserve.bench.stats import METHOD, median, median_ci
from glmserve.errors import ConfigError

GATE_ON = ("median", "lower")
COUNTS = ("requests", "completed", "errors")
MAX_REPEAT = 100


def check_repeat(repeat: int, gate_on: str, rate_sweep: Any = None) -> None:
    if not 1 <= repeat <= MAX_REPEAT:
        raise ConfigError(f"--repeat: expected 1..{MAX_REPEAT}, got {repeat}")
    if gate_on not in GATE_ON:
        raise ConfigError(f"--gate-on: expected median or lower, got {gate_on!r}")
    if repeat > 1 and rate_sweep is not None:
        raise ConfigError("--repeat with --rate-sweep: the sweep picks its rates from one pass")


def _p50(d: Any) -> float | None:
    return d.get("p50") if isinstance(d, dict) else None


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def merge_levels(levels: list[dict[str, Any]]) -> dict[str, Any]:
    """One level measured in several repeats -> medians, summed counts, intervals."""
    out = copy.deepcopy(levels[0])
    for key, v in levels[0].items():
        if key in COUNTS:
            out[key] = sum(int(lv.get(key) or 0) for lv in levels)
        elif key == "max_concurrency_seen":
            seen = [lv.get(key) for lv in levels if lv.get(key) is not None]
            out[key] = min(seen) if seen else v
        elif key in ("concurrency", "request_rate", "workers"):
            continue
        elif _is_num(v):
            out[key] = median([lv.get(key) for lv in levels if _is_num(lv.get(key))])
        elif isinstance(v, dict):
            for sub, sv in v.items():
                if _is_num(sv):
                    vals = [(lv.get(key) or {}).get(sub) for lv in levels]
                    out[key][sub] = median([x for x in vals if _is_num(x)])
    if any(lv.get("gpu_throttled") for lv in levels):  # throttled in any repeat (telemetry)
        out["gpu_throttled"] = True
    contended = next((lv["contended"] for lv in levels if lv.get("contended")), None)
    if contended:
        out["contended"] = contended
    warnings = [w for lv in levels for w in lv.get("warnings") or []]
    if warnings:
        out["warnings"] = list(dict.fromkeys(warnings))
    samples = [s for lv in levels for s in lv.get("error_samples") or []]
    if "error_samples" in out:
        out["error_samples"] = samples[:5]
    values = {
        "output_tok_s": [lv.get("output_tok_s") for lv in levels],
        "decode_tok_s": [_p50(lv.get("decode_tok_s")) for lv in levels],
        "ttft_ms": [_p50(lv.get("ttft_ms")) for lv in levels],
    }
    values = {k: [x for x in vs if _is_num(x)] for k, vs in values.items()}
    out["repeats"] = len(levels)
    out["repeat_values"] = values
    out["ci"] = {"method": METHOD, **{k: median_ci(vs) for k, vs in values.items()}}
    return out


def merge(results: list[Any]) -> Any:
    """BenchResults of the repeats -> one BenchResult (the first's settings, server, meta)."""
    from glmserve.bench.results import BenchResult

    first: BenchResult = results[0]
    n = len(results)
    by_index = [
        [r.levels[i] for r in results if i < len(r.levels)] for i in range(len(first.levels))
    ]
    levels = [merge_levels(lvs) for lvs in by_index if lvs]
    dec = [r.decode_tok_s for r in results if r.decode_tok_s is not None]
    ttft = [r.ttft_ms for r in results if r.ttft_ms is not None]
    stopped = next((r.stopped for r in results if r.stopped), None)
    res = copy.copy(first)
    res.levels = levels
    res.complete = all(r.complete for r in results)
    res.stopped = stopped
    res.decode_tok_s = median(dec)
    res.ttft_ms = median(ttft)
    res.notes = list(dict.fromkeys(note for r in results for note in r.notes))
    res.repeats = [
        {
            "decode_tok_s": r.decode_tok_s,
            "ttft_ms": r.ttft_ms,
            "complete": r.complete,
            "stopped": r.stopped,
            "levels": r.levels,
        }
        for r in results
    ]
    res.ci = {
        "method": METHOD,
        "repeats": n,
        "decode_tok_s": median_ci(dec),
        "ttft_ms": median_ci(ttft),
        "repeat_values": {"decode_tok_s": dec, "ttft_ms": ttft},
    }
    return res


def gate_view(res: Any, gate_on: str) -> Any:
    """The result the gates read: itself (median), or its intervals' pessimistic bounds."""
    if gate_on != "lower" or not res.ci:
        return res
    view = copy.deepcopy(res)
    if res.ci.get("decode_tok_s"):
        view.decode_tok_s = res.ci["decode_tok_s"][0]
    if res.ci.get("ttft_ms"):
        view.ttft_ms = res.ci["ttft_ms"][1]
    for lv in view.levels:
        ci = lv.get("ci") or {}
        if ci.get("output_tok_s"):
            lv["output_tok_s"] = ci["output_tok_s"][0]
        if ci.get("decode_tok_s") and isinstance(lv.get("decode_tok_s"), dict):
            lv["decode_tok_s"]["p50"] = ci["decode_tok_s"][0]
        if ci.get("ttft_ms") and isinstance(lv.get("ttft_ms"), dict):
            lv["ttft_ms"]["p50"] = ci["ttft_ms"][1]
    return view


def run_repeated(
    settings: Any,
    run_id: str | None,
    gates: Any,
    progress: Any,
    labels: dict[str, str] | None = None,
    probe: Any = None,
    repeat: int = 1,
    gate_on: str = "median",
    store_result: bool = True,
    validated: bool = False,
) -> Any:
    """``run_bench`` ``repeat`` times on one server, merged and stored once (a BenchOutcome).

    A repeat that is interrupted, fails or is incomplete ends the series: what was measured
    is merged, stored and reported as that repeat's outcome says."""
    from glmserve.bench.results import evaluate_gates
    from glmserve.bench.session import BenchOutcome, Gates, run_bench

    if not validated:
        check_repeat(repeat, gate_on, getattr(settings, "rate_sweep", None))
    if repeat == 1 and gate_on == "median":
        return run_bench(
            settings, run_id, gates, progress, store_result=store_result, labels=labels,
            probe=probe, validated=validated,
        )  # fmt: skip
    outcomes = []
    for i in range(repeat):
        s = dataclasses.replace(settings, warmup=0) if i else settings  # frozen: never changed
        o = run_bench(
            s, run_id, Gates(), progress, store_result=False, labels=labels,
            probe=probe if i == repeat - 1 else None, validated=validated,
        )  # fmt: skip
        outcomes.append(o)
        if o.interrupted or o.failure is not None or not o.result.complete:
            break
    last = outcomes[-1]
    res = merge([o.result for o in outcomes])
    res.probe = last.result.probe
    res.settings = {**res.settings, "repeat": repeat, "gate_on": gate_on}
    res.gates = evaluate_gates(
        gate_view(res, gate_on), gates.min_decode_tok_s, gates.max_ttft_ms, gates.min_output_tok_s
    )
    if gate_on == "lower":
        how = (
            "95% interval's bound, --gate-on lower"
            if len(outcomes) > 1
            else "one run: no interval, --gate-on lower read the figure itself"
        )
        for g in res.gates:
            g["reason"] = f"{g['reason']} ({how})"
    res.gates += [g for g in last.result.gates if g.get("gate") == "output-agreement"]
    result_id, store_error = None, None
    if store_result:
        from glmserve.errors import StoreError
        from glmserve.store import RunStore

        try:
            with RunStore.open() as store:
                result_id = store.add_bench_result(res.meta.get("run_id"), res.to_dict(), res.meta)
        except StoreError as exc:
            store_error = str(exc)
    return BenchOutcome(res, result_id, last.interrupted, store_error, last.failure)


def repeat_lines(res: Any) -> list[str]:
    """What ``bench`` prints under its table about repeats and intervals."""
    ci = getattr(res, "ci", None)
    if not ci:
        return []
    n = ci.get("repeats")
    parts = []
    for key, label in (("decode_tok_s", "decode tok/s"), ("ttft_ms", "TTFT ms")):
        if ci.get(key):
            lo, hi = ci[key]
            parts.append(f"{label} 95% interval {lo:.2f}..{hi:.2f}")
    for lv in res.levels:
        lci = (lv.get("ci") or {}).get("output_tok_s")
        if lci and res.mode != "decode":
            parts.append(f"c={lv['concurrency']} out tok/s {lci[0]:.1f}..{lci[1]:.1f}")
    line = f"figures are medians of {n} repeats (bootstrap 95% intervals)"
    return [line + (": " + "; ".join(parts) if parts else "")]
