"""A two-node group through two real sshd instances on loopback, with the simulator.

Both "nodes" are this machine behind different sshd ports and workdirs; node 0 serves HTTP,
node 1 runs only its scheduler ranks (TP4-7) and reports to node 0 over --dist-init-addr, as
SGLang's ranks rendezvous there. The simulator runs 20x faster than real time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.fixtures.cli import GLMSERVE
from tests.fixtures.cli import run_glmserve as cli
from tests.fixtures.runs import stop_every_run_left
from tests.fixtures.sshd import SshdServer, start_sshd

from glmserve.remote.hosts import get_host
from glmserve.remote.process import probe_group
from glmserve.remote.transport import SshTransport, free_local_port
from glmserve.store import RunStore

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

NODES = ("nodea", "nodeb")


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
    stop_every_run_left(remote_only=True, verify=True)  # whatever a failing test left
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
    from glmserve.remote.endpoint import health_ok, open_endpoint

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


# -- check / bench / logs / sweep over the group ------------------------------------------------
def _rows_by(data: dict) -> dict[tuple[str | None, str], dict]:
    return {(r.get("host"), r["check"]): r for r in data["rows"]}


def test_group_check_every_node_and_blocks_on_node0_dist_port(group_hosts):
    port, dport = free_local_port(), free_local_port()
    args = ["check", "--profile", "trtllm_mla", "--nodes", ",".join(NODES), "--simulate",
            "--set", f"server.port={port}",
            "--set", f"server.dist-init-addr=127.0.0.1:{dport}"]  # fmt: skip
    res = cli(*args, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    rows = _rows_by(json.loads(res.stdout))
    for host in NODES:  # every node was reached over its own sshd and checked
        assert rows[(host, "reachable")]["detail"].startswith("ssh glmserve-test-sshd")
        assert rows[(host, "sglang")]["status"] == "ok"
        assert rows[(host, "port")] == {"check": "port", "status": "ok", "detail": f"{port} free",
                                        "node": NODES.index(host), "host": host}  # fmt: skip
    assert rows[(None, "same sglang")]["status"] == "ok"
    assert rows[("nodea", "dist-init port")]["detail"].startswith(f"{dport} free")
    assert ("nodeb", "dist-init port") not in rows  # only node 0 binds the rendezvous
    with socket.socket() as taken:  # something else holds node 0's dist-init port
        taken.bind(("127.0.0.1", dport))
        taken.listen()
        res = cli(*args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "1 blocking check(s): dist-init port (node 0 nodea)" in res.stderr
    assert "0 nodea" in res.stdout and "1 nodeb" in res.stdout  # one table, a node column


def test_group_check_blocks_on_different_sglang_versions(group_hosts, two_sshd, tmp_path):
    """Node b's python sees SGLang 0.5.8 (a synthetic dist-info first on its path), node a the
    installed 0.5.9: the flags of each node are validated against its own live argparse spec,
    and the mismatch is one blocking row naming both nodes."""
    fake = tmp_path / "fake-site"
    (fake / "sglang-0.5.8.dist-info").mkdir(parents=True)
    (fake / "sglang-0.5.8.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.8\n"  # synthetic
    )
    py58 = tmp_path / "python-sglang058"
    py58.write_text(f'#!/bin/sh\nPYTHONPATH={fake} exec {sys.executable} "$@"\n')
    py58.chmod(0o755)
    venv = tmp_path / "venv"  # the profile names a venv; this one activates nothing
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    text = two_sshd[0].hosts_yaml(NODES[0], workdir=tmp_path / "wa", venv=venv)
    second = two_sshd[1].hosts_yaml(NODES[1], workdir=tmp_path / "wb", venv=venv, python=py58)
    text += "".join(second.splitlines(keepends=True)[1:])
    (Path(os.environ["GLMSERVE_CONFIG_DIR"]) / "hosts.yaml").write_text(text)
    res = cli("check", "--profile", "trtllm_mla", "--nodes", ",".join(NODES), "--json",
              "--set", f"server.port={free_local_port()}", timeout=240)  # fmt: skip
    assert res.returncode == 2, res.stdout + res.stderr
    rows = _rows_by(json.loads(res.stdout))
    assert rows[(None, "same sglang")]["status"] == "fail"
    assert rows[(None, "same sglang")]["detail"] == (
        "nodes run different SGLang versions: 0.5.8 on nodeb; 0.5.9 on nodea"
    )
    assert "for sglang 0.5.9" in rows[("nodea", "flags")]["detail"]
    assert "for sglang 0.5.8" in rows[("nodeb", "flags")]["detail"]
    assert "same sglang" in res.stderr.splitlines()[-1]


def test_group_bench_logs_and_compare(group_hosts):
    port = free_local_port()
    res = launch_group(port)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    gid, runs = data["group_id"], data["runs"]
    node0, node1 = runs[0]["run_id"], runs[1]["run_id"]
    follow = subprocess.Popen(
        [*GLMSERVE, "logs", gid, "-f",
         "-n", "0", "--poll", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        bench_args = ("--output-len", "16", "--num-prompts", "2", "--warmup", "0", "--json")
        by_group = cli("bench", gid, *bench_args)
        assert by_group.returncode == 0, by_group.stderr
        by_node1 = cli("bench", node1, *bench_args)  # a follower's run id: still node 0
        assert by_node1.returncode == 0, by_node1.stderr
        for out in (by_group, by_node1):
            result = json.loads(out.stdout)
            assert result["meta"]["run_id"] == node0 and result["decode_tok_s"] > 0
            group = result["meta"]["group"]
            assert group["group_id"] == gid
            assert [(n["node_rank"], n["host"], n["run_id"]) for n in group["nodes"]] == [
                (0, "nodea", node0),
                (1, "nodeb", node1),
            ]
        stored = RunStore.open().list_bench_results(run_id=node0)
        assert len(stored) == 2 and stored[0]["meta"]["group"]["nnodes"] == 2
        cmp = cli("compare", "--last", "2", "--json")  # (an all-digit run id reads as a result id)
        assert cmp.returncode == 0, cmp.stderr
        rows = json.loads(cmp.stdout)["rows"]
        assert [(r["run_id"], r["profile"]) for r in rows] == [(node0, "trtllm_mla")] * 2
        # logs GROUP: each node's lines, prefixed; logs RUN: that run's log as it is.
        logs = cli("logs", gid, "-n", "2")
        assert logs.returncode == 0, logs.stderr
        lines = logs.stdout.splitlines()
        prefixes = [ln.split("] ", 1)[0] + "]" for ln in lines]
        assert prefixes == ["[node0 nodea]"] * 2 + ["[node1 nodeb]"] * 2
        plain = cli("logs", node1, "-n", "2").stdout
        assert plain.splitlines() == [ln.removeprefix("[node1 nodeb] ") for ln in lines[2:]]
        assert cli("stop", gid).returncode == 0
        out, err = follow.communicate(timeout=30)  # -f ends once every node's server ended
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    assert follow.returncode == 0, err
    # Lines logged while following (the benches' requests on node 0) came through, prefixed.
    assert any(ln.startswith("[node0 nodea] ") and "/generate" in ln for ln in out.splitlines())
    assert all(ln.startswith(("[node0 nodea] ", "[node1 nodeb] ")) for ln in out.splitlines())
    assert f"group {gid}: every node's server has ended" in err
    for r in runs:
        assert _left(r) == []


def test_sweep_over_groups_crash_names_node_ctrl_c_stops_every_node_and_resume(group_hosts):
    """Two group profiles (``nodes:``) and one single-host profile (--host) in one sweep."""
    prof_dir = Path(os.environ["GLMSERVE_CONFIG_DIR"]) / "profiles"
    prof_dir.mkdir(parents=True, exist_ok=True)
    (prof_dir / "crash2n.yaml").write_text(
        "extends: trtllm_mla\nnodes: [nodea, nodeb]\nsim:\n  crash-at: kv\n  fault-node-rank: 1\n"
    )
    (prof_dir / "ok2n.yaml").write_text("extends: cutlass_mla\nnodes: [nodea, nodeb]\n")
    home = Path(os.environ["GLMSERVE_HOME"])
    argv = [*GLMSERVE, "sweep"]
    proc = subprocess.Popen(
        [*argv, "--simulate", "--host", "nodea", "--profiles", "crash2n,cutlass_mla,ok2n",
         "--set", f"server.port={free_local_port()}", "--set", "sim.gpu-arch=sm100",
         "--set", "sim.speed=5", "--output-len", "64", "--num-prompts", "3", "--timeout", "60",
         "--repeat", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline, sweep_file = time.monotonic() + 180, None
        while time.monotonic() < deadline and proc.poll() is None:
            found = sorted((home / "sweeps").glob("*/sweep.json"))
            if found:
                sweep_file = found[0]
                with contextlib.suppress(ValueError):  # caught mid-replace: read again
                    if json.loads(sweep_file.read_text())["entries"][2]["group_id"]:
                        break
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)  # ok2n's group is up: Ctrl-C
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert sweep_file is not None
    sw = json.loads(sweep_file.read_text())
    crashed, single, grouped = sw["entries"]
    assert (crashed["status"], single["status"], grouped["status"]) == (
        "crashed",
        "ok",
        "interrupted",
    )
    assert crashed["diagnosis"]["node_rank"] == 1 and crashed["diagnosis"]["host"] == "nodeb"
    assert [n["host"] for n in crashed["nodes"]] == ["nodea", "nodeb"]
    assert single["group_id"] is None and single["nodes"] is None
    store = RunStore.open()
    for node in grouped["nodes"]:  # Ctrl-C stopped every node of the running group
        run = store.get_run(node["run_id"])
        assert run.state == "STOPPED"
        assert _left({"host": run.host, "pgid": run.pgid}) == []
    res = cli("sweep", "--resume", sw["sweep_id"], "--json", timeout=180)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    rows = {r["profile"]: r for r in data["rows"]}
    assert [rows[p]["status"] for p in ("crash2n", "cutlass_mla", "ok2n")] == [
        "crashed",
        "ok",
        "ok",
    ]
    assert rows["crash2n"]["diagnosis"].startswith("node 1 (nodeb): OOM")
    assert rows["ok2n"]["nodes"] == ["nodea", "nodeb"] and rows["ok2n"]["decode_tok_s"] > 0
    ok2n = data["entries"][2]
    bench = store.list_bench_results(run_id=ok2n["run_id"])
    assert [n["host"] for n in bench[0]["meta"]["group"]["nodes"]] == ["nodea", "nodeb"]
    assert ok2n["nodes"][0]["run_id"] == ok2n["run_id"]
    for node in ok2n["nodes"]:
        run = store.get_run(node["run_id"])
        assert run.state == "STOPPED" and _left({"host": run.host, "pgid": run.pgid}) == []
    md = (sweep_file.parent / "sweep.md").read_text()
    assert f"- **ok2n**: group {ok2n['group_id']}: node 0 nodea" in md
