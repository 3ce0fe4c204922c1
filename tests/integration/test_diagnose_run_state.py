"""``glmserve diagnose RUN`` agrees with ``status``: the log and the processes together.

Found by a new-user audit (2026-12-02): a run killed mid-warmup was diagnosed "WARMUP, still
starting" (exit 0) because only its log was read, and a run whose worker died after READY
(``/health`` 503, which ``status`` calls CRASHED) was diagnosed READY (exit 0).
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from tests.fixtures.cli import run_glmserve
from tests.fixtures.simulator import free_port

pytestmark = pytest.mark.slow


def _launch(*sets: str, wait: bool) -> dict:
    args = ["launch", "--profile", "flashinfer", "--simulate", "--json", "--poll", "0.2"]
    for s in (f"server.port={free_port()}", *sets):
        args += ["--set", s]
    res = run_glmserve(*args, *([] if wait else ["--no-wait"]))
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout[res.stdout.index("{") :])["run"]


def _diagnose(run_id: str) -> tuple[int, dict]:
    res = run_glmserve("diagnose", run_id, "--json")
    return res.returncode, json.loads(res.stdout) if res.stdout.strip() else {}


def test_run_killed_mid_warmup_is_exited_not_still_starting(stop_left_runs):
    run = _launch("sim.hang-at=warmup", wait=False)
    deadline = time.monotonic() + 60
    while (rc_doc := _diagnose(run["run_id"]))[1].get("state") != "WARMUP":
        assert time.monotonic() < deadline, rc_doc
        time.sleep(0.2)
    assert rc_doc[0] == 0  # alive and hung in warmup: still starting, as far as a log says
    os.killpg(int(run["pgid"]), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while (rc_doc := _diagnose(run["run_id"]))[1].get("state") == "WARMUP":
        assert time.monotonic() < deadline, rc_doc
        time.sleep(0.1)
    rc, doc = rc_doc
    assert (rc, doc["state"], doc["phase"]) == (3, "EXITED", "WARMUP")
    assert run_glmserve("status", run["run_id"], "--json").stdout.count('"EXITED"') == 1


def test_dead_worker_after_ready_is_crashed_as_status_says(stop_left_runs):
    run = _launch("sim.worker-death-after=0.5", "sim.speed=4", wait=True)
    deadline = time.monotonic() + 30
    while (rc_doc := _diagnose(run["run_id"]))[0] == 0:
        assert rc_doc[1]["state"] == "READY"
        assert time.monotonic() < deadline, rc_doc
        time.sleep(0.2)
    rc, doc = rc_doc
    assert (rc, doc["state"], doc["category"]) == (3, "CRASHED", "CRASH")
    assert "/health" in doc["root_cause"]


def test_stopped_run_is_named_stopped(stop_left_runs):
    run = _launch("sim.hang-at=warmup", wait=False)
    assert run_glmserve("stop", run["run_id"]).returncode == 0
    res = run_glmserve("diagnose", run["run_id"])
    assert res.returncode == 2
    assert f"run {run['run_id']} was stopped (glmserve stop)" in res.stderr
