"""The simulator aborts requests as SGLang does, and the bench counts them as failed.

``--max-queued-requests`` (0.5.9 scheduler.py:1726-1770): a request that finds the waiting
queue full is aborted at once, its stream one ``_handle_abort_req`` chunk (finish_reason
``{"type": "abort", "message": "The request queue is full.", "status_code": 503}``) then
``[DONE]``; not streamed, FastAPI's 503 ``{"detail": ...}``. ``--sim-abort-after-tokens``:
a running request ended as ``/abort_request`` ends it (FINISH_ABORT on its last chunk).
Before (issue 20) the simulator ignored ``--max-queued-requests`` and had no abort at all."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from tests.fixtures.cli import run_glmserve

from glmserve.store import RunStore

GEN = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8, "ignore_eos": True},
       "stream": True}  # fmt: skip


def _events(url: str, body: dict) -> list:
    with httpx.stream("POST", url + "/generate", json=body, timeout=120) as r:
        assert r.status_code == 200
        lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
    return [ln[6:] if ln == "data: [DONE]" else json.loads(ln[6:]) for ln in lines]


def test_sim_abort_after_tokens_ends_a_stream_as_abort_request_does(start_simulator):
    sim = start_simulator("--disable-cuda-graph", "--sim-speed", "20",
                          "--sim-abort-after-tokens", "3")  # fmt: skip
    events = _events(sim.url, GEN)
    assert events[-1] == "[DONE]"
    last = events[-2]["meta_info"]
    assert last["finish_reason"] == {"type": "abort", "message": "Aborted",
                                     "status_code": None, "err_type": None}  # fmt: skip
    assert last["completion_tokens"] == 3 and last["prompt_tokens"] == 3
    r = httpx.post(sim.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 8},
                   timeout=30).json()  # fmt: skip
    assert r["choices"][0]["finish_reason"] == "abort" and r["usage"]["completion_tokens"] == 3


@pytest.mark.slow
def test_bench_against_sim_aborts_is_incomplete_with_the_reason(start_simulator):
    sim = start_simulator("--disable-cuda-graph", "--sim-speed", "20",
                          "--sim-abort-after-tokens", "3", "--sim-abort-every", "2")  # fmt: skip
    res = run_glmserve("bench", "--url", sim.url, "--json", "--warmup", "0",
                       "--num-prompts", "4", "--output-len", "8")  # fmt: skip
    assert res.returncode == 7, res.stderr
    data = json.loads(res.stdout)
    lv = data["levels"][0]
    assert data["complete"] is False and lv["errors"] == 2 and lv["completed"] == 2
    assert lv["error_samples"] == ["aborted by the server after 3 of 8 tokens: Aborted"]
    with RunStore.open() as store:
        assert store.get_bench_result(data["id"])["result"]["complete"] is False


def _wait(pred, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


@pytest.mark.slow
def test_max_queued_requests_aborts_a_request_that_finds_the_queue_full(start_simulator):
    # 4x: the running request still lasts seconds (the window for the probes below), and the
    # test does not wait half a minute for both long requests to finish
    sim = start_simulator("--disable-cuda-graph", "--sim-speed", "4", "--max-running-requests",
                          "1", "--max-queued-requests", "1")  # fmt: skip
    long = {**GEN, "sampling_params": {"max_new_tokens": 120, "ignore_eos": True}}
    got: list[list] = []
    workers = [threading.Thread(target=lambda: got.append(_events(sim.url, long)))
               for _ in range(2)]  # fmt: skip

    def trace() -> list[dict]:
        return list(httpx.get(sim.url + "/sim/trace?", timeout=5).json()["requests"].values())

    workers[0].start()  # runs
    _wait(lambda: any(r["admitted"] and r["max_new_tokens"] == 120 for r in trace()))
    workers[1].start()  # waits in the queue (one running request at most)
    _wait(lambda: sum(r["max_new_tokens"] == 120 for r in trace()) == 2)
    events = _events(sim.url, GEN)  # finds the queue full
    assert events == [
        {"text": "", "output_ids": [], "meta_info": {
            "id": events[0]["meta_info"]["id"],
            "finish_reason": {"type": "abort", "message": "The request queue is full.",
                              "status_code": 503},
            "weight_version": "default", "e2e_latency": events[0]["meta_info"]["e2e_latency"],
            "completion_tokens": 0}},
        "[DONE]",
    ]  # fmt: skip
    r = httpx.post(sim.url + "/generate", json={**GEN, "stream": False}, timeout=10)
    assert r.status_code == 503 and r.json() == {"detail": "The request queue is full."}
    for w in workers:
        w.join(timeout=120)
    assert [e[-2]["meta_info"]["finish_reason"]["type"] for e in got] == ["length", "length"]


@pytest.mark.slow
def test_bench_against_a_full_queue_counts_the_aborted_requests(start_simulator):
    sim = start_simulator("--disable-cuda-graph", "--sim-speed", "5", "--max-running-requests",
                          "1", "--max-queued-requests", "1")  # fmt: skip
    res = run_glmserve("bench", "--url", sim.url, "--json", "--warmup", "0", "--mode",
                       "concurrency", "--concurrency", "4", "--num-prompts", "8",
                       "--output-len", "32")  # fmt: skip
    assert res.returncode == 7, res.stderr
    lv = json.loads(res.stdout)["levels"][0]
    assert lv["completed"] >= 1 and lv["errors"] >= 1 and lv["requests"] == 8
    assert lv["error_samples"] == [
        "aborted by the server after 0 of 32 tokens: The request queue is full. (status 503)"
    ]
