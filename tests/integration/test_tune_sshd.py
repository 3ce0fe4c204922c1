"""``glmserve tune`` over two real sshd hosts: the sshd of one host is killed (its daemon and
every connection it serves) while that host runs a trial; the host leaves the pool and the
trial runs again on the other host; the tune completes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.fixtures.cli import GLMSERVE
from tests.fixtures.sshd import SshdServer, start_sshd

from glmserve.remote.hosts import get_host
from glmserve.remote.process import probe_group
from glmserve.remote.transport import LocalTransport, SshTransport, free_local_port
from glmserve.store import RunStore

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

NODES = ("tunea", "tuneb")
PROFILE = """\
extends: trtllm_mla
server:
  disable-cuda-graph: false
  mem-fraction-static: 0.9
sim:
  gpu-arch: sm100
  speed: 10
"""


@pytest.fixture
def two_ssh_hosts(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Iterator[list]:
    servers = [start_sshd(Path(tmp_path_factory.mktemp(f"tsshd{i}"))) for i in range(2)]
    text = servers[0].hosts_yaml(NODES[0], workdir=tmp_path / "wa")
    text += "".join(servers[1].hosts_yaml(NODES[1], workdir=tmp_path / "wb").splitlines(True)[1:])
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    (cfg / "profiles").mkdir(parents=True, exist_ok=True)
    (cfg / "hosts.yaml").write_text(text)
    (cfg / "profiles" / "tunessh.yaml").write_text(PROFILE)
    yield servers
    for name in NODES:
        SshTransport(get_host(name)).disconnect()
    for s in servers:
        s.stop()
    # a server left on the lost host (it was unreachable, so nobody could stop it): this
    # machine is that host, so stop its recorded process group here
    for run in RunStore.open().list_runs():
        if run.pgid and probe_group(LocalTransport(get_host("local")), run.pgid).live_pids:
            os.killpg(run.pgid, signal.SIGKILL)


def children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (sshd's per-connection processes), from /proc."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_sshd(server: SshdServer) -> None:
    """The daemon and the connections it serves (the glmserve ssh master's among them), not
    the servers launched through it (they run on, as on a host whose network went away)."""
    doomed = [p for p in children(server.proc.pid) if _comm(p).startswith("sshd")]
    server.proc.kill()
    server.proc.wait(5)
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def read_tune(home: Path) -> dict | None:
    files = sorted((home / "tunes").glob("*/tune.json")) if (home / "tunes").is_dir() else []
    return json.loads(files[0].read_text()) if files else None


def test_killing_one_hosts_sshd_requeues_its_trial_on_the_other(two_ssh_hosts):
    home = Path(os.environ["GLMSERVE_HOME"])
    args = [
        *GLMSERVE, "tune", "--simulate", "--profile", "tunessh",
        "--search", "server.max-running-requests=4,16",
        "--search", "server.cuda-graph-max-bs=8,32",
        "--concurrency", "8", "--output-len", "32", "--num-prompts", "48",
        "--hosts", ",".join(NODES), "--timeout", "60", "--host-lost-after", "5", "--repeat", "1",
        "--set", f"server.port={free_local_port()}", "--json",
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        victim = None
        while victim is None and time.monotonic() < deadline and proc.poll() is None:
            data = read_tune(home) or {"trials": []}
            victim = next(
                (t for t in data["trials"] if t["host"] == NODES[1] and t["status"] == "running"
                 and t["run_id"]),
                None,
            )  # fmt: skip
            time.sleep(0.05)
        assert victim is not None, "tuneb never ran a trial"
        kill_sshd(two_ssh_hosts[1])
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr[-3000:]
    data = json.loads(stdout)
    assert data["lost_hosts"] == [NODES[1]] and data["status"] == "done"
    same = [t for t in data["trials"] if t["config"] == victim["config"]]
    assert [t["requeued_from"] for t in same] == [[NODES[1]]]
    assert same[0]["host"] == NODES[0] and same[0]["status"] == "ok", same[0]
    assert all(t["status"] == "ok" for t in data["trials"]), data["trials"]
    assert "tuneb: unreachable, taken out of the pool" in stderr
