"""A two-node group of two *local* hosts (no ssh), driven through the library, fast.

Covers the group path that does not need sshd: launch (followers first), the concurrent watch
and the READY bookkeeping of the other nodes; the sshd test covers the CLI and crashes.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

from glmserve.config import profiles
from glmserve.deploy.deployment import Deployment
from glmserve.deploy.plan import plan_spec
from glmserve.remote.hosts import get_host
from glmserve.remote.process import probe_group
from glmserve.remote.transport import LocalTransport, free_local_port
from glmserve.store import RunStore

pytestmark = pytest.mark.slow


def _cli(args: list[str]) -> int:
    from glmserve.cli import main

    rc = main(args)
    return int(rc or 0)


@pytest.fixture
def local_pair(tmp_path: Path) -> list[str]:
    cfg_dir = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg_dir.mkdir(parents=True, exist_ok=True)
    (cfg_dir / "hosts.yaml").write_text(
        f"hosts:\n  la:\n    workdir: {tmp_path / 'a'}\n  lb:\n    workdir: {tmp_path / 'b'}\n"
    )
    return ["la", "lb"]


def test_local_group_ready_then_stop(local_pair, capsys):
    port = free_local_port()
    spec = profiles.load_profile(
        "trtllm_mla",
        [f"server.port={port}", "sim.gpu-arch=sm100", "sim.speed=20"],
    )
    spec = replace(profiles.simulate(spec), nodes=local_pair)
    store = RunStore.open()
    dep = Deployment.launch(plan_spec(spec), store=store)
    gid, runs = dep.id, dep.runs
    try:
        # Followers are started first so node 0 checks (and binds) the port last.
        assert runs[1].created_at <= runs[0].created_at
        result = dep.watch(poll_s=0.2, timeout_s=60)  # READY: the other nodes marked READY
        assert (result.state, result.failing_rank) == ("READY", None)
        assert set(result.results) <= {0, 1} and result.results[0].state == "READY"
        follower = store.get_run(runs[1].run_id)
        assert follower.state == "READY" and follower.meta["ready_pids"] == [follower.pid]
        assert Path(runs[0].run_dir).parent.parent != Path(runs[1].run_dir).parent.parent
        args = ["bench", gid, "--num-prompts", "1", "--output-len", "4", "--warmup", "0"]
        assert _cli(args) == 0
        # node 1 dies (its recorded process group, as `stop` would signal it): node 0 still
        # answers HTTP, but a bench of the group must refuse, naming the dead node
        os.killpg(int(runs[1].pgid or 0), signal.SIGKILL)
        deadline = time.monotonic() + 10
        t = LocalTransport(get_host("lb"))
        while probe_group(t, int(runs[1].pgid or 0)).live_pids and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _cli(args) == 3
        # status: node 0 alone still looks READY, but its group cannot serve (asked by group
        # id, and in the default live list, where the ended node 1 no longer shows)
        capsys.readouterr()
        for ident in ([gid], []):
            assert _cli(["status", *ident, "--json"]) == 0
            rows = json.loads(capsys.readouterr().out)
            head = next(r for r in rows if r["run_id"] == runs[0].run_id)
            assert head["state"] == "READY" and head["group_state"] in ("EXITED", "CRASHED")
            assert f"node 1 (lb) is {head['group_state']}" in head["group_problem"]
        # diagnose takes the group id too: the failed node decides, named (audit round 2)
        assert _cli(["diagnose", gid, "--json"]) == 3
        assert json.loads(capsys.readouterr().out)["state"] in ("EXITED", "CRASHED")
        assert _cli(["diagnose", runs[0].run_id]) == 0  # node 0 by its own id: still READY
    finally:
        reports = dep.stop(timeout=5, raise_failure=True)
    assert [r["group_id"] for r in reports] == [gid, gid]
    t = LocalTransport(get_host("la"))
    for r in runs:
        assert probe_group(t, int(r.pgid or 0)).live_pids == []


def test_local_group_warmup_hang_is_stalled_by_the_phase_budget(local_pair):
    """Issue 10 #1 on the group path: node 0 hangs in warmup while its /health polls keep
    writing access lines; the per-phase budget reaches every node's watcher."""
    from glmserve.diagnose import State

    port = free_local_port()
    spec = profiles.load_profile(
        "trtllm_mla",
        [f"server.port={port}", "sim.gpu-arch=sm100", "sim.speed=20", "sim.hang-at=warmup",
         "sim.fault-node-rank=0"],
    )  # fmt: skip
    spec = replace(profiles.simulate(spec), nodes=local_pair)
    store = RunStore.open()
    dep = Deployment.launch(plan_spec(spec), store=store)
    runs = dep.runs
    try:
        t0 = time.monotonic()
        result = dep.watch(poll_s=0.2, stall_budgets={State.WARMUP: 3.0})
        assert (result.state, result.failing_rank) == ("STALLED", 0)
        assert time.monotonic() - t0 < 30
        d = result.decisive.diagnosis
        assert d.phase is State.WARMUP and "stall budget 3s, --stall-budget warmup=3" in d.hint
        log0 = (Path(runs[0].run_dir) / "server.log").read_text()
        assert '"GET /health HTTP/1.1" 503' in log0  # the noise was there
    finally:
        dep.stop(timeout=5, raise_failure=True)
