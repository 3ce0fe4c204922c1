"""Issue 14 #1 rate sweep (guidellm's): synchronous, then everything at once, then rates
between; the server's capacity (``--max-running-requests``) is where it saturates."""

from __future__ import annotations

import json

import pytest

from glmserve.bench.session import saturation, sweep_rates
from glmserve.cli import main


def test_sweep_rates_lie_strictly_between():
    assert sweep_rates(1.0, 5.0, 3) == [2.0, 3.0, 4.0]
    assert sweep_rates(2.0, 2.0, 3) == [2.0]


def test_saturation_is_the_last_rate_before_queues_grow():
    levels = [{"request_rate": r, "e2e_trend": t, "request_throughput": 1.0}
              for r, t in ((2.0, 1.0), (4.0, 1.1), (6.0, 2.5), (8.0, 1.2))]  # fmt: skip
    levels.append({"request_rate": "inf", "e2e_trend": 4.0, "request_throughput": 7.0})
    sat = saturation(levels)
    assert sat["rate"] == 4.0 and sat["max_request_throughput"] == 7.0
    assert [m["saturated"] for m in sat["rates"]] == [False, False, True, False]


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
    assert not sat["rates"][0]["saturated"]  # the lowest rate is kept up with
    assert sat["rate"] is not None and sat["rate"] >= rates[0]
