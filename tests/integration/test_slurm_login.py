"""A ``kind: slurm`` host behind a ``login`` host reached by ssh (a real sshd in front of the
real session cluster, tests/fixtures/slurm.py): every scheduler command runs there, the
server is reached through an ssh forward via the login host to the node's address, and the
other verbs (bench, logs -f, profile, compare, report, stop) work on the Slurm run.

``SLURM_CONF`` is unset in this process: a Slurm command run here instead of over ssh fails.
Also: ``sacct`` on a cluster without accounting (the session cluster has no slurmdbd)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path

import httpx
import pytest

from glmserve.remote.transport import free_local_port
from glmserve.store import RunStore

pytestmark = pytest.mark.slow


def _cli(args: list[str]) -> int:
    from glmserve.cli import main

    return int(main(args) or 0)


def _closed(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


def test_sacct_without_accounting_is_said_not_required(slurm):
    """The real answer of a cluster without slurmdbd: no record, and the reason says so."""
    from glmserve.remote.host_config import HostConfig
    from glmserve.remote.slurm_acct import accounting_job
    from glmserve.remote.transport import LocalTransport

    jid = slurm.cmd("sbatch", "--parsable", "-p", slurm.partition, "-o", "/dev/null",
                    "--wrap", "true").strip()  # fmt: skip
    t = LocalTransport(HostConfig(name="here"))
    job, why = accounting_job(t, jid)
    assert job is None
    assert why == "the cluster keeps no accounting (sacct: Slurm accounting storage is disabled)"


def _bench(capsys, run_id: str) -> int:
    capsys.readouterr()
    args = ["bench", run_id, "--num-prompts", "2", "--output-len", "4", "--warmup", "0"]
    assert _cli([*args, "--json"]) == 0
    return int(json.loads(capsys.readouterr().out)["id"])


def test_everything_through_the_login_host(slurm, login_cluster_host, capsys, tmp_path: Path):
    from glmserve.deploy.deployment import Deployment
    from glmserve.remote.endpoint import open_endpoint

    local = subprocess.run(["squeue", "-h"], capture_output=True, text=True, check=False)
    assert local.returncode != 0  # no SLURM_CONF here: only the login host reaches slurmctld
    port = free_local_port()
    launch = [
        "launch", "--profile", "trtllm_mla", "--host", login_cluster_host, "--simulate",
        "--set", f"server.port={port}", "--set", "sim.gpu-arch=sm100", "--set", "sim.speed=20",
        "--poll", "0.2", "--no-wait", "--json",
    ]  # fmt: skip
    assert _cli(launch) == 0
    store = RunStore.open()
    (run,) = store.list_runs()
    job = run.meta["slurm"]
    assert job["cluster"] == "glmtest" and job["job_name"] == f"glmserve-{run.run_id}"
    assert (job["job_id"], job["job_name"]) in {(j, n) for j, n, _s in slurm.jobs()}
    dep = Deployment.resolve(store, run.run_id)
    verdict = dep.watch(poll_s=0.2, timeout_s=90)
    assert verdict.state == "READY", verdict.decisive.diagnosis
    run = store.get_run(run.run_id)
    assert run.meta["slurm"]["nodes"] == slurm.node
    addr = run.meta["slurm"]["node_addr"]
    assert addr == "127.0.0.1"
    capsys.readouterr()
    assert _cli(["status", run.run_id, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert (row["state"], row["job_state"], row["nodes"]) == ("READY", "RUNNING", slurm.node)

    # the URL: a forward through the login host (not the node's port itself), closed after
    with open_endpoint(run.run_id) as base:
        fwd = int(base.rsplit(":", 1)[1])
        assert fwd != run.port
        assert httpx.get(f"{base}/health", timeout=5).status_code == 200
    assert _closed(fwd)

    a = _bench(capsys, run.run_id)
    b = _bench(capsys, run.run_id)
    assert _cli(["compare", str(a), str(b), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert len(table["rows"]) == 2
    html = tmp_path / "r.html"
    assert _cli(["report", str(a), str(b), "--html", str(html)]) == 0
    assert html.stat().st_size > 0
    capsys.readouterr()
    assert _cli(["profile", run.run_id, "--steps", "2", "--timeout", "60", "--json"]) == 0
    prof = json.loads(capsys.readouterr().out)
    assert prof["ranks"] and all(r["kernels"] for r in prof["ranks"])

    assert _cli(["logs", run.run_id, "-n", "200"]) == 0
    assert "The server is fired up and ready to roll!" in capsys.readouterr().out
    # logs -f follows the job's server.log over ssh until the job ends (stop cancels it)
    follow: dict[str, int] = {}
    th = threading.Thread(
        target=lambda: follow.update(
            rc=_cli(["logs", run.run_id, "-f", "-n", "1", "--poll", "0.2"])
        )
    )
    th.start()
    assert _cli(["stop", run.run_id]) == 0
    th.join(60)
    assert not th.is_alive() and follow["rc"] == 0
    assert store.get_run(run.run_id).state == "STOPPED"
    states = {j: s for j, _n, s in slurm.jobs()}
    assert states[job["job_id"]] == "CANCELLED"
