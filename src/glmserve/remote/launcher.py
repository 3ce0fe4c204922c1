"""The glmserve process launching a run, recorded on the run until the run's own process is.

A run recorded but not started yet holds its host:port claim; whether the glmserve launching
it still runs decides between "being launched right now" (refused, waited for) and "a launch
that died" (ended).
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any

from glmserve.store import RunRecord


def _local_start_time(pid: int) -> int | None:
    """Start time (clock ticks since boot) of a process on this machine, None if gone."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


# How long a run launched from another machine (a store on a shared home) counts as being
# launched without a recorded process: far above an upload plus the handshake wait.
FOREIGN_LAUNCH_GRACE_S = 600.0


def launcher_identity() -> dict[str, Any]:
    """This glmserve process, recorded on a run until the run's process is recorded."""
    pid = os.getpid()
    return {"node": platform.node(), "pid": pid, "start": _local_start_time(pid)}


def launch_in_progress(run: RunRecord) -> bool:
    """The run is recorded but not started yet, and the glmserve launching it still runs.

    Another machine's launcher (a store on a shared home) cannot be looked at: it counts as
    running for ``FOREIGN_LAUNCH_GRACE_S``."""
    if run.pid is not None or run.ended_at is not None or run.terminal:
        return False
    by = run.meta.get("launched_by")
    if not isinstance(by, dict) or not by.get("pid"):
        return False  # recorded by a glmserve without launch tracking
    if by.get("node") != platform.node():  # cannot look: trust it for a while
        return time.time() - run.created_at < FOREIGN_LAUNCH_GRACE_S
    return _local_start_time(int(by["pid"])) == by.get("start")
