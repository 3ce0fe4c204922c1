"""``stop`` on a read-only ``GLMSERVE_HOME`` stops the server anyway (issue 20, item 12).

Before: SQLite could not open the store for writing, ``stop`` exited 2 and the server kept
serving. Now the store is read for ``stop`` (as on a full disk), the run is stopped, and a
warning says the stop is not recorded.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tests.fixtures.cli import run_glmserve
from tests.fixtures.simulator import free_port

from glmserve.store import RunStore

pytestmark = pytest.mark.slow


def _group_alive(pgid: int) -> bool:
    """A live (not zombie) process is in group ``pgid``."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def _freeze(folder: Path) -> bool:
    """Make ``folder`` unwritable even for root (mode 555, then the immutable attribute)."""
    folder.chmod(0o555)
    if not os.access(folder, os.W_OK):
        return True
    return subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0


def _thaw(folder: Path) -> None:
    subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
    folder.chmod(0o755)


def test_stop_on_a_read_only_home_stops_the_server_with_a_warning():
    port = free_port()
    res = run_glmserve(
        "launch", "--profile", "flashinfer", "--simulate", "--set", f"server.port={port}",
        "--poll", "0.2",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    with RunStore.open() as store:
        (run,) = store.list_runs()
    assert run.pgid is not None and _group_alive(run.pgid)
    home = Path(os.environ["GLMSERVE_HOME"])
    try:
        if not _freeze(home):
            pytest.skip("no way to make a folder unwritable here")
        stop = run_glmserve("stop", run.run_id, "--timeout", "5")
        alive_after = _group_alive(run.pgid)
    finally:
        _thaw(home)
        if _group_alive(run.pgid):
            os.killpg(run.pgid, 9)
    assert stop.returncode == 0, stop.stderr
    assert not alive_after
    assert "read-only; stopping anyway" in stop.stderr
    assert f"{run.run_id} stopped but not recorded" in stop.stderr
