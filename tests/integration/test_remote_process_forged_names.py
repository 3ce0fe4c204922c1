"""A process name with a newline cannot forge the process probe; a probe that proves
nothing is "unverified", never stopped or exited (issue 20, item 8).

Before: ``cat /proc/[0-9]*/stat | sed | awk`` read a name such as ``"\\n7 R 1 <PGID> "`` (any
local process may set it) as a member of the run's group that started before the run: a live
READY run was recorded EXITED, and ``stop`` printed "nothing left", exit 0, while the server
kept serving. Each stat is now split after its last ')' (the PID from the file name).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.fixtures.cli import GLMSERVE, run_glmserve
from tests.fixtures.simulator import free_port

from glmserve.store import RunStore

pytestmark = pytest.mark.slow

# Sets its own name (comm, at most 15 bytes) through /proc/self/comm, says so, then waits.
FORGER = r"""
import sys
name = sys.argv[1]
with open("/proc/self/comm", "w") as f:
    f.write(name)
assert open("/proc/self/comm").read().rstrip("\n") == name.rstrip("\n"), "comm not set"
print("named", flush=True)
sys.stdin.read()
"""


def _group_alive(pgid: int) -> bool:
    """A live (not zombie) process is in group ``pgid`` (split after the last ')')."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


@pytest.fixture
def ready_run():  # type: ignore[no-untyped-def]
    """A READY simulated run; whatever a test leaves of it is killed by its group."""
    res = run_glmserve(
        "launch", "--profile", "flashinfer", "--simulate", "--set", f"server.port={free_port()}",
        "--poll", "0.2",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    with RunStore.open() as store:
        (run,) = store.list_runs()
    assert run.pgid is not None and _group_alive(run.pgid)
    yield run
    if _group_alive(run.pgid):
        os.killpg(run.pgid, 9)


@pytest.fixture
def forger(ready_run):  # type: ignore[no-untyped-def]
    """A stranger whose name forges a line "7 R 1 <PGID> ..." into a concatenated /proc."""
    name = f"\n7 R 1 {ready_run.pgid} "
    assert len(name.encode()) <= 15
    p = subprocess.Popen(
        [sys.executable, "-c", FORGER, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert p.stdout is not None and p.stdout.readline() == "named\n"
    yield p
    p.kill()
    p.wait()


def test_a_forged_name_does_not_end_a_live_run(ready_run, forger):
    res = run_glmserve("status", ready_run.run_id, "--json")
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)
    assert row["state"] == "READY"
    assert row["alive_pids"] and 7 not in row["alive_pids"]
    stop = run_glmserve("stop", ready_run.run_id, "--json", "--timeout", "5")
    assert stop.returncode == 0, stop.stderr
    (rep,) = json.loads(stop.stdout)
    assert rep["signalled"] and rep["left"] == []
    assert not _group_alive(ready_run.pgid)  # really stopped, not "nothing left"
    assert forger.poll() is None  # the stranger was not touched


def test_an_unverifiable_probe_is_unverified_not_stopped(ready_run, tmp_path):
    """``cat`` (the boot id read) broken on the host: the probe proves nothing, so ``stop`` and
    ``status`` exit 5 saying so; the server keeps running and nothing is recorded."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "cat").write_text("#!/bin/sh\nexit 1\n")
    (fake / "cat").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "COLUMNS": "200"}
    for verb in (["stop", ready_run.run_id, "--timeout", "5"], ["status", ready_run.run_id]):
        res = subprocess.run(
            [*GLMSERVE, *verb], capture_output=True, text=True, env=env, timeout=120
        )
        assert res.returncode == 5, (verb, res.stdout, res.stderr)
        assert "could not be verified" in res.stderr, res.stderr
        assert "nothing left" not in res.stdout + res.stderr
    assert _group_alive(ready_run.pgid)
    with RunStore.open() as store:
        run = store.get_run(ready_run.run_id)
        assert run.state == "READY" and run.ended_at is None
        assert "STOPPING" not in [e["state"] for e in store.list_events(run.run_id)]
