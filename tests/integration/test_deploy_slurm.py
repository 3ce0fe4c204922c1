"""Runs on a real single-node Slurm (tests/fixtures/slurm.py), jobs running the simulator,
through the same ``Deployment`` lifecycle and CLI verbs as any host."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from glmserve.remote.transport import free_local_port
from glmserve.store import RunStore

pytestmark = pytest.mark.slow


def _cli(args: list[str]) -> int:
    from glmserve.cli import main

    return int(main(args) or 0)


@pytest.fixture
def cluster_host(slurm, tmp_path: Path) -> str:
    """A ``kind: slurm`` host on the test cluster (sbatch runs here: no login)."""
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "hosts.yaml").write_text(
        "hosts:\n"
        "  cluster:\n"
        "    kind: slurm\n"
        f"    workdir: {tmp_path / 'shared'}\n"
        f"    slurm: {{partition: {slurm.partition}, time: '10:00'}}\n"
    )
    return "cluster"


def _launch_args(port: int, *extra: str) -> list[str]:
    return [
        "launch", "--profile", "trtllm_mla", "--host", "cluster", "--simulate",
        "--set", f"server.port={port}", "--set", "sim.gpu-arch=sm100", "--set", "sim.speed=20",
        "--poll", "0.2", *extra,
    ]  # fmt: skip


def _run(store: RunStore | None = None):
    store = store or RunStore.open()
    runs = store.list_runs()
    assert len(runs) == 1
    return runs[0]


def _events(run_id: str) -> list[str]:
    with RunStore.open() as store:
        return [e["state"] for e in store.list_events(run_id)]


def test_launch_pending_running_ready_bench_stop(slurm, cluster_host, capsys):
    """The job is queued (held by a down partition: PENDING with its reason), then runs,
    reaches READY, is benched through the node's address, and stop cancels exactly it."""
    port = free_local_port()
    slurm.partition_state("DOWN")
    assert _cli([*_launch_args(port), "--no-wait", "--json"]) == 0
    run = _run()
    job = run.meta["slurm"]
    assert job["job_name"] == f"glmserve-{run.run_id}" and job["user"] and job["submit_time"]
    assert job["cluster"] == "glmtest"
    capsys.readouterr()
    assert _cli(["status", run.run_id, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert (row["state"], row["job_state"], row["reason"]) == ("PENDING", "PENDING", "PartitionDown")
    slurm.partition_state("UP")
    from glmserve.deploy.deployment import Deployment

    store = RunStore.open()
    dep = Deployment.resolve(store, run.run_id)
    verdict = dep.watch(poll_s=0.2, timeout_s=60)
    assert verdict.state == "READY", verdict.decisive.diagnosis
    run = store.get_run(run.run_id)
    assert run.meta["slurm"]["nodes"] == slurm.node
    assert run.meta["slurm"]["node_addr"] == "127.0.0.1"
    assert run.meta["slurm"]["queued_s"] >= 0
    capsys.readouterr()
    assert _cli(["status", run.run_id, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert (row["state"], row["job_state"], row["nodes"]) == ("READY", "RUNNING", slurm.node)
    bench = ["bench", run.run_id, "--num-prompts", "2", "--output-len", "4", "--warmup", "0"]
    assert _cli(bench) == 0
    assert _cli(["stop", run.run_id]) == 0
    assert store.get_run(run.run_id).state == "STOPPED"
    states = dict((j, s) for j, _n, s in slurm.jobs())
    assert states[job["job_id"]] == "CANCELLED"
