"""A run ``launch`` reports CRASHED is settled before ``launch`` exits: recorded ended when no
process of it is left, else what is left of its process group stopped (as ``glmserve stop``
does) and said. ``status`` then does not list it among live runs and ``stop --all`` has
nothing to stop: the three verbs agree.

Before (known-limits, 2026-12-04): the run kept no end time until a later ``status`` looked,
so the first ``status`` listed it as live and ``stop --all`` reported it "not running"; a
leftover process of its group (a scheduler SGLang's ``kill_process_tree`` missed) stayed up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from tests.fixtures.cli import run_glmserve
from tests.fixtures.simulator import free_port

from glmserve.store import RunStore

pytestmark = pytest.mark.slow


def _launch_crashing(port: int) -> tuple[subprocess.CompletedProcess[str], dict]:
    res = run_glmserve(
        "launch", "--profile", "flashinfer", "--simulate", "--json",
        "--set", f"server.port={port}", "--set", "sim.crash-at=load", "--poll", "0.2",
    )  # fmt: skip
    assert res.returncode == 3, res.stderr
    return res, json.loads(res.stdout[res.stdout.index("{") :])


def _live_ids() -> list[str]:
    res = run_glmserve("status", "--json")
    assert res.returncode == 0, res.stderr
    return [row["run_id"] for row in json.loads(res.stdout)]


def _stop_all_ids() -> list[str]:
    res = run_glmserve("stop", "--all", "--json")
    assert res.returncode == 0, res.stderr
    return [rep["run_id"] for rep in json.loads(res.stdout)]


def test_a_crashed_launch_is_not_listed_live_and_stop_all_agrees(stop_left_runs):
    _, doc = _launch_crashing(free_port())
    run_id = doc["run"]["run_id"]
    assert doc["verdict"]["state"] == "CRASHED"
    assert doc["run"]["ended_at"] is not None and doc["stopped"] == []
    assert run_id not in _live_ids()  # the first status after the crash
    assert run_id not in _stop_all_ids()
    with RunStore.open() as store:
        run = store.get_run(run_id)
    assert run.state == "CRASHED" and run.ended_at is not None and run.port_claim is None
    asked = run_glmserve("status", run_id, "--json")  # asked by id, it is still shown
    assert asked.returncode == 0, asked.stderr
    (row,) = json.loads(asked.stdout)
    assert row["state"] == "CRASHED" and row["alive"] is False


def _pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_crashed_servers_leftover_process_is_stopped_by_its_group(
    stop_left_runs, tmp_path, monkeypatch
):
    # A process of the run's group that outlives the server's own death, as a scheduler that
    # left SGLang's process tree does: started by launch.sh itself (bash reads BASH_ENV), so
    # it is in the run's process group, started after its leader, and reparented once the
    # simulated launcher SIGKILLs itself.
    pid_file = tmp_path / "leftover.pid"
    env_file = tmp_path / "bash_env.sh"
    env_file.write_text(
        'case "$0" in launch.sh|*/launch.sh) '
        f"sleep 300 </dev/null & echo $! > {pid_file} ;; esac\n"
    )
    monkeypatch.setenv("BASH_ENV", str(env_file))
    leftover = None
    try:
        res, doc = _launch_crashing(free_port())
        leftover = int(pid_file.read_text())
        run_id = doc["run"]["run_id"]
        assert "still up" in res.stderr and f"glmserve stop {run_id}" in res.stderr
        (rep,) = doc["stopped"]
        assert rep["ok"] and leftover in rep["signalled"] and rep["left"] == []
        assert not _pid_alive(leftover)
        assert doc["run"]["state"] == "CRASHED" and doc["run"]["ended_at"] is not None
        monkeypatch.delenv("BASH_ENV")
        assert run_id not in _live_ids()
        assert run_id not in _stop_all_ids()
    finally:
        if leftover is not None and _pid_alive(leftover):
            os.kill(leftover, signal.SIGKILL)  # the test's own process, by its id
