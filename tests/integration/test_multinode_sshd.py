"""A two-node group through two real sshd instances on loopback, with the simulator.

Both "nodes" are this machine behind different sshd ports and workdirs; node 0 serves HTTP,
node 1 runs only its scheduler ranks (TP4-7) and reports to node 0 over --dist-init-addr, as
SGLang's ranks rendezvous there. The simulator runs 20x faster than real time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.fixtures.sshd import SshdServer, start_sshd

from glmserve.hosts import get_host
from glmserve.lifecycle import probe_group, stop_run
from glmserve.store import RunStore
from glmserve.transport import SshTransport, free_local_port

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

NODES = ("nodea", "nodeb")


def cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from glmserve.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


def launch_group(
    port: int, *extra: str, profile: str = "trtllm_mla"
) -> subprocess.CompletedProcess[str]:
    nodes = ["--nodes", ",".join(NODES)] if profile == "trtllm_mla" else []
    return cli(
        "launch",
        "--profile",
        profile,
        *nodes,
        "--simulate",
        "--set",
        f"server.port={port}",
        "--set",
        "sim.gpu-arch=sm100",
        "--set",
        "sim.speed=20",
        "--poll",
        "0.3",
        "--json",
        *extra,
    )


@pytest.fixture(scope="module")
def two_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SshdServer]]:
    servers = [start_sshd(Path(tmp_path_factory.mktemp(f"sshd{i}"))) for i in range(2)]
    yield servers
    for s in servers:
        s.stop()


@pytest.fixture
def group_hosts(two_sshd: list[SshdServer], tmp_path: Path) -> Iterator[list[str]]:
    """``nodea``/``nodeb`` in this test's hosts.yaml, each with its own sshd and workdir."""
    text = two_sshd[0].hosts_yaml(NODES[0], workdir=tmp_path / "wa")
    second = two_sshd[1].hosts_yaml(NODES[1], workdir=tmp_path / "wb")
    text += "".join(second.splitlines(keepends=True)[1:])  # without its "hosts:" line
    cfg_dir = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg_dir.mkdir(parents=True, exist_ok=True)
    (cfg_dir / "hosts.yaml").write_text(text)
    yield list(NODES)
    store = RunStore.open()
    for run in store.list_runs():  # whatever a failing test left running
        if run.pgid is not None:
            stop_run(run.run_id, timeout=5, store=store)
            assert probe_group(SshTransport(get_host(run.host)), run.pgid).live_pids == []
    for name in NODES:
        SshTransport(get_host(name)).disconnect()


def _left(run: dict) -> list[int]:
    return probe_group(SshTransport(get_host(run["host"])), run["pgid"]).live_pids


def test_two_node_group_ready_serves_on_node0_and_stop_leaves_nothing(group_hosts):
    port = free_local_port()
    res = launch_group(port)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["verdict"]["state"] == "READY"
    runs = data["runs"]
    gid = data["group_id"]
    assert [(r["host"], r["meta"]["node_rank"], r["meta"]["group_id"]) for r in runs] == [
        ("nodea", 0, gid),
        ("nodeb", 1, gid),
    ]
    # Per-node argv: same dist-init address (node 0's ssh HostName, --port + 1000).
    dist = f"127.0.0.1:{port + 1000}"
    for r in runs:
        argv = r["spec"]["argv"]
        rank = r["meta"]["node_rank"]
        for flag, want in (
            ("--nnodes", "2"),
            ("--node-rank", str(rank)),
            ("--dist-init-addr", dist),
        ):
            assert argv[argv.index(flag) + 1] == want
    # Node 0 serves HTTP; node 1 logged only its own ranks TP4-7 and bound nothing.
    from glmserve.lifecycle import health_ok, open_endpoint

    with open_endpoint(runs[0]["run_id"]) as url:
        assert health_ok(url)
    log1 = (Path(runs[1]["run_dir"]) / "server.log").read_text()
    assert "[" in log1 and " TP4]" in log1 and " TP0]" not in log1
    assert "Uvicorn running" not in log1
    st = json.loads(cli("status", gid, "--json").stdout)
    assert [(r["node_rank"], r["state"]) for r in st] == [(0, "READY"), (1, "READY")]
    # Stopping by node 1's run id stops the whole group.
    stop = cli("stop", runs[1]["run_id"], "--json")
    assert stop.returncode == 0, stop.stderr
    reps = json.loads(stop.stdout)
    assert sorted(rep["node_rank"] for rep in reps) == [0, 1]
    assert all(rep["left"] == [] for rep in reps)
    for r in runs:
        assert _left(r) == []
        assert RunStore.open().get_run(r["run_id"]).state == "STOPPED"


def test_crash_on_node1_fails_group_with_exit_3_and_stops_node0(group_hosts):
    port, dist_port = free_local_port(), free_local_port()
    res = launch_group(
        port,
        "--set",
        f"server.dist-init-addr=127.0.0.1:{dist_port}",
        "--set",
        "sim.crash-at=kv",
        "--set",
        "sim.fault-node-rank=1",
    )
    assert res.returncode == 3, res.stdout + res.stderr
    assert "node 1 (nodeb)" in res.stderr
    data = json.loads(res.stdout)
    v = data["verdict"]
    assert (v["state"], v["failing_node"], v["failing_host"]) == ("CRASHED", 1, "nodeb")
    assert v["category"] == "OOM"
    runs = data["runs"]
    assert all(r["spec"]["argv"].count(f"127.0.0.1:{dist_port}") == 1 for r in runs)
    store = RunStore.open()
    # Node 0 had started cleanly (it waits for node 1 at warmup) and was stopped.
    assert store.get_run(runs[0]["run_id"]).state == "STOPPED"
    assert store.get_run(runs[1]["run_id"]).state == "CRASHED"
    assert runs[0]["pid"] in data["stopped"][0]["signalled"]
    for r in runs:
        assert _left(r) == []


def test_crash_on_node0_names_node0_and_stops_node1(group_hosts):
    """The group comes from the profile's ``nodes:`` (no --nodes on the command line)."""
    prof_dir = Path(os.environ["GLMSERVE_CONFIG_DIR"]) / "profiles"
    prof_dir.mkdir(parents=True, exist_ok=True)
    (prof_dir / "two-node.yaml").write_text("extends: trtllm_mla\nnodes: [nodea, nodeb]\n")
    wrong = cli("launch", "--profile", "two-node", "--host", "nodea", "--simulate")
    assert wrong.returncode == 2 and "targets nodes nodea, nodeb" in wrong.stderr
    port = free_local_port()
    res = launch_group(
        port, "--set", "sim.crash-at=kv", "--set", "sim.fault-node-rank=0", profile="two-node"
    )
    assert res.returncode == 3, res.stdout + res.stderr
    data = json.loads(res.stdout)
    assert (data["verdict"]["failing_node"], data["verdict"]["failing_host"]) == (0, "nodea")
    runs = data["runs"]
    assert RunStore.open().get_run(runs[1]["run_id"]).state == "STOPPED"
    for r in runs:
        assert _left(r) == []


def test_node1_dying_after_ready_shows_in_group_status(group_hosts):
    port = free_local_port()
    res = launch_group(
        port, "--set", "sim.crash-at=after-ready:3", "--set", "sim.fault-node-rank=1"
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    gid, runs = data["group_id"], data["runs"]
    deadline = time.monotonic() + 30
    states: list[tuple[int, str]] = []
    while time.monotonic() < deadline:
        states = [
            (r["node_rank"], r["state"]) for r in json.loads(cli("status", gid, "--json").stdout)
        ]
        if states[1][1] != "READY":
            break
        time.sleep(0.3)
    assert states == [(0, "READY"), (1, "CRASHED")]
    assert cli("stop", gid).returncode == 0
    for r in runs:
        assert _left(r) == []
