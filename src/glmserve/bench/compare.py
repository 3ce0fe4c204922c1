"""``glmserve compare``: stored bench results side by side, with speedup against a baseline.

``load_entries`` reads the run store (a run id means its newest bench result, a number means
that bench result); ``compare_results`` is pure and produces the JSON the table renders.
"""

from __future__ import annotations

from typing import Any

from glmserve.errors import ConfigError, RunNotFound


def load_entries(
    items: list[str], last: int | None, baseline: str | None = None
) -> list[dict[str, Any]]:
    """Stored bench rows (``{id, run_id, created_at, result, meta}``), oldest first."""
    from glmserve.store import RunStore

    if last is not None and last < 1:
        raise ConfigError(f"--last: expected 1 or more results, got {last}")
    if not items and not last:
        raise ConfigError("compare: give run ids / bench result ids, or --last N")
    with RunStore.open() as store:
        rows = [_load_one(store, it) for it in items]
        if last:
            recent = store.list_bench_results(last=last)
            if not recent:
                raise RunNotFound("no stored bench results (run `glmserve bench` first)")
            rows += list(reversed(recent))
        if baseline is not None:
            base = _find(rows, baseline) or _load_one(store, baseline)
            found = next((r for r in rows if r["id"] == base["id"]), None)
            if found is None:
                rows.insert(0, found := base)
            found["requested_as"] = baseline  # e.g. a group id: compare_results finds it
    seen: set[int] = set()
    unique = []
    for r in rows:
        if r["id"] not in seen:
            seen.add(r["id"])
            unique.append(r)
    return unique


def _load_one(store: Any, item: str) -> dict[str, Any]:
    """A run id (exact, or a unique prefix), a group id (its node 0 run), else a number as a
    bench result id. An exact run id wins over a number: run ids are 8 hex digits, so about
    one in fifty is all digits; a number that is no result id but a unique run id prefix is
    that run."""
    from glmserve.deploy.deployment import Deployment

    try:
        run = store.get_run(item)
    except RunNotFound:
        run = None
    if item.isdigit() and (run is None or run.run_id != item):
        try:
            return store.get_bench_result(int(item))
        except RunNotFound:
            if run is None:  # neither a result nor a run
                raise  # "no bench result N (see `glmserve results`)"
            # no result of that number: the digits are a run id prefix (65 of 65afd5ea)
    if run is None:
        run = Deployment.resolve(store, item).head  # a group id; else RunNotFound naming it
    rows = store.list_bench_results(run_id=run.run_id, last=1)
    if not rows:
        raise RunNotFound(f"run {item} has no bench results (run `glmserve bench {item}`)")
    return rows[0]


def _find(rows: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    for r in rows:  # the row load_entries resolved ``key`` to (a group id, say)
        if r.get("requested_as") == key:
            return r
    for r in reversed(rows):  # a run id: its newest result among the rows (wins over a number)
        if r.get("run_id") == key:
            return r
    for r in rows:
        if str(r["id"]) == key:
            return r
    for r in reversed(rows):  # a run id prefix
        if str(r.get("run_id") or "").startswith(key) and not key.isdigit():
            return r
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _level_key(lv: dict[str, Any]) -> Any:
    """A closed-loop level by its concurrency (int); an open-loop one by "r=RATE[ c<=CAP]"."""
    from glmserve.bench.results import level_label

    return lv["concurrency"] if lv.get("request_rate") is None else level_label(lv)


def _sort_key(k: Any) -> tuple[int, float, str]:
    return (0, float(k), "") if isinstance(k, int) else (1, 0.0, str(k))


def compare_results(rows: list[dict[str, Any]], baseline: str | None = None) -> dict[str, Any]:
    """Pure: rows -> ``{"baseline", "concurrency", "rows": [...]}`` with speedups.

    A speedup is printed only where it is true, so no number appears when:

    * a row was measured differently from the baseline (``bench.comparable``: workload, load
      shape and amount, simulator speed): ``incomparable`` names each differing field;
    * either side is incomplete (failed requests, Ctrl-C, a crashed server): ``incomplete``
      says how many of how many failed -- its throughput is of fewer streams than asked;
    * at a level that either side never filled (c=8 with 2 prompts is not a c=8 figure):
      that level's ``flag`` says so, the other levels keep theirs.

    One whose levels differ gets a ``notes`` entry, and speedups only at shared levels.
    """
    from glmserve.bench.agreement import WRONG_OUTPUT
    from glmserve.bench.comparable import context, describe, differences, levels_of, unfit
    from glmserve.bench.probe import compare_agreement, describe_agreement

    if not rows:
        raise ConfigError("compare: nothing to compare")
    base = rows[0] if baseline is None else _find(rows, baseline)
    if base is None:
        raise ConfigError(f"--baseline {baseline}: not among the compared results")
    levels = sorted(
        {_level_key(lv) for r in rows for lv in r["result"].get("levels", [])}, key=_sort_key
    )

    def level_tok_s(row: dict[str, Any], c: Any, key: str = "output_tok_s") -> Any:
        for lv in row["result"].get("levels", []):
            if _level_key(lv) == c:
                return lv.get(key)
        return None

    def lowest(row: dict[str, Any]) -> dict[str, Any] | None:
        lvs = row["result"].get("levels") or []
        return min(lvs, key=lambda lv: lv["concurrency"]) if lvs else None

    def decode(row: dict[str, Any]) -> float | None:
        res = row["result"]
        if res.get("decode_tok_s") is not None:
            return res["decode_tok_s"]
        low = lowest(row)
        return low["decode_tok_s"]["p50"] if low else None

    base_unfit = unfit(base)
    out_rows = []
    for r in rows:
        res, meta = r["result"], r.get("meta") or {}
        diffs = [] if r is base else differences(base, r)
        own = base_unfit if r is base else unfit(r)
        reasons = [describe(diffs)] if diffs else []
        if own["incomplete"]:
            reasons.append(own["incomplete"])
        if r is not base and base_unfit["incomplete"]:
            reasons.append(f"baseline {base['id']} is {base_unfit['incomplete']}")
        output = None if r is base else compare_agreement(base, r)
        if output and output.get("verdict") == WRONG_OUTPUT:
            reasons.append(describe_agreement(output))  # a wrong model's speed is no speedup
        ok = not reasons
        notes = []
        if output and output.get("verdict") not in (None, WRONG_OUTPUT):
            notes.append(describe_agreement(output))
        elif output and output.get("note"):
            notes.append(output["note"])
        same_levels = levels_of(r) == levels_of(base)
        if ok and not same_levels:
            notes.append(
                f"levels {','.join(map(str, levels_of(r)))} vs baseline "
                f"{','.join(map(str, levels_of(base)))}: speedups only at shared levels"
            )
        per_level = {}
        for c in levels:
            v = level_tok_s(r, c)
            flag = own["levels"].get(c)
            if flag is None and r is not base and base_unfit["levels"].get(c):
                flag = f"baseline {base['id']}: {base_unfit['levels'][c]}"
            sp = _ratio(v, level_tok_s(base, c)) if ok and flag is None else None
            per_level[str(c)] = {"output_tok_s": v, "speedup": sp, "flag": flag}
            tpj = level_tok_s(r, c, "output_tok_per_j")  # GPU telemetry (bench.gpu_telemetry)
            if tpj is not None:
                per_level[str(c)]["output_tok_per_j"] = tpj
                per_level[str(c)]["gpu_throttled"] = level_tok_s(r, c, "gpu_throttled")
                if per_level[str(c)]["gpu_throttled"]:
                    notes.append(f"GPU clocks throttled (power or thermal) during c={c}")
            if sp is not None and r is not base:
                per_level[str(c)].update(level_interval(r, base, c))
            if flag is not None and v is not None and ok:
                notes.append(f"{flag}: not a c={c} measurement, no speedup at c={c}")
        ttft = res.get("ttft_ms")
        if ttft is None and res.get("levels"):
            ttft = lowest(r)["ttft_ms"]["p50"]  # type: ignore[index]
        low_same = levels_of(r)[:1] == levels_of(base)[:1]
        low_filled = all(
            (lv := lowest(x)) is None or lv["concurrency"] not in u["levels"]
            for x, u in ((r, own), (base, base_unfit))
        )
        dec_sp = _ratio(decode(r), decode(base)) if ok and low_same and low_filled else None
        noise = decode_interval(r, base) if dec_sp is not None and r is not base else {}
        if noise.get("speedup_ci"):
            lo, hi = noise["speedup_ci"]
            verdict = "within noise" if noise["within_noise"] else "beyond noise"
            notes.append(
                f"decode speedup {noise['speedup']:.3f}x, 95% interval {lo:.3f}..{hi:.3f} "
                f"(bootstrap over {noise['repeats'][0]} vs {noise['repeats'][1]} repeats): "
                f"{verdict}"
            )
        elif dec_sp is not None and r is not base and (_decode_values(r) or _decode_values(base)):
            single = base["id"] if _decode_values(r) else r["id"]
            notes.append(f"no interval for the decode speedup: result {single} is a single run")
        out_rows.append(
            {
                "id": r["id"],
                "run_id": r.get("run_id"),
                "profile": meta.get("profile") or res.get("meta", {}).get("profile"),
                "mode": res.get("mode"),
                "complete": res.get("complete"),
                "errors": res.get("errors"),
                "decode_tok_s": decode(r),
                "decode_speedup": dec_sp,
                "decode_speedup_ci": noise.get("speedup_ci"),
                "within_noise": noise.get("within_noise"),
                "ttft_ms": ttft,
                "levels": per_level,
                "baseline": r is base,
                "comparable": ok,
                "incomparable": diffs,
                "incomplete": own["incomplete"],
                "incomparable_reason": "; ".join(reasons) if reasons else None,
                "notes": notes,
                "output": output,
                "context": context(r),
            }
        )
    return {"baseline": base["id"], "concurrency": levels, "rows": out_rows}


def compare_notes(table: dict[str, Any]) -> list[str]:
    """Lines under the table: every row without speedups says why (the differing field, or
    how it is incomplete); level mismatches and unfilled levels."""
    lines = []
    for r in table["rows"]:
        if r["baseline"] and not r["comparable"]:
            lines.append(
                f"baseline {r['id']} is {r['incomparable_reason']}: no speedup is shown against it"
            )
        elif not r["comparable"]:
            lines.append(
                f"result {r['id']} is NOT comparable with baseline {table['baseline']}: "
                f"{r['incomparable_reason']} (no speedup shown)"
            )
        for n in r.get("notes") or []:
            lines.append(f"result {r['id']}: {n}")
    return lines


def _decode_values(row: dict[str, Any]) -> list[float]:
    """Per-repeat decode figures of a row (the headline's, else its lowest level's)."""
    res = row["result"]
    vals = ((res.get("ci") or {}).get("repeat_values") or {}).get("decode_tok_s") or []
    if vals:
        return vals
    lvs = res.get("levels") or []
    if not lvs:
        return []
    low = min(lvs, key=lambda lv: lv["concurrency"])
    return (low.get("repeat_values") or {}).get("decode_tok_s") or []


def decode_interval(row: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The decode speedup's bootstrap interval when both sides were repeated, else {}."""
    from glmserve.bench.stats import ratio_ci, within_noise

    a, b = _decode_values(row), _decode_values(base)
    if len(a) < 2 or len(b) < 2:
        return {}
    sp, ci = ratio_ci(a, b)
    return {"speedup": sp, "speedup_ci": ci, "within_noise": within_noise(ci),
            "repeats": (len(a), len(b))}  # fmt: skip


def level_interval(row: dict[str, Any], base: dict[str, Any], c: Any) -> dict[str, Any]:
    """A level's output tok/s speedup interval when both sides were repeated, else {}."""
    from glmserve.bench.stats import ratio_ci, within_noise

    def vals(x: dict[str, Any]) -> list[float]:
        for lv in x["result"].get("levels", []):
            if _level_key(lv) == c:
                return (lv.get("repeat_values") or {}).get("output_tok_s") or []
        return []

    a, b = vals(row), vals(base)
    if len(a) < 2 or len(b) < 2:
        return {}
    _, ci = ratio_ci(a, b)
    return {"speedup_ci": ci, "within_noise": within_noise(ci)}
