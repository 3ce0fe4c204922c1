"""``compare`` and the report with probed results: agreement shown when both were probed with
the same set; a WRONG_OUTPUT row gets no speedup (its speed is of another model)."""

from __future__ import annotations

from tests.fixtures.compare_rows import level, row

from glmserve.bench import agreement as ag
from glmserve.bench.compare import compare_notes, compare_results
from glmserve.bench.probes import load_probe_set

SHA = load_probe_set().sha256


def probe(tokens: list[int], lps: list[float], sha: str | None = None, agreement=None) -> dict:
    out = {"id": "a", "tokens": tokens, "logprobs": lps, "prompt_ids": [1]}
    d = {"set": "glmserve-probes-v1", "sha256": SHA if sha is None else sha, "outputs": [out]}
    if agreement is not None:
        d["agreement"] = agreement
    return d


def rows(cand_probe: dict) -> list[dict]:
    base = row(1, [level(1, 100.0, 4)], probe=probe([1, 2, 3, 4], [-0.1] * 4))
    cand = row(2, [level(1, 150.0, 4)], probe=cand_probe)
    return [base, cand]


def test_agreeing_candidate_keeps_its_speedup_and_says_so():
    table = compare_results(rows(probe([1, 2, 3, 4], [-0.11] * 4)))
    r = table["rows"][1]
    assert r["comparable"] and r["decode_speedup"] == 1.0  # decode figures are equal here
    assert r["levels"]["1"]["speedup"] == 1.5
    assert r["output"]["verdict"] == ag.AGREES and r["output"]["nll_method"] == "agreed-prefix"
    assert any("output agrees with reference 1" in n for n in compare_notes(table))


def test_garbled_candidate_gets_no_speedup():
    table = compare_results(rows(probe([9, 9, 9, 9], [-0.1] * 4)))
    r = table["rows"][1]
    assert r["output"]["verdict"] == ag.WRONG_OUTPUT
    assert not r["comparable"] and r["levels"]["1"]["speedup"] is None
    assert any(ag.WRONG_OUTPUT in line for line in compare_notes(table))


def test_stored_teacher_forced_verdict_against_the_baseline_is_used():
    verdict = {"verdict": ag.WRONG_OUTPUT, "greedy_agreement": 1.0, "excess_nll": 2.0,
               "nll_method": "teacher-forced", "reasons": ["excess NLL 2.000 > 0.1"],
               "reference": 1}  # fmt: skip
    table = compare_results(rows(probe([1, 2, 3, 4], [-0.1] * 4, agreement=verdict)))
    r = table["rows"][1]
    assert r["output"]["nll_method"] == "teacher-forced"
    assert not r["comparable"]


def test_different_probe_sets_are_not_compared():
    table = compare_results(rows(probe([9, 9, 9, 9], [-0.1] * 4, sha="0" * 64)))
    r = table["rows"][1]
    assert r["comparable"] and r["output"]["verdict"] is None
    assert any("different probe sets" in n for n in r["notes"])


def test_report_names_a_wrong_output_result():
    from glmserve.report import ReportSeries, unfit_reasons

    verdict = {"verdict": ag.WRONG_OUTPUT, "reasons": ["greedy agreement 0.00 < 0.5"],
               "reference": 7}  # fmt: skip
    bad = row(3, [level(1, 150.0, 4)], probe=probe([9], [-0.1], agreement=verdict))
    s = ReportSeries(name="x", status="ok", results=[bad])
    assert unfit_reasons(s) == [
        "concurrency: WRONG_OUTPUT vs reference 7: greedy agreement 0.00 < 0.5"
    ]


def test_a_diverging_candidate_is_not_judged_agreeing_from_the_agreed_prefix_alone():
    # Equal logprobs where both chose the same token, then a divergence: the agreed-prefix
    # estimate reads 0 nats/token whatever the candidate does at the divergence (a garbled
    # server diverges exactly at its wrong positions), so "agrees" would be unfounded.
    table = compare_results(rows(probe([1, 2, 7, 7], [-0.1] * 4)))
    r = table["rows"][1]
    assert r["output"]["verdict"] is None and r["output"]["greedy_agreement"] == 0.5
    note = next(n for n in r["notes"] if "not judged" in n)
    assert "--reference 1" in note and "teacher-forced" in note
    assert not any("output agrees" in n for n in compare_notes(table))


def test_the_api_the_probe_went_through_is_named_with_the_verdict():
    from glmserve.bench.probe import probe_lines

    verdict = {"verdict": ag.AGREES, "greedy_agreement": 1.0, "excess_nll": 0.0,
               "nll_method": "teacher-forced", "reasons": [], "reference": 1}  # fmt: skip
    cand = {**probe([1, 2, 3, 4], [-0.1] * 4, agreement=verdict), "endpoint": "native",
            "bench_api": "chat"}  # fmt: skip
    lines = probe_lines(cand)
    assert "probed through /generate; benched through --api chat" in lines[0]
    table = compare_results(rows(cand))
    (note,) = [n for n in compare_notes(table) if "output agrees with reference 1" in n]
    assert "probed through /generate; benched through --api chat" in note


def test_probes_through_different_apis_are_not_compared():
    cand = {**probe([1, 2, 3, 4], [-0.1] * 4), "endpoint": "chat"}
    r = compare_results(rows(cand))["rows"][1]
    assert r["output"]["verdict"] is None
    assert any("different APIs" in n for n in r["notes"])


def test_results_show_names_the_probe_and_its_api(capsys):
    from tests.fixtures.cli import run_cli

    from glmserve.store import RunStore

    probed = {**probe([1, 2, 3, 4], [-0.1] * 4), "endpoint": "native", "bench_api": "openai"}
    stored = row(1, [level(1, 100.0, 4)], probe=probed)
    with RunStore.open() as store:
        rid = store.add_bench_result(None, stored["result"], stored.get("meta"))
    code, out, err = run_cli(capsys, "results", "show", str(rid))
    assert code == 0, err
    assert "output probed: 1 prompts" in out
    assert "probed through /generate; benched through --api openai" in out
