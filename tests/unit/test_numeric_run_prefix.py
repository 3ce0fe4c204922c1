"""A number that is no bench result id but a unique run id prefix is that run (`report 65` of
run 65afd5ea said "no bench result 65"); a number that is a result id stays that result."""

from __future__ import annotations

import json

from tests.fixtures.bench_levels import level_with
from tests.fixtures.cli import run_cli

from glmserve.bench.results import BenchResult
from glmserve.store import RunRecord, RunStore


def _run_with_result(run_id: str) -> int:
    res = BenchResult(mode="concurrency", complete=True, levels=[level_with(1, 3, 0)])
    with RunStore.open() as store:
        store.add_run(RunRecord(run_id=run_id, host="local", profile="p", port=1, run_dir="/x"))
        return store.add_bench_result(run_id, res.to_dict())


def test_digits_fall_back_to_a_run_prefix(capsys, tmp_path):
    first = _run_with_result("65afd5ea")
    second = _run_with_result("abcd0000")
    code, out, err = run_cli(capsys, "compare", str(second), "65", "--json")
    assert code == 0, err
    assert [r["id"] for r in json.loads(out)["rows"]] == [second, first]
    code, _, err = run_cli(capsys, "report", "65", "--html", str(tmp_path / "r.html"))
    assert code == 0, err
    code, _, err = run_cli(capsys, "compare", "77", "65")  # 77: neither
    assert code == 2 and "no bench result 77" in err


def test_an_id_given_twice_is_one_series(tmp_path):
    from glmserve.report import load_report_data

    rid = _run_with_result("abcd1111")
    assert len(load_report_data([str(rid), str(rid)]).series) == 1
