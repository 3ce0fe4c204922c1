"""Open-loop ``bench --request-rate`` against the simulator, checked against its ground truth
(``/sim/trace``, the same perf_counter clock as the client): the achieved request rate is the
one offered, and TTFT/TPOT/ITL/E2E and output tok/s match what the server really did over the
same window."""

from __future__ import annotations

import itertools
import json

import httpx
import pytest

from glmserve.bench import groundtruth as gt
from glmserve.bench.metrics import percentile, stream_metrics
from glmserve.cli import main

SIM = ["--tp-size", "2", "--disable-cuda-graph", "--sim-speed", "2"]
# Inside the spread this load gives (TTFT ~10-60 ms, TPOT ~49-60 ms), so goodput is neither
# 0 nor everything and really depends on each request's figures.
SLO_TTFT_MS, SLO_TPOT_MS = 30.0, 58.0


def bench(capsys, url: str, *args: str) -> dict:
    rc = main(["bench", "--url", url, "--json", "--warmup", "0", *args])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def test_request_rate_20_is_achieved_and_matches_ground_truth(capsys, start_simulator):
    sim = start_simulator(*SIM)
    res = bench(capsys, sim.url, "--request-rate", "20", "--num-prompts", "200",
                "--input-len", "32", "--output-len", "32", "--random-range-ratio", "1",
                "--output-details",
                "--slo", f"ttft_ms={SLO_TTFT_MS},tpot_ms={SLO_TPOT_MS}")  # fmt: skip
    assert res["mode"] == "rate" and res["complete"]
    lv = res["levels"][0]
    assert lv["load"] == "open" and lv["request_rate"] == 20
    assert lv["completed"] == 200 and lv["errors"] == 0
    assert lv["achieved_request_rate"] == pytest.approx(20.0, rel=0.05)
    assert lv["request_throughput"] == pytest.approx(200 / lv["duration_s"])
    assert lv["windows"]["output_tok_s"] == "full"
    assert len(lv["per_request"]["ttft_ms"]) == 200
    tr = httpx.get(sim.url + "/sim/trace", timeout=30).json()
    # --random-range-ratio 1: every request has exactly the lengths asked for (the default,
    # 0.0 as in bench_serving, draws them from [1, 32]); the input figure is checked against
    # the prompt tokens the server received.
    prompt_tokens = [int(r["prompt_tokens"]) for r in tr["requests"].values()]
    assert prompt_tokens == [32] * 200
    assert lv["input_tok_s"] == pytest.approx(sum(prompt_tokens) / lv["duration_s"], rel=0.02)
    truth = gt.trace_records(tr, since=lv["window_start"] - 1e-3)
    assert len(truth) == 200
    ms = [stream_metrics(r) for r in truth]
    want = {
        "ttft_ms": percentile([m.ttft for m in ms], 50),
        "tpot_ms": percentile([m.tpot for m in ms if m.tpot], 50),
        "itl_ms": percentile([x for m in ms for x in m.itls], 50),
        "e2e_ms": percentile([m.e2e for m in ms], 50),
    }
    # The client's TTFT also holds the request's trip from its send to the simulator's arrival
    # stamp (HTTP parsing in a busy Python server: 0.6-0.8 ms measured on an idle 2-core box,
    # up to 1.5 ms with other tests running, at the old code as well), which the server cannot
    # see: 2 ms absolute covers that trip.
    for key, value in want.items():
        slack = 2.0 if key == "ttft_ms" else 0.0
        assert lv[key]["p50"] == pytest.approx(value * 1000, rel=0.02, abs=slack), key
    tok_truth = gt.truth_tok_s(tr, lv["window_start"], lv["window_end"])
    assert lv["output_tok_s"] == pytest.approx(tok_truth, rel=0.02)
    # full-window figures against the server's: its requests / first arrival to last emission
    first = min(r.send for r in truth)
    last = max(r.chunk_times[-1] for r in truth)
    assert lv["request_throughput"] == pytest.approx(200 / (last - first), rel=0.02)
    busy = sum(r.chunk_times[-1] - r.send for r in truth)
    assert lv["achieved_concurrency"] == pytest.approx(busy / (last - first), rel=0.02)

    # goodput: the same SLOs applied to what the server did. The client's TTFT is the server's
    # plus the request's trip, so the client's good count lies between the server's count with
    # the TTFT bound one trip tighter and its count at the bound itself. The p50 trip is under
    # 2 ms (above), but single requests took over 2 ms with three other test runs on the two
    # cores (2026-12-02: 2 of 200): the bound allows 5 ms for the slowest trips.
    def good_truth(ttft_bound_ms: float) -> int:
        return sum(
            1 for m in ms if m.ttft * 1000 <= ttft_bound_ms and (m.tpot or 0) * 1000 <= SLO_TPOT_MS
        )

    low, high = good_truth(SLO_TTFT_MS - 5.0), good_truth(SLO_TTFT_MS)
    assert 20 < low <= high < 180 and high - low < 90
    assert low <= lv["good_requests"] <= high
    assert lv["goodput"] == pytest.approx(lv["good_requests"] / (last - first), rel=0.02)
    pr = lv["per_request"]
    recount = sum(1 for t, p in zip(pr["ttft_ms"], pr["tpot_ms"], strict=True)
                  if t <= SLO_TTFT_MS and (p or 0) <= SLO_TPOT_MS)  # fmt: skip
    assert recount == lv["good_requests"]
    # the server saw the arrivals at the offered rate too
    arrivals = sorted(float(r["arrival"]) for r in tr["requests"].values())
    assert (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]) == pytest.approx(20.0, rel=0.05)
    # ... as a Poisson process: the gaps the server saw are exponential with mean 1/20 s
    # (Kolmogorov-Smirnov; the seeded schedule itself scores p = 0.58), and each arrival is
    # where the schedule put it, give or take the trip (not bunched or drifting)
    from scipy import stats

    from glmserve.bench.loops import arrival_offsets

    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert stats.kstest(gaps, "expon", args=(0, 1 / 20)).pvalue > 0.01
    planned = arrival_offsets(200, 20.0, 1.0, 0)
    lag = [a - arrivals[0] - (t - planned[0]) for a, t in zip(arrivals, planned, strict=True)]
    assert max(abs(x) for x in lag) < 0.03, max(lag)
