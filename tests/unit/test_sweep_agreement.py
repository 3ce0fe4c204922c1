"""Sweep output verdicts (pure): a profile probed before its reference is judged from the
stored outputs at the end; WRONG_OUTPUT is never the baseline or the winner, and the report
names it."""

from __future__ import annotations

from glmserve.bench.agreement import WRONG_OUTPUT
from glmserve.bench.probes import load_probe_set
from glmserve.sweep.agreement import judge_all
from glmserve.sweep.state import OK, Sweep, SweepEntry, SweepOptions
from glmserve.sweep.summary import sweep_rows, winner

SHA = load_probe_set().sha256


def bench(decode: float, tokens: list[int]) -> dict:
    out = {"id": "a", "tokens": tokens, "logprobs": [-0.1] * len(tokens), "prompt_ids": [1]}
    return {"mode": "decode", "decode_tok_s": decode, "levels": [],
            "probe": {"set": "v1", "sha256": SHA, "outputs": [out]}}  # fmt: skip


def sweep() -> tuple[Sweep, SweepOptions]:
    fast = SweepEntry("fast", status=OK, bench=[bench(20.0, [9, 9, 9, 9])])
    ref = SweepEntry("ref", status=OK, bench=[bench(10.0, [1, 2, 3, 4])])
    near = SweepEntry("near", status=OK, bench=[bench(11.0, [1, 2, 3, 4])])
    return Sweep("sw-x", ["fast", "ref", "near"], entries=[fast, ref, near]), SweepOptions(
        probe=True, reference="ref"
    )


def test_garbled_profile_probed_first_is_wrong_output_and_never_wins():
    sw, opts = sweep()
    judge_all(sw, opts)
    fast, ref, near = sw.entries
    assert fast.output["verdict"] == WRONG_OUTPUT and fast.output["greedy_agreement"] == 0.0
    assert ref.output == {"verdict": "reference"}
    assert near.output["verdict"] == "agrees"
    rows = {r["profile"]: r for r in sweep_rows(sw)}
    assert rows["fast"]["status"] == WRONG_OUTPUT and rows["fast"]["speedup"] is None
    assert rows["ref"]["speedup"] == 1.0  # the first successful *agreeing* profile
    assert winner(sw) == "near"


def test_report_names_the_verdict_judged_at_the_end():
    from glmserve.report import series_from_sweep, unfit_reasons

    sw, opts = sweep()
    judge_all(sw, opts)
    fast = series_from_sweep(sw)[0]
    assert any(WRONG_OUTPUT in r for r in unfit_reasons(fast))
