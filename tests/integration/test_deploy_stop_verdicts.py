"""A run ended by ``glmserve stop`` keeps a true verdict, whoever looks at it next.

Found by a new-user audit (2026-12-02): stopping a run while its ``launch`` still watched made
the launch report ``EXITED`` (exit 3, "ended without an error line") and store that over
STOPPED; stopping a STALLED run and then asking ``status`` turned it EXITED. The stop now
says so (a STOPPING event) before its first signal, and a run already seen ended keeps its
verdict.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from tests.fixtures.cli import GLMSERVE, run_glmserve
from tests.fixtures.runs import wait_for_recorded_run
from tests.fixtures.simulator import free_port

from glmserve.store import RunStore

pytestmark = pytest.mark.slow


def _status(run_id: str) -> dict:
    res = run_glmserve("status", run_id, "--json")
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)
    return row


def test_stop_while_launch_watches_is_stopped_not_a_crash(stop_left_runs):
    port = free_port()
    launch = subprocess.Popen(
        [*GLMSERVE, "launch", "--profile", "flashinfer", "--simulate", "--json",
         "--set", f"server.port={port}", "--set", "sim.hang-at=load", "--poll", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    try:
        run_id = wait_for_recorded_run()
        stop = run_glmserve("stop", run_id)
        assert stop.returncode == 0, stop.stderr
        out, err = launch.communicate(timeout=60)
    finally:
        if launch.poll() is None:
            launch.kill()
    assert launch.returncode == 2, err  # not 3 (crashed) and not 0
    assert "stopped (glmserve stop)" in err and "EXITED" not in err
    doc = json.loads(out[out.index("{") :])
    assert doc["verdict"]["state"] == "STOPPED"
    with RunStore.open() as store:
        run = store.get_run(run_id)
        assert run.state == "STOPPED" and run.ended_at is not None
        assert [e["state"] for e in store.list_events(run_id)].count("EXITED") == 0
    assert _status(run_id)["state"] == "STOPPED"


def test_stopped_stalled_run_stays_stalled(stop_left_runs):
    port = free_port()
    res = run_glmserve(
        "launch", "--profile", "flashinfer", "--simulate", "--json",
        "--set", f"server.port={port}", "--set", "sim.hang-at=load", "--stall-timeout", "3",
        "--poll", "0.2",
    )  # fmt: skip
    assert res.returncode == 4, res.stderr
    run_id = json.loads(res.stdout[res.stdout.index("{") :])["run"]["run_id"]
    assert _status(run_id)["state"] == "STALLED"  # still alive, still stalled
    assert run_glmserve("stop", run_id).returncode == 0
    row = _status(run_id)
    assert row["state"] == "STALLED" and row["alive_pids"] == []
    assert _status(run_id)["state"] == "STALLED"  # and again: nothing rewrites it
