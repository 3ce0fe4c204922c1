"""A sweep's winner must be shown to compute the reference's model. A profile probed before
its reference (``--reference PROFILE`` named later) is judged from stored outputs, where the
excess NLL is read only over the tokens both servers chose: a server wrong at some positions
diverges exactly there and reads 0 nats/token. Such a profile was judged "agrees" and could
win; now it is left unjudged (naming ``--reference``) and never the winner."""

from __future__ import annotations

from glmserve.bench.probes import load_probe_set
from glmserve.sweep.agreement import judge_all
from glmserve.sweep.state import OK, Sweep, SweepEntry, SweepOptions
from glmserve.sweep.summary import output_lines, winner

SHA = load_probe_set().sha256


def bench(decode: float, tokens: list[int]) -> dict:
    out = {"id": "a", "tokens": tokens, "logprobs": [-0.1] * len(tokens), "prompt_ids": [1]}
    return {"mode": "decode", "decode_tok_s": decode, "levels": [],
            "probe": {"set": "v1", "sha256": SHA, "outputs": [out]}}  # fmt: skip


def test_a_diverging_profile_judged_from_stored_outputs_is_unjudged_and_never_wins():
    partly = SweepEntry("partly_wrong", status=OK, bench=[bench(20.0, [1, 2, 7, 7])])
    same = SweepEntry("same", status=OK, bench=[bench(12.0, [1, 2, 3, 4])])
    ref = SweepEntry("ref", status=OK, bench=[bench(10.0, [1, 2, 3, 4])])
    sw = Sweep("sw-y", ["partly_wrong", "same", "ref"], entries=[partly, same, ref])
    judge_all(sw, SweepOptions(probe=True, reference="ref"))
    assert partly.output["verdict"] is None and partly.output["greedy_agreement"] == 0.5
    assert "--reference ref" in partly.output["note"]
    assert same.output["verdict"] == "agrees"  # identical outputs: read whole
    assert winner(sw) == "same"
    assert any(line.startswith("partly_wrong: output not judged") for line in output_lines(sw))
