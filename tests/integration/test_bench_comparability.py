"""``compare`` between results that cannot be compared (issue 14 #4): a speed-1 and a speed-10
simulated result name ``sim_speed`` instead of a bare speedup; different output lengths name
``output_len``; stored results carry what makes them comparable."""

from __future__ import annotations

import json

import pytest

from glmserve.cli import main


def cli(capsys, *args: str) -> tuple[int, str]:
    rc = main(list(args))
    return rc, capsys.readouterr().out


def bench(capsys, url: str, *args: str) -> dict:
    # defaults only where args leave them out: an option given twice with two values is refused
    defaults = [x for flag, v in (("--num-prompts", "2"), ("--output-len", "16"))
                if flag not in args for x in (flag, v)]  # fmt: skip
    code, out = cli(capsys, "bench", "--url", url, "--json", "--warmup", "0", *defaults, *args)
    assert code == 0, out
    return json.loads(out)


def test_speed_1_vs_speed_10_names_the_differing_setting(capsys, start_simulator):
    slow = start_simulator("--disable-cuda-graph", "--sim-speed", "1")
    fast = start_simulator("--disable-cuda-graph", "--sim-speed", "10")
    a, b = bench(capsys, slow.url), bench(capsys, fast.url)
    assert a["meta"]["sim_speed"] == 1 and b["meta"]["sim_speed"] == 10
    assert b["decode_tok_s"] > 5 * a["decode_tok_s"]  # the raw ratio a bare compare printed

    code, out = cli(capsys, "compare", str(a["id"]), str(b["id"]))
    assert code == 0
    assert "NOT comparable" in out and "sim_speed 10 vs 1" in out
    assert "n/c" in out
    ratio = f"{b['decode_tok_s'] / a['decode_tok_s']:.2f}"
    assert ratio not in out  # no bare speedup anywhere

    code, out = cli(capsys, "compare", str(a["id"]), str(b["id"]), "--json")
    row = json.loads(out)["rows"][1]
    assert row["comparable"] is False and row["decode_speedup"] is None
    assert row["incomparable"] == [{"field": "sim_speed", "baseline": 1.0, "value": 10.0}]


def test_output_len_difference_is_named_and_equal_settings_compare(capsys, start_simulator):
    sim = start_simulator("--disable-cuda-graph", "--sim-speed", "10")
    a = bench(capsys, sim.url)
    b = bench(capsys, sim.url, "--output-len", "32")
    c = bench(capsys, sim.url)
    _code, out = cli(capsys, "compare", str(a["id"]), str(b["id"]), str(c["id"]), "--json")
    rows = json.loads(out)["rows"]
    assert rows[1]["incomparable_reason"] == "output_len 32 vs 16"
    assert rows[2]["comparable"] and rows[2]["decode_speedup"] == pytest.approx(1.0, rel=0.2)


def test_two_prompts_at_c8_is_neither_comparable_nor_a_c8_figure(capsys, start_simulator):
    """The audit's case: 2 prompts at --concurrency 8 never had more than 2 in flight, yet
    compare printed ``c=8 ... 0.25`` against 200 prompts."""
    sim = start_simulator("--tp-size", "2", "--disable-cuda-graph", "--sim-speed", "20")
    args = ("--mode", "concurrency", "--concurrency", "8", "--output-len", "64")
    few = bench(capsys, sim.url, *args, "--num-prompts", "2")
    many = bench(capsys, sim.url, *args, "--num-prompts", "200")
    assert few["levels"][0]["max_concurrency_seen"] == 2
    assert few["notes"] and "c=8 never had more than 2 requests in flight" in few["notes"][0]

    code, out = cli(capsys, "compare", str(many["id"]), str(few["id"]))
    assert code == 0 and "num_prompts 2 vs 200" in out
    row = next(ln for ln in out.splitlines() if ln.startswith(f"│ {few['id']:>6} "))
    ratio = few["levels"][0]["output_tok_s"] / many["levels"][0]["output_tok_s"]
    assert "n/c" in row and f"{ratio:.2f}" not in row

    code, out = cli(capsys, "compare", str(few["id"]), str(few["id"]), "--json")
    level = json.loads(out)["rows"][0]["levels"]["8"]
    assert level["speedup"] is None and "never had more than 2" in level["flag"]
