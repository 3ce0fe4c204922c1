"""``/server_info`` as SGLang 0.5.9 answers it: ``dataclasses.asdict(server_args)`` plus the
scheduler info and ``version`` (what `glmserve bench` checks a run's identity with), and no
answer at all once a scheduler is dead (the tokenizer manager waits for it, no timeout)."""

from __future__ import annotations

import time

import httpx
import pytest
from tests.fixtures.simulator import FAST


def test_server_info_reports_the_fields_identity_compares(simulator):
    info = httpx.get(simulator.url + "/server_info", timeout=10).json()
    assert info["model_path"] == "glm-5-sim" and info["port"] == simulator.port
    assert info["tp_size"] == 2 and info["attention_backend"] and info["version"] == "0.5.9"
    assert info["status"] == "ready" and "max_total_num_tokens" in info


def test_server_info_never_answers_after_a_scheduler_died(start_simulator):
    sim = start_simulator("--sim-worker-death-after", "0.2", "--disable-cuda-graph", *FAST)
    deadline = time.monotonic() + 20
    while not httpx.get(sim.url + "/sim/config", timeout=5).json()["engine_dead"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(sim.url + "/server_info", timeout=3)
    assert httpx.get(sim.url + "/model_info", timeout=3).status_code == 200  # HTTP is up
