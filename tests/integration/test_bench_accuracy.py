"""``glmserve bench`` against the simulator, checked against its ground truth (``/sim/trace``:
the perf_counter time each token's chunk was written to the socket, same clock as the client).

Must show: single-stream decode tok/s within 1%, ITL p50 within 5%, aggregate output tok/s
within 2% at concurrency 256, and ``--sim-tokens-per-chunk 4`` giving the same token counts and
tok/s as 1. The simulator runs 20x faster than real time so CI stays quick.
"""

from __future__ import annotations

import json

import httpx
import pytest

from glmserve.bench import groundtruth as gt
from glmserve.cli import main

# ~50 tok/s per stream (20 ms ITL): scheduling jitter of a busy 2-core box (a few ms at the
# ends of a stream) stays well under the 1% being checked.
SIM = ["--tp-size", "2", "--disable-cuda-graph", "--sim-speed", "5"]
# 256 streams need a faster server to finish quickly; the aggregate is a window average
SIM_FAST = ["--tp-size", "2", "--disable-cuda-graph", "--sim-speed", "20"]


def bench(capsys, url: str, *args: str) -> dict:
    rc = main(["bench", "--url", url, "--json", "--warmup", "0", *args])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def trace(url: str) -> dict:
    return httpx.get(url + "/sim/trace", timeout=30).json()


def test_single_stream_decode_and_itl_match_ground_truth(capsys, start_simulator):
    sim = start_simulator(*SIM)
    res = bench(capsys, sim.url, "--mode", "decode", "--num-prompts", "3", "--output-len", "64")
    lv = res["levels"][0]
    assert lv["errors"] == 0 and lv["completed"] == 3
    assert lv["output_tokens"] == 3 * 64  # the server's counts, exactly
    tr = trace(sim.url)
    since = lv["window_start"]
    truth_rate = gt.truth_decode_tok_s(tr, since)
    truth_itl_ms = gt.truth_itl_p50(tr, since) * 1000
    assert truth_rate and truth_rate > 20  # the simulator really streamed
    assert res["decode_tok_s"] == pytest.approx(truth_rate, rel=0.01)
    assert lv["itl_ms"]["p50"] == pytest.approx(truth_itl_ms, rel=0.05)
    assert lv["tpot_ms"]["p50"] == pytest.approx(1000 / res["decode_tok_s"], rel=0.05)


@pytest.mark.slow
def test_aggregate_tok_s_at_concurrency_256_matches_ground_truth(capsys, start_simulator):
    sim = start_simulator(*SIM_FAST)
    # Four waves of 128-token requests give a steady window of ~4-8 s. The client's lag behind
    # the server drifts by tens of ms on a contended 2-core box; over the ~1 s window that two
    # waves of 64 tokens gave, that drift alone once cost 2.4% (CI, 2026-11-30). Over 4+ s it
    # stays under 0.2% even with three busy loops competing for the two cores.
    res = bench(capsys, sim.url, "--mode", "concurrency", "--concurrency", "256",
                "--num-prompts", "1024", "--output-len", "128", "--input-len", "32")  # fmt: skip
    lv = res["levels"][0]
    assert lv["errors"] == 0 and lv["completed"] == 1024
    assert lv["window_kind"] == "steady"
    tr = trace(sim.url)
    truth = gt.truth_tok_s(tr, lv["window_start"], lv["window_end"])
    assert truth and truth > 1000
    assert lv["output_tok_s"] == pytest.approx(truth, rel=0.02)
    # the client really held 256 streams: the server ran full batches in the window
    steps = [s for s in tr["steps"] if lv["window_start"] <= s["end"] <= lv["window_end"]]
    assert max(s["batch"] for s in steps if s["kind"] == "decode") == 256


@pytest.mark.slow
def test_multi_token_chunks_give_same_counts_and_rates(capsys, start_simulator):
    one = start_simulator(*SIM, "--sim-tokens-per-chunk", "1")
    four = start_simulator(*SIM, "--sim-tokens-per-chunk", "4")
    for h in (one, four):
        assert httpx.get(h.url + "/sim/trace").json()["tokens_per_chunk"] in (1, 4)
    args = ("--mode", "decode", "--num-prompts", "3", "--output-len", "64")
    r1, r4 = bench(capsys, one.url, *args), bench(capsys, four.url, *args)
    assert r1["levels"][0]["output_tokens"] == r4["levels"][0]["output_tokens"] == 3 * 64
    # Each against its own server's ground truth: on a loaded box each simulator is late by
    # its own share of the CPU (it never catches up, simulator/engine.py), so two servers of
    # one config no longer agree to 1% with each other, only with what they emitted.
    for res, sim in ((r1, one), (r4, four)):
        truth = gt.truth_decode_tok_s(trace(sim.url), res["levels"][0]["window_start"])
        assert res["decode_tok_s"] == pytest.approx(truth, rel=0.01)
    # under concurrency too: same tokens, same aggregate rate
    cargs = ("--mode", "concurrency", "--concurrency", "16", "--num-prompts", "16",
             "--output-len", "64")  # fmt: skip
    c1, c4 = bench(capsys, one.url, *cargs), bench(capsys, four.url, *cargs)
    assert c1["levels"][0]["output_tokens"] == c4["levels"][0]["output_tokens"] == 16 * 64
    for res, sim in ((c1, one), (c4, four)):
        lv = res["levels"][0]
        truth = gt.truth_tok_s(trace(sim.url), lv["window_start"], lv["window_end"])
        assert lv["output_tok_s"] == pytest.approx(truth, rel=0.03)


@pytest.mark.parametrize("api", ["openai", "chat"])
def test_openai_apis_use_usage_counts(capsys, start_simulator, api):
    sim = start_simulator(*SIM)
    res = bench(capsys, sim.url, "--api", api, "--num-prompts", "2", "--output-len", "32")
    lv = res["levels"][0]
    assert lv["errors"] == 0
    assert lv["output_tokens"] == 2 * 32
    truth = gt.truth_decode_tok_s(trace(sim.url), lv["window_start"])
    assert res["decode_tok_s"] == pytest.approx(truth, rel=0.02)


def test_server_side_readings_beside_the_clients(capsys, start_simulator):
    sim = start_simulator(*SIM_FAST, "--enable-metrics")
    res = bench(capsys, sim.url, "--mode", "concurrency", "--concurrency", "8",
                "--num-prompts", "16", "--output-len", "128")  # fmt: skip
    lv = res["levels"][0]
    srv = lv["server"]
    # /metrics counter delta over the level == the tokens the client counted, exactly
    assert srv["generation_tokens"] == lv["output_tokens"] == 16 * 128
    assert srv["ttft_mean_ms"] > 0 and srv["e2e_mean_ms"] > 0
    assert srv["generation_tok_s"] == pytest.approx(lv["output_tok_s"], rel=0.3)
    assert res["server"]["version"] and res["server"]["args"]["tp_size"] == 2
