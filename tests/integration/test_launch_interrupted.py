"""A launch ended from outside leaves nothing half-done (notes/newuser4.md).

* SIGTERM (a CI job's ``timeout``, ``kill``) while ``launch`` watches did not do what Ctrl-C
  does: the CLI died of the signal (status -15) without a word; now exit 130 with the run
  recorded, running, and named.
* A launch killed between starting its server and recording the server's process left a run
  with no PID while the server served: ``status`` called it EXITED ("no process left") and
  ``stop`` "never started; nothing left". The server's own handshake in its run dir now
  identifies it: ``status`` sees it, ``stop`` stops it.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.fixtures.cli import GLMSERVE, run_glmserve
from tests.fixtures.runs import wait_for_recorded_run
from tests.fixtures.simulator import free_port

from glmserve.store import RunStore

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_sigterm_while_launch_watches_is_ctrl_c(stop_left_runs):
    launch = subprocess.Popen(
        [*GLMSERVE, "launch", "--profile", "flashinfer", "--simulate",
         "--set", f"server.port={free_port()}", "--set", "sim.hang-at=load", "--poll", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    try:
        run_id = wait_for_recorded_run()  # recorded: from here on, whenever the signal lands (still
        # in Deployment.launch, or watching), the run is named as kept running
        launch.send_signal(signal.SIGTERM)
        _out, err = launch.communicate(timeout=60)
    finally:
        if launch.poll() is None:
            launch.kill()
    assert launch.returncode == 130, err
    with RunStore.open() as store:
        run = store.get_run(run_id)
    if run.ended_at is None:  # the usual case: it is watched (or about to be) by now
        assert f"the server keeps running (run {run_id} is recorded)" in err
        assert f"glmserve stop {run_id}" in err
        assert run.pid is not None and _alive(run.pid)
    else:  # the signal beat Deployment.launch's return: what it started, it stopped
        assert "no server of this launch is recorded running" in err
        assert run.pid is not None and not _alive(run.pid)


def test_a_server_whose_launch_died_before_recording_it_is_seen_and_stopped(stop_left_runs):
    res = run_glmserve(
        "launch", "--profile", "flashinfer", "--simulate", "--no-wait", "--json",
        "--set", f"server.port={free_port()}", "--set", "sim.hang-at=load",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    run = json.loads(res.stdout)["run"]
    pid = run["pid"]
    assert pid and _alive(pid)
    # As if the launching glmserve had been SIGKILLed right after the server's handshake:
    # the row has no process yet and its launcher is gone.
    gone = {"node": platform.node(), "pid": 2**22 + 7, "start": 1}
    with RunStore.open() as store:
        store.update_run(run["run_id"], pid=None, pgid=None, proc_start=None, boot_id=None,
                         meta={**run["meta"], "launched_by": gone})  # fmt: skip
    st = run_glmserve("status", run["run_id"], "--json")
    assert st.returncode == 0, st.stderr
    (row,) = json.loads(st.stdout)
    assert row["alive"] is True and pid in row["alive_pids"], row  # was EXITED, no process
    stop = run_glmserve("stop", run["run_id"], "--json")
    assert stop.returncode == 0, stop.stderr
    (rep,) = json.loads(stop.stdout)
    assert pid in rep["signalled"] and rep["left"] == []  # was "never started; nothing left"
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
