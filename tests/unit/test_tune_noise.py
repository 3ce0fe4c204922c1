"""Tune with repeats: trials whose interval overlaps the best's are ties; --write-profile
writes only a best that beats the starting config beyond noise (pure)."""

from __future__ import annotations

from glmserve.tune import state as st

SPACE = [["max-running-requests", ["4", "16", "32"]]]


def trial(v: str, values: list[float], status: str = st.OK) -> st.Trial:
    med = sorted(values)[len(values) // 2]
    m = {"output_tok_s": med, "meets_slo": True, "completed": 3, "errors": 0,
         "repeat_values": {"output_tok_s": values, "decode_tok_s": values}}  # fmt: skip
    return st.Trial(config={"max-running-requests": v}, concurrency=16, status=status, metrics=m)


def tune(*trials: st.Trial) -> st.Tune:
    return st.Tune("tu-x", "p", SPACE, [16], "output_tok_s", {}, None, ["local"],
                   trials=list(trials))  # fmt: skip


START = {"max-running-requests": 4}


def test_overlapping_intervals_are_ties_and_distinct_ones_are_not():
    t = tune(
        trial("4", [100, 101, 99]),
        trial("16", [130, 134, 128]),
        trial("32", [131, 136, 127]),
    )
    assert st.best_trial(t).config == {"max-running-requests": "32"}
    assert [x.key for x in st.ties(t)] == ["max-running-requests=16@c16"]
    d = t.to_dict()
    assert d["ties"] == ["max-running-requests=16@c16"]
    assert "Tie with best" in st.render_markdown(t)


def test_best_beyond_noise_of_the_start_is_written():
    t = tune(trial("4", [100, 101, 99]), trial("16", [130, 134, 128]))
    ok, why = st.beats_start(t, START)
    assert ok and "95% interval" in why


def test_best_within_noise_of_the_start_is_not_written():
    t = tune(trial("4", [100, 112, 95]), trial("16", [104, 110, 97]))
    ok, why = st.beats_start(t, START)
    assert not ok and "within noise" in why


def test_single_runs_cannot_be_told_from_noise():
    t = tune(trial("4", [100]), trial("16", [130]))
    ok, why = st.beats_start(t, START)
    assert not ok and "single run" in why


def test_a_crashed_start_is_beaten_outright():
    t = tune(trial("4", [100, 101, 99], status=st.CRASHED), trial("16", [130, 134, 128]))
    ok, _ = st.beats_start(t, START)
    assert ok
