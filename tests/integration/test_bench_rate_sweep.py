"""Issue 14 #1 rate sweep (guidellm's): synchronous, then everything at once, then rates
between, against the simulator; the saturation rule itself is tested on hand-built levels in
tests/unit/test_bench_ratesweep.py."""

from __future__ import annotations

import json

import pytest

from glmserve.bench.ratesweep import SATURATION
from glmserve.cli import main


def test_rate_sweep_against_the_simulator(capsys, start_simulator):
    sim = start_simulator("--disable-cuda-graph", "--sim-speed", "20",
                          "--max-running-requests", "8")  # fmt: skip
    rc = main(["bench", "--url", sim.url, "--json", "--warmup", "0", "--rate-sweep", "3",
               "--num-prompts", "64", "--input-len", "32", "--output-len", "32"])  # fmt: skip
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    res = json.loads(cap.out)
    assert res["mode"] == "rate"
    lv = res["levels"]
    assert lv[0]["load"] == "closed" and lv[0]["concurrency"] == 1
    assert lv[1]["request_rate"] == "inf"
    low, high = lv[0]["request_throughput"], lv[1]["request_throughput"]
    assert high > 2 * low  # batching: 8 at once beat one at a time
    rates = [x["request_rate"] for x in lv[2:]]
    assert len(rates) == 3 and low < rates[0] < rates[1] < rates[2] < high
    for x in lv[2:]:
        assert x["achieved_request_rate"] == pytest.approx(x["request_rate"], rel=0.1)
    sat = res["sweep"]
    assert sat["max_request_throughput"] == high
    assert sat["rule"] == SATURATION and res["settings"]["random_range_ratio"] == 1.0
    assert not sat["rates"][0]["saturated"]  # the lowest rate is kept up with
    assert sat["rates"][0]["saturated_by"] == []
    assert sat["rate"] is not None and sat["rate"] >= rates[0]
