"""``compare`` never prints a speedup that is not true (audit of compare/report): results
with different ``num_prompts``/``duration``, levels that never had their concurrency in
flight, and incomplete (failed, interrupted, crashed) results get "n/c" and a line that
names why; the config hash counts env and patches, not ``--port``."""

from __future__ import annotations

import json

import pytest
from tests.fixtures.compare_rows import level, row

from glmserve.bench import comparable
from glmserve.bench.compare import compare_notes, compare_results
from glmserve.bench.results import build_result, render_plain
from glmserve.cli import main
from glmserve.store import RunStore


def test_num_prompts_difference_is_named_not_a_speedup():
    few = row(1, [level(8, 397.6, 2)], num_prompts=2)
    many = row(2, [level(8, 1618.5, 200)], num_prompts=200)
    table = compare_results([many, few])
    r = table["rows"][1]
    assert r["comparable"] is False and r["incomparable_reason"] == "num_prompts 2 vs 200"
    assert r["levels"]["8"]["speedup"] is None and r["decode_speedup"] is None
    assert "num_prompts 2 vs 200" in compare_notes(table)[0]


def test_duration_difference_is_named():
    a, b = row(1, [level(4, 100.0, 50)], None), row(2, [level(4, 100.0, 50)], None)
    b["result"]["settings"]["duration"] = 30.0
    r = compare_results([a, b])["rows"][1]
    assert r["comparable"] is False and r["incomparable_reason"] == "duration 30 vs -"


def test_level_that_never_filled_its_slots_gets_no_speedup_even_with_equal_settings():
    a = row(1, [level(1, 200.0, 2), level(8, 400.0, 2)], num_prompts=2)
    b = row(2, [level(1, 210.0, 2), level(8, 390.0, 2)], num_prompts=2)
    table = compare_results([a, b])
    r = table["rows"][1]
    assert r["comparable"] and r["levels"]["1"]["speedup"] == pytest.approx(1.05)
    assert r["levels"]["8"]["speedup"] is None
    assert r["levels"]["8"]["flag"] == (
        "c=8 never had more than 2 requests in flight (num_prompts 2 < concurrency 8)"
    )
    assert table["rows"][0]["levels"]["8"]["speedup"] is None  # the baseline's own cell too
    assert any("not a c=8 measurement" in n for n in compare_notes(table))
    assert comparable.unfit(a)["levels"] == {8: r["levels"]["8"]["flag"]}


def test_incomplete_result_gets_no_speedup_and_says_how_many_failed():
    ok = row(61, [level(8, 1600.0, 16)], num_prompts=16)
    bad = row(62, [level(8, 1600.0, 16, errors=8)], num_prompts=16)
    table = compare_results([ok, bad])
    r = table["rows"][1]
    assert r["comparable"] is False and r["incomplete"] == "incomplete: 8 of 16 requests failed"
    assert r["decode_speedup"] is None and r["levels"]["8"]["speedup"] is None
    assert compare_notes(table) == [
        "result 62 is NOT comparable with baseline 61: incomplete: 8 of 16 requests failed "
        "(no speedup shown)"
    ]


def test_interrupted_or_crashed_result_says_why():
    lv = level(8, 1600.0, 16, errors=16)
    crashed = row(64, [lv], num_prompts=16, stopped="server CRASHED: CUDA error", complete=False)
    interrupted = row(65, [level(8, 1600.0, 4)], num_prompts=16)
    interrupted["result"].update(complete=False, stopped="interrupted (Ctrl-C)")
    rows = compare_results([row(61, [level(8, 1.0, 16)], 16), crashed, interrupted])["rows"]
    assert rows[1]["incomparable_reason"] == (
        "incomplete: server CRASHED: CUDA error; 16 of 16 requests failed"
    )
    assert rows[2]["incomparable_reason"] == "incomplete: interrupted (Ctrl-C)"


def test_incomplete_baseline_gives_nobody_a_speedup():
    bad = row(62, [level(8, 1600.0, 16, errors=8)], num_prompts=16)
    ok = row(61, [level(8, 1600.0, 16)], num_prompts=16)
    table = compare_results([bad, ok])
    assert table["rows"][1]["levels"]["8"]["speedup"] is None
    assert table["rows"][1]["incomparable_reason"] == (
        "baseline 62 is incomplete: 8 of 16 requests failed"
    )
    assert compare_notes(table)[0].startswith("baseline 62 is incomplete: 8 of 16")


def test_compare_cli_prints_no_bare_speedup_for_an_incomplete_result(capsys):
    with RunStore.open() as store:
        a = store.add_bench_result(None, row(0, [level(8, 1600.0, 16)], 16)["result"])
        bad = row(0, [level(8, 1600.0, 16, errors=8)], 16)["result"]
        b = store.add_bench_result(None, bad)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    line = next(
        ln for ln in out.splitlines() if ln.strip().startswith(f"│ {b} ") or f" {b} │" in ln
    )
    assert "n/c" in line and "1.00" not in line
    assert "incomplete: 8 of 16 requests failed" in out
    assert main(["compare", str(a), str(b), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["rows"][1]
    assert r["comparable"] is False and r["levels"]["8"]["speedup"] is None


def test_bench_notes_a_level_that_never_filled():
    res = build_result("concurrency", [level(8, 400.0, 2)], {}, {}, {}, None)
    assert res.notes == [
        "c=8 never had more than 2 requests in flight (send at least 8 prompts): its figures "
        "are not a c=8 measurement"
    ]
    assert render_plain(res)[0].startswith("note: c=8 never had more than 2")
    assert build_result("concurrency", [level(8, 1.0, 16)], {}, {}, {}, None).notes == []


ARGV = ["python3", "-u", "-m", "sglang.launch_server", "--model-path", "/m", "--tp-size", "8",
        "--attention-backend", "flashinfer"]  # fmt: skip


def test_argv_hash_leaves_out_placement_and_config_hash_counts_env_and_patches():
    a = [*ARGV, "--host", "0.0.0.0", "--port", "30000"]
    b = [*ARGV, "--port=30001", "--host", "127.0.0.1"]
    assert (
        comparable.argv_hash(a) == comparable.argv_hash(b) == comparable.argv_hash(" ".join(ARGV))
    )
    assert comparable.argv_hash([*ARGV, "--kv-cache-dtype", "fp8_e4m3"]) != comparable.argv_hash(a)
    plain = comparable.config_hash(a, {}, [])
    patched = comparable.config_hash(b, {"GLMSERVE_PATCHES": "flashinfer_mla_gather_cast"},
                          ["flashinfer_mla_gather_cast"])  # fmt: skip
    assert plain == comparable.config_hash(b, {}, []) and patched != plain


def test_context_recomputes_hashes_of_old_results_and_labels_url_results():
    old = {"id": 1, "result": {"settings": {}},
           "meta": {"argv": " ".join([*ARGV, "--port", "1"]), "argv_hash": "port-included",
                    "host": "gpu1", "run_id": "r1"}}  # fmt: skip
    assert comparable.context(old)["argv_hash"] == comparable.argv_hash(ARGV)
    assert (
        comparable.context({**old, "launch": {"env": {"GLMSERVE_PATCHES": "x"}, "patches": ["x"]}})[
            "config_hash"
        ]
        != comparable.context(old)["config_hash"]
    )
    url = {"id": 2, "result": {"server": {"args": {"tp_size": 2}, "version": "0.5.9"}},
           "meta": {"url": "http://10.0.0.5:30000", "client_host": "laptop"}}  # fmt: skip
    ctx = comparable.context(url)
    assert ctx["host"] is None and ctx["client_host"] == "laptop"
    assert ctx["server_url"] == "http://10.0.0.5:30000" and ctx["tp_size"] == 2


def test_a_level_where_no_request_got_a_response_has_no_underfill_note():
    """A server killed mid-bench: every request of the next level failed to connect, and
    the result said "c=4 never had more than 0 requests in flight (send at least 4
    prompts)" next to the failure."""
    from glmserve.bench.results import build_result

    dead = {"concurrency": 4, "requests": 8, "completed": 0, "errors": 8,
            "max_concurrency_seen": 0, "request_rate": None}  # fmt: skip
    res = build_result("concurrency", [dead], {}, {}, {}, None)
    assert res.complete is False and res.stopped == "8 of 8 requests failed"
    assert not any("in flight" in n for n in res.notes), res.notes
    assert comparable.underfilled(dead) is None
    few = dict(dead, completed=2, errors=0, max_concurrency_seen=2)  # a real underfill
    assert comparable.underfilled(few) == "c=4 never had more than 2 requests in flight"
