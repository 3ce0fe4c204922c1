"""A repeated log line, or retry chatter, is not progress (issue 20, item 3).

Before: a server stuck in distributed init that logs torch's TCPStore retry warning every
second reset every stall budget, so it was never STALLED: it waited for the overall deadline
(7200 s by default), was called TIMEOUT, and the hint said the log last moved "-0s ago".
Each test runs a real process that writes such a log, watched with short budgets.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from glmserve.deploy.progress import is_chatter, line_key
from glmserve.deploy.watch import Watcher, WatchResult
from glmserve.remote.host_config import HostConfig
from glmserve.remote.transport import LocalTransport
from glmserve.store import RunRecord, RunStore

# torch 2.x c10d socket.cpp's retry warning as logged (gensyn-ai/rl-swarm#197), NCCL
# socket.cc's retry line, the store barrier's wait line (torch distributed_c10d.py).
TCPSTORE = (
    "[W1204 21:00:{s:02d}.{ns:09d} socket.cpp:752] [c10d] The client socket has failed to "
    "connect to [localhost]:29500 (errno: 111 - Connection refused)."
)
NCCL = (
    "node1:{ns}:{ns} [0] NCCL INFO socketPollConnect: connect to 10.0.0.2<45123> returned "
    "Connection refused, retrying ({n}/34) after sleep for {ms} msec"
)
REPEAT = (
    "[2026-12-04 21:00:{s:02d} TP{r}] Using default MoE kernel config. Performance might be bad"
)

WRITER = r"""
import sys, time
log, kind = sys.argv[1], sys.argv[2]
fmt = {fmt!r}
with open(log, "a") as f:
    f.write("[2026-12-04 21:00:00 TP0] Init torch distributed begin.\n"); f.flush()
    n = 0
    while True:
        n += 1
        s, ns, r = n % 60, (n * 7919) % 10**9, n % 8
        if kind == "progress":
            line = f"[2026-12-04 21:00:{{s:02d}} TP0] Load weight step {{n}} done."
        else:
            line = fmt.format(s=s, ns=ns, n=n, ms=n * 100, r=r)
        f.write(line + "\n"); f.flush()
        time.sleep(0.05)
"""


@contextmanager
def _writer(tmp_path: Path, fmt: str, kind: str = "repeat") -> Iterator[RunRecord]:
    log = tmp_path / "server.log"
    code = WRITER.format(fmt=fmt)
    proc = subprocess.Popen([sys.executable, "-c", code, str(log), kind], start_new_session=True)
    try:
        with open(f"/proc/{proc.pid}/stat") as fh:
            start = fh.read().rsplit(")", 1)[1].split()[19]
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
        yield RunRecord(
            run_id=f"rep{proc.pid}", host="local", profile="p", port=1, run_dir=str(tmp_path),
            pid=proc.pid, pgid=proc.pid, proc_start=start, boot_id=boot,
        )  # fmt: skip
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _watch(run: RunRecord, **kw: float) -> WatchResult:
    with RunStore.open() as store:
        store.add_run(run)
        return Watcher(run, LocalTransport(HostConfig()), store, poll_s=0.1, health=False,
                       **kw).watch()  # fmt: skip


@pytest.mark.parametrize(
    ("fmt", "last"),
    [
        (TCPSTORE, "1: Init torch distributed begin."),
        (NCCL, "1: Init torch distributed begin."),
        (REPEAT, "2: Using default MoE kernel config."),  # new the first time
    ],
    ids=["tcpstore", "nccl", "repeat"],
)
def test_repeated_or_retry_lines_are_stalled_within_the_phase_budget(tmp_path, fmt, last):
    with _writer(tmp_path, fmt) as run:
        result = _watch(run, stall_timeout_s=1.0, timeout_s=20)
    assert result.state == "STALLED", result.diagnosis.hint
    assert result.elapsed_s < 6  # the budget plus polls, far from the 20 s deadline
    hint = result.diagnosis.hint or ""
    # the last progress named is the last new line, not the chatter that followed it
    assert f"last progress at line {last}" in hint, hint


def test_a_log_that_keeps_moving_times_out_with_a_hint_never_negative(tmp_path):
    with _writer(tmp_path, "", kind="progress") as run:
        result = _watch(run, stall_timeout_s=100, timeout_s=1.5)
    assert result.state == "TIMEOUT"
    hint = result.diagnosis.hint or ""
    assert re.search(r"the log last moved \d+s ago", hint), hint
    assert "-0s" not in hint


def test_line_key_and_chatter_rules():
    a = REPEAT.format(s=1, r=0)
    assert line_key(a) == line_key(REPEAT.format(s=59, r=7))
    assert line_key(TCPSTORE.format(s=1, ns=5)) == line_key(TCPSTORE.format(s=2, ns=99))
    assert line_key("Load weight step 1 done.") != line_key("Load weight step 2 done.")
    assert is_chatter(NCCL.format(ns=1, n=3, ms=300))
    assert is_chatter("[rank1]:[W1204 21:00:01.1 socket.cpp:752] [c10d] The client socket cannot "
                      "be initialized to connect to [h]:1 (errno: 97 - x).")  # fmt: skip
    assert not is_chatter("[2026-12-04 21:00:00 TP0] Load weight begin. avail mem=90.00 GB")
