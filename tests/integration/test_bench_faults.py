"""Faults through the real console entry point against the simulator: a server that dies
mid-run, and Ctrl-C. Both must end promptly, print and store the partial result marked
incomplete, and exit with the documented code (5 transport, 130 interrupted)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import httpx
import pytest
from tests.fixtures.cli import GLMSERVE

from glmserve.store import RunStore

SIM = ["--tp-size", "2", "--disable-cuda-graph", "--sim-speed", "5"]


def start_bench(url: str, *args: str) -> subprocess.Popen:
    cmd = [*GLMSERVE, "bench", "--url", url,
           "--json", "--warmup", "0", *args]  # fmt: skip
    # A shell starts background jobs with SIGINT ignored and children inherit that; restore
    # the default so the child behaves like a foreground command receiving Ctrl-C.
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_finished_requests(url: str, n: int, timeout: float = 30.0) -> None:
    """Poll the simulator's trace until ``n`` requests have produced all their tokens."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reqs = httpx.get(url + "/sim/trace", timeout=5).json()["requests"].values()
        if sum(1 for r in reqs if r["finish"]) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} requests finished within {timeout}s")


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int, dict, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"bench did not end within {timeout}s:\n{err[-2000:]}") from None
    return proc.returncode, (json.loads(out) if out.strip() else {}), err


@pytest.mark.slow
def test_dead_server_mid_run_ends_promptly_with_partial_results(start_simulator):
    sim = start_simulator(*SIM)
    proc = start_bench(sim.url, "--mode", "concurrency", "--concurrency", "4",
                       "--num-prompts", "400", "--output-len", "48")  # fmt: skip
    wait_finished_requests(sim.url, 4)
    sim.stop()  # SIGKILL the simulator's process group
    t0 = time.monotonic()
    code, data, err = finish(proc, timeout=20)
    assert time.monotonic() - t0 < 10  # promptly, not after stall timeouts
    assert code == 5, err
    assert sim.url in err.strip().splitlines()[-1]
    assert data["complete"] is False and "server unreachable" in data["stopped"]
    lv = data["levels"][0]
    assert lv["completed"] >= 4 and lv["errors"] >= 1 and lv["requests"] < 400
    with RunStore.open() as store:
        stored = store.get_bench_result(data["id"])
    assert stored["result"]["complete"] is False


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_saves_partial_results_marked_incomplete(start_simulator, workers, sig):
    """SIGTERM (a CI timeout, `kill`) as Ctrl-C: an audit found it ended the bench with 143,
    nothing stored and its worker processes orphaned, still sending load."""
    sim = start_simulator(*SIM)
    proc = start_bench(sim.url, "--mode", "concurrency", "--concurrency", "4", "--workers",
                       workers, "--num-prompts", "400", "--output-len", "48")  # fmt: skip
    wait_finished_requests(sim.url, 4)
    children = _children(proc.pid)
    assert len(children) >= (2 if workers == "2" else 0)
    os.kill(proc.pid, sig)  # the bench process we started, by its pid
    code, data, err = finish(proc, timeout=20)
    assert code == 130, err
    for child in children:  # every worker ended with its parent (none left sending load)
        with pytest.raises(ProcessLookupError):
            os.kill(child, 0)
    assert data["complete"] is False and data["stopped"].startswith("interrupted")
    lv = data["levels"][0]
    assert lv["completed"] >= 4
    assert lv["requests"] < 400
    assert lv["output_tok_s"] is None or lv["output_tok_s"] > 0
    with RunStore.open() as store:
        assert store.get_bench_result(data["id"])["result"]["stopped"].startswith("interrupted")


def test_url_server_with_a_dead_worker_ends_the_bench_not_each_request(start_simulator):
    """An audit: with --url, a silently dead scheduler (SGLang does not notice, /health turns
    503) made every request wait out its own --stall-timeout: 344 of 400 failed over 4.5
    minutes, exit 0. After a failed request the bench now asks /health, stops at a 503 and
    exits 3, the partial result stored incomplete."""
    sim = start_simulator(*SIM, "--sim-worker-death-after", "3",
                          env={"SGLANG_HEALTH_CHECK_TIMEOUT": "2"})  # fmt: skip
    t0 = time.monotonic()
    # the default --stall-timeout (120 s): streams that go silent for 10 s make the bench
    # ask /health as a failed request would (audit round 2: it waited out the 120 s)
    proc = start_bench(sim.url, "--mode", "concurrency", "--concurrency", "4", "--num-prompts",
                       "400", "--output-len", "64")  # fmt: skip
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert time.monotonic() - t0 < 60
    last = err.strip().splitlines()[-1]
    assert f"the server at {sim.url} answered GET /health -> 503" in last
    data = json.loads(out)
    assert data["complete"] is False and data["levels"][0]["errors"] <= 4
    with RunStore.open() as store:
        assert store.list_bench_results()[0]["result"]["complete"] is False


def test_url_server_whose_worker_died_before_the_bench_is_a_crash(start_simulator):
    """Audit round 2: /server_info hangs once a scheduler is dead, and the bench said
    "cannot reach server ... timed out" (exit 5) while /health answered 503."""
    sim = start_simulator(*SIM, "--sim-worker-death-after", "0.5",
                          env={"SGLANG_HEALTH_CHECK_TIMEOUT": "1"})  # fmt: skip
    deadline = time.monotonic() + 30
    while httpx.get(sim.url + "/health", timeout=10).status_code != 503:
        assert time.monotonic() < deadline, "the worker never died"
        time.sleep(0.5)
    proc = start_bench(sim.url, "--num-prompts", "2")
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert "answered GET /health -> 503" in err.strip().splitlines()[-1]


def test_a_worker_dying_during_the_warmup_is_caught_by_the_silence_watch(start_simulator):
    """A scheduler that dies while the warmup request streams (SGLang does not notice; only
    /health turns 503): the warmup is watched like a level, so 10 s of silence asks /health
    and the bench ends as a crash (exit 3), not after the 120 s --stall-timeout and then a
    measurement of a dead server (2 min 15 s in an audit)."""
    sim = start_simulator("--disable-cuda-graph", "--sim-speed", "20",
                          "--sim-worker-death-after", "3")  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*GLMSERVE, "bench", "--url", sim.url, "--json", "--warmup", "1", "--mode",
         "concurrency", "--concurrency", "2", "--output-len", "20000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _out, err = proc.communicate(timeout=150)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 3, err
    assert "/health -> 503" in err.strip().splitlines()[-1]
    assert elapsed < 60, f"took {elapsed:.0f} s: the warmup waited out the stall timeout"


def test_ctrl_c_during_the_warmup_says_nothing_was_measured(start_simulator):
    """Ctrl-C while the warmup streams: its requests are discarded by design, so the stored
    result has no level; it said "partial results stored" as if something had been measured."""
    sim = start_simulator(*SIM)
    proc = subprocess.Popen(
        [*GLMSERVE, "bench", "--url", sim.url, "--json", "--warmup", "1", "--mode",
         "concurrency", "--concurrency", "2", "--output-len", "5000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not any(r["gen_times"] for r in _trace_requests(sim.url)):  # the warmup streams
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGINT)
    code, data, err = finish(proc, timeout=20)
    assert code == 130, err
    assert data["levels"] == [] and data["complete"] is False
    assert data["stopped"].startswith("interrupted during the warmup")
    last = err.strip().splitlines()[-1]
    assert "interrupted during the warmup: nothing measured" in last
    assert "partial results" not in last


def _trace_requests(url: str) -> list[dict]:
    return list(httpx.get(url + "/sim/trace", timeout=5).json()["requests"].values())
