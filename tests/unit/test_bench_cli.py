"""``glmserve bench`` / ``compare`` through the CLI entry point against the scripted server:
exit codes, --json shape, gates, stored results, --output, unreachable server."""

from __future__ import annotations

import json

import pytest
from tests.fixtures.cli import bench_json, run_cli

from glmserve.store import RunStore


def test_decode_json_has_the_contract_fields_and_is_stored(capsys, fake):
    fake.n_tokens, fake.itl = 8, 0.01
    code, data, _ = bench_json(capsys, fake)
    assert code == 0
    assert data["version"] == 1 and data["mode"] == "decode" and data["complete"] is True
    # 8 tokens, one every 10 ms -> ~100 tok/s per stream (scheduling noise only slows it)
    assert 50 < data["decode_tok_s"] <= 110
    lv = data["levels"][0]
    assert lv["concurrency"] == 1 and lv["errors"] == 0 and lv["completed"] == 3
    for key in ("ttft_ms", "itl_ms", "tpot_ms"):
        assert set(lv[key]) >= {"p50", "p90", "p99"}
    assert lv["output_tok_s"] > 0
    assert data["server"]["last_gen_throughput"] == 42.0
    assert data["meta"]["sglang_version"] == "0.5.9"
    assert data["meta"]["glmserve_version"]
    assert data["settings"]["output_len"] == 8
    with RunStore.open() as store:
        rows = store.list_bench_results()
    assert [r["id"] for r in rows] == [data["id"]]
    assert rows[0]["result"]["decode_tok_s"] == data["decode_tok_s"]


def test_a_result_with_a_failed_request_exits_7_stored_incomplete(capsys, fake):
    """An audit found `[INCOMPLETE: 2 of 6 requests failed]` with exit 0: a CI script would
    take it as a measurement. Stored and printed as before, but exit 7."""
    fake.behaviour = "http500_once"
    code, data, err = bench_json(capsys, fake, "--min-decode-tok-s", "1")
    assert code == 7, err
    assert data["complete"] is False and data["stopped"] == "1 of 3 requests failed"
    assert data["levels"][0]["completed"] == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: incomplete result: 1 of 3 requests failed; first error: HTTP")
    with RunStore.open() as store:
        assert [r["id"] for r in store.list_bench_results()] == [data["id"]]


def test_decode_gate_passes_and_fails_with_one_line_reason(capsys, fake):
    assert bench_json(capsys, fake, "--min-decode-tok-s", "1")[0] == 0
    code, data, err = bench_json(capsys, fake, "--min-decode-tok-s", "1e9")
    assert code == 1
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1
    assert "decode tok/s" in errors[0] and "below the minimum 1e+09" in errors[0]
    assert data["gates"][0]["ok"] is False  # the result is still printed and stored


def test_ttft_and_output_gates(capsys, fake):
    code, _, err = bench_json(capsys, fake, "--max-ttft-ms", "0.0001")
    assert code == 1 and "TTFT" in err
    code, data, err = bench_json(
        capsys, fake, "--mode", "concurrency", "--concurrency", "1,2", "--min-output-tok-s", "2:1e9"
    )
    assert code == 1 and "concurrency 2" in err
    assert [lv["concurrency"] for lv in data["levels"]] == [1, 2]


def test_output_gate_for_unmeasured_level_is_a_usage_error(capsys, fake):
    code, _, err = bench_json(capsys, fake, "--mode", "concurrency", "--concurrency", "1",
                              "--min-output-tok-s", "8:1")  # fmt: skip
    assert code == 2 and "--min-output-tok-s" in err
    code, _, err = bench_json(capsys, fake, "--min-output-tok-s", "nonsense")
    assert code == 2 and "--min-output-tok-s" in err


def test_unreachable_server_exits_5_naming_the_url(capsys):
    code, out, err = run_cli(capsys, "bench", "--url", "http://127.0.0.1:9", "--json")
    assert code == 5
    assert "http://127.0.0.1:9" in err
    assert out == ""


def test_request_errors_are_counted_and_saved(capsys, fake, tmp_path):
    fake.behaviour = "http500"
    dest = tmp_path / "r.json"
    code, data, err = bench_json(capsys, fake, "--output", str(dest))
    assert code == 5 and "no request succeeded" in err  # none ok: an error, not a result
    assert data["levels"][0]["errors"] == 3 and data["errors"] == 3
    assert data["complete"] is False and data["stopped"] == "3 of 3 requests failed"
    assert data["levels"][0]["error_samples"][0].startswith("HTTP 500")
    assert json.loads(dest.read_text())["id"] == data["id"]  # still printed, saved, stored
    code, data, err = bench_json(capsys, fake, "--min-decode-tok-s", "1")
    assert code == 5 and "no request succeeded" in err
    assert data["gates"][0]["reason"].endswith("no measurement (no request succeeded)")


def test_table_output_without_json(capsys, fake):
    fake.n_tokens = 4  # as asked: fewer or more is a failed request
    code, out, _ = run_cli(capsys, "bench", "--url", fake.url, "--warmup", "0",
                           "--output-len", "4", "--num-prompts", "2")  # fmt: skip
    assert code == 0
    assert "decode" in out and "stored as bench result" in out


def test_compare_last_n_with_speedups(capsys, fake):
    fake.itl = 0.02
    _, first, _ = bench_json(capsys, fake)
    fake.itl = 0.005
    _, second, _ = bench_json(capsys, fake)
    code, out, _ = run_cli(capsys, "compare", "--last", "2", "--json")
    assert code == 0
    table = json.loads(out)
    assert table["baseline"] == first["id"]
    rows = {r["id"]: r for r in table["rows"]}
    assert rows[first["id"]]["decode_speedup"] == pytest.approx(1.0)
    assert rows[second["id"]]["decode_speedup"] == pytest.approx(
        second["decode_tok_s"] / first["decode_tok_s"]
    )
    assert rows[second["id"]]["decode_speedup"] > 1.5  # 4x faster token interval
    code, out, _ = run_cli(capsys, "compare", str(second["id"]), "--baseline", str(first["id"]))
    assert code == 0 and "compare" in out


def test_compare_usage_errors(capsys):
    assert run_cli(capsys, "compare")[0] == 2
    assert run_cli(capsys, "compare", "--last", "2")[0] == 2  # nothing stored yet
    assert run_cli(capsys, "compare", "12345")[0] == 2


def test_compare_resolves_all_digit_run_ids_and_group_ids(capsys, fake):
    """Run ids are 8 hex digits, so some are all digits: an exact run id must win over the
    same text read as a bench result id. A group id (``g...``) means its node 0 run."""
    from glmserve.store import RunRecord

    with RunStore.open() as store:
        digits = store.add_run(
            RunRecord(run_id="12345678", host="local", profile="a", port=1, run_dir="/tmp/r1")
        )
        node0 = store.add_run(
            RunRecord(run_id="abcdef01", host="local", profile="b", port=2, run_dir="/tmp/r2",
                      meta={"group_id": "g7777", "node_rank": 0})
        )  # fmt: skip
        store.add_run(
            RunRecord(run_id="abcdef02", host="other", profile="b", port=2, run_dir="/tmp/r3",
                      meta={"group_id": "g7777", "node_rank": 1})
        )  # fmt: skip
        for run, tok_s in ((digits, 10.0), (node0, 20.0)):
            store.add_bench_result(
                run.run_id, {"mode": "decode", "decode_tok_s": tok_s, "levels": []}
            )
    code, out, err = run_cli(capsys, "compare", "12345678", "g7777", "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [r["run_id"] for r in rows] == ["12345678", "abcdef01"]
    assert rows[1]["decode_speedup"] == pytest.approx(2.0)
    # a number that is not a run id is still a bench result id
    code, out, err = run_cli(capsys, "compare", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["rows"][0]["run_id"] == "12345678"
    # the group id works as --baseline too, listed or not
    for items in (["12345678", "g7777"], ["12345678"]):
        code, out, err = run_cli(capsys, "compare", *items, "--baseline", "g7777", "--json")
        assert code == 0, err
        table = json.loads(out)
        rows = {r["run_id"]: r for r in table["rows"]}
        assert rows["abcdef01"]["decode_speedup"] == pytest.approx(1.0)
        assert rows["12345678"]["decode_speedup"] == pytest.approx(0.5)


def test_a_decode_gate_with_one_output_token_says_why_there_is_no_figure(capsys, fake):
    """`--output-len 1` has no decode step: the gate said "all requests failed?" although
    every request succeeded."""
    fake.n_tokens = 1
    code, out, err = run_cli(capsys, "bench", "--url", fake.url, "--warmup", "0", "--json",
                             "--output-len", "1", "--min-decode-tok-s", "1")  # fmt: skip
    assert code == 1, err
    reason = json.loads(out)["gates"][0]["reason"]
    assert reason.endswith("no decode step measured (one output token per request)")


def test_the_warmup_says_it_started(capsys, fake):
    """A long warmup request printed nothing (~18 s for a 1000-token decode in the
    simulator): the bench looked hung. One stderr line when it starts, none without one."""
    fake.n_tokens, fake.itl = 4, 0.001
    code, out, err = run_cli(capsys, "bench", "--url", fake.url, "--warmup", "2", "--json",
                             "--output-len", "4", "--num-prompts", "2")  # fmt: skip
    assert code == 0, err
    assert "bench: warmup: 2 requests (not measured)" in err.splitlines()
    assert "bench: warmup" not in out  # --json: stdout is the result alone
    code, _, err = run_cli(capsys, "bench", "--url", fake.url, "--warmup", "0", "--json",
                           "--output-len", "4", "--num-prompts", "2")  # fmt: skip
    assert code == 0 and "warmup:" not in err, err
