"""Pure tests: BenchResult round trip, gates, and compare's speedup table."""

from __future__ import annotations

import pytest

from glmserve.bench.compare import compare_results
from glmserve.bench.results import (
    BenchResult,
    build_result,
    evaluate_gates,
    parse_output_gate,
    render_plain,
)
from glmserve.cli.views import render_compare, render_table
from glmserve.errors import ConfigError


def level(c: int, out: float | None, dec: float | None = 20.0, ttft: float | None = 50.0) -> dict:
    pct = lambda v: {"p50": v, "p90": v, "p99": v, "mean": v}  # noqa: E731
    return {"concurrency": c, "output_tok_s": out, "decode_tok_s": pct(dec), "ttft_ms": pct(ttft),
            "itl_ms": pct(1.0), "tpot_ms": pct(1.0), "e2e_ms": pct(9.0), "queue_ms": pct(0.1),
            "errors": 0, "completed": 4, "requests": 4, "max_concurrency_seen": c}  # fmt: skip


def test_decode_headline_comes_from_the_single_level():
    r = build_result("decode", [level(1, 19.0, dec=21.5, ttft=40.0)], {}, {}, {}, None)
    assert r.decode_tok_s == 21.5 and r.ttft_ms == 40.0 and r.complete
    inc = build_result("decode", [level(1, 1.0)], {}, {}, {}, "interrupted (Ctrl-C)")
    assert not inc.complete and inc.stopped == "interrupted (Ctrl-C)"


def test_result_round_trips_through_dict_with_version():
    r = build_result("concurrency", [level(1, 10.0), level(8, 70.0)], {"seed": 1}, {}, {}, None)
    d = r.to_dict()
    assert next(iter(d)) == "version" and d["version"] == 1 and d["errors"] == 0
    back = BenchResult.from_dict(d)
    assert back.levels == r.levels and back.settings == {"seed": 1}
    with pytest.raises(ConfigError, match="version"):
        BenchResult.from_dict({**d, "version": 99})


def test_gates_pass_fail_and_missing():
    r = build_result("concurrency", [level(1, 10.0, dec=12.0, ttft=80.0), level(8, 70.0)],
                     {}, {}, {}, None)  # fmt: skip
    g = evaluate_gates(r, min_decode_tok_s=11.0, max_ttft_ms=100.0, min_output_tok_s=[(8, 60.0)])
    assert all(x["ok"] for x in g), g
    g = evaluate_gates(r, min_decode_tok_s=13.0, max_ttft_ms=60.0, min_output_tok_s=[(8, 80.0)])
    # decode, TTFT at c=1 (80 ms), TTFT at c=8 (50 ms, within), output at c=8
    assert [x["ok"] for x in g] == [False, False, True, False]
    assert "below the minimum 13" in g[0]["reason"]
    assert "above the maximum 60" in g[1]["reason"]
    missing = evaluate_gates(r, min_output_tok_s=[(64, 1.0)])[0]
    assert not missing["ok"] and "not measured" in missing["reason"]
    none = build_result("decode", [level(1, None, dec=None)], {}, {}, {}, None)
    assert "no decode step measured" in evaluate_gates(none, min_decode_tok_s=1.0)[0]["reason"]


@pytest.mark.parametrize("bad", ["64", "x:1", "64:", ":5"])
def test_output_gate_parse_errors_name_the_flag(bad):
    with pytest.raises(ConfigError, match="--min-output-tok-s"):
        parse_output_gate(bad)
    assert parse_output_gate("64:500.5") == (64, 500.5)


def test_renderers_consume_the_result():
    r = build_result("decode", [level(1, 19.0)], {}, {}, {}, "interrupted (Ctrl-C)")
    r.gates = evaluate_gates(r, min_decode_tok_s=1.0)
    assert "INCOMPLETE" in str(render_table(r).title)
    assert render_plain(r) == [f"gate min-decode-tok-s: {r.gates[0]['reason']}"]


def row(i: int, run: str, res: BenchResult, profile: str) -> dict:
    return {"id": i, "run_id": run, "created_at": 0.0, "result": res.to_dict(),
            "meta": {"profile": profile}}  # fmt: skip


def test_compare_speedups_against_first_or_chosen_baseline():
    a = row(1, "r-a", build_result("concurrency", [level(1, 10.0, dec=10.0), level(16, 100.0)],
                                   {}, {}, {}, None), "flashinfer_gtc")  # fmt: skip
    b = row(2, "r-b", build_result("concurrency", [level(1, 13.5, dec=13.5), level(16, 250.0)],
                                   {}, {}, {}, None), "trtllm_mla")  # fmt: skip
    c = row(3, "r-c", build_result("decode", [level(1, 27.0, dec=27.0)], {}, {}, {}, None),
            "cutlass_mla")  # fmt: skip
    t = compare_results([a, b, c])
    assert t["baseline"] == 1 and t["concurrency"] == [1, 16]
    rows = {r["id"]: r for r in t["rows"]}
    assert rows[1]["decode_speedup"] == pytest.approx(1.0)
    assert rows[2]["decode_speedup"] == pytest.approx(1.35)
    assert rows[2]["levels"]["16"]["speedup"] == pytest.approx(2.5)
    assert rows[3]["levels"]["16"] == {"output_tok_s": None, "speedup": None, "flag": None}
    assert rows[3]["profile"] == "cutlass_mla"
    by_run = compare_results([a, b, c], baseline="r-b")
    assert by_run["baseline"] == 2
    assert {r["id"]: r for r in by_run["rows"]}[3]["decode_speedup"] == pytest.approx(2.0)
    assert "baseline: result 2" in str(render_compare(by_run).title)
    with pytest.raises(ConfigError, match="--baseline"):
        compare_results([a, b], baseline="r-zzz")
    with pytest.raises(ConfigError):
        compare_results([])
