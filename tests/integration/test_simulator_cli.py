"""`glmserve simulate` end to end, the start-up log, and the scheduler's admission rules."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
from tests.fixtures.simulator import FAST, free_port, http_status
from typer.testing import CliRunner

from glmserve.cli._app import app
from glmserve.simulator import costmodel
from glmserve.simulator.costmodel import CostModel, ServerShape

LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d( TP(\d+))?\] ")


def test_help_prints_options_and_cost_model():
    res = CliRunner().invoke(app, ["simulate", "--help"])
    assert res.exit_code == 0
    for needle in ("--sim-crash-at", "--sim-tokens-per-chunk", "t_cast", "GLMSERVE_PATCHES"):
        assert needle in res.output
    # the cost model's docstring is reStructuredText; the terminal gets it as plain text
    assert "``" not in res.output and "::\n" not in res.output
    assert "context lengths):\n" in res.output


def test_console_script_passes_everything_through(tmp_path):
    port = free_port()
    log = open(tmp_path / "sim.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "glmserve"), "simulate",
         "--model-path", "glm-5", "--port", str(port), "--reasoning-parser", "glm45", *FAST],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while http_status(f"http://127.0.0.1:{port}/health") != 200:
            assert proc.poll() is None, (tmp_path / "sim.log").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
    text = (tmp_path / "sim.log").read_text()
    assert text.count("accepted, not modelled: --reasoning-parser glm45") == 1
    bad = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "glmserve"), "simulate", "--model-path",
         "m", "--sim-speed", "0"], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "glmserve simulate: error: --sim-speed: expected a finite number > 0, got 0.0"
    ]


def test_startup_phases_in_order_per_rank(start_simulator):
    sim = start_simulator("--tp-size", "4", *FAST)
    lines = sim.log_text().splitlines()
    bars = ("Loading safetensors checkpoint shards:", "Capturing batches (")
    assert all(LINE.match(ln) or ln.startswith(bars) for ln in lines)  # tqdm bars: unprefixed

    def first(needle: str) -> int:
        return next(i for i, ln in enumerate(lines) if needle in ln)

    order = [
        "server_args=ServerArgs(",
        "Load weight begin.",
        "Loading safetensors checkpoint shards: 100% Completed",
        "Load weight end.",
        "KV Cache is allocated. #tokens: ",
        "Capture cuda graph begin.",
        "Capture cuda graph end.",
        "max_total_num_tokens=",
        '"POST /generate HTTP/1.1" 200 OK',
        "The server is fired up and ready to roll!",
    ]
    idx = [first(n) for n in order]
    assert idx == sorted(idx)
    for needle in ("Load weight end.", "KV Cache is allocated.", "Capture cuda graph end."):
        ranks = {LINE.match(ln).group(2) for ln in lines if needle in ln}
        assert ranks == {"0", "1", "2", "3"}
    assert LINE.match(lines[first("max_total_num_tokens=")]).group(2) == "0"
    assert LINE.match(lines[first("fired up")]).group(1) is None  # launcher line, no TP
    no_graphs = start_simulator("--disable-cuda-graph", *FAST)
    assert "Capture cuda graph" not in no_graphs.log_text()


def test_max_running_requests_queues_the_rest_and_prefill_is_paid(start_simulator):
    # identical prompts: without --disable-radix-cache the later ones would be cached
    sim = start_simulator(
        "--max-running-requests", "2", "--disable-cuda-graph", "--disable-radix-cache", *FAST
    )
    body = {"input_ids": [1] * 50, "sampling_params": {"max_new_tokens": 6}}
    results: list[dict] = []

    def one() -> None:
        results.append(httpx.post(sim.url + "/generate", json=body, timeout=30).json())

    threads = [threading.Thread(target=one) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r["meta_info"]["completion_tokens"] for r in results] == [6] * 5
    trace = httpx.get(sim.url + "/sim/trace").json()
    steps = trace["steps"]
    assert max(s["batch"] for s in steps if s["kind"] == "decode") == 2
    prefills = [s for s in steps if s["kind"] == "prefill" and s["ctx_tokens"] % 50 == 0]
    assert len(prefills) >= 3  # 5 requests, 2 at a time
    shape = ServerShape(attention_backend="flashinfer", cuda_graph=False)
    for s in prefills:
        assert s["model_s"] == costmodel.prefill_step_s(CostModel(), shape, s["ctx_tokens"])
    ids = [r["meta_info"]["id"] for r in results]
    admitted = sorted(trace["requests"][i]["admitted"] for i in ids)
    assert admitted[2] > admitted[1]  # the third waited for a free slot
