"""Multi-node as one Slurm job, on a real two-node cluster on this machine (two ``slurmd -N``,
tests/fixtures/slurm.py): the generated job script word for word, what ``sbatch --test-only``
says of it, and a real run in which each node's task gets its rank and the same
``--dist-init-addr`` (the allocation's first host, by its NodeAddr), with a stand-in server
that prints its argv; then ``launch --set server.nnodes=2`` through ``Deployment``: one job,
two simulator servers (one per node), READY, bench, status, stop."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from glmserve.remote.host_config import HostConfig
from glmserve.remote.slurm import multinode_job_script
from glmserve.remote.slurm_config import SlurmOptions

pytestmark = pytest.mark.slow

ECHO = 'import json, sys; print("ARGV " + json.dumps(sys.argv[1:]), flush=True)'


def _host(partition: str) -> HostConfig:
    return HostConfig(
        name="cluster",
        kind="slurm",
        slurm=SlurmOptions(
            partition=partition, time="05:00", sbatch_options={"ntasks-per-node": "4"}
        ),
    )


EXPECTED = """\
#!/bin/bash
#SBATCH --partition=debug
#SBATCH --time=05:00
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
addr=$(scontrol show node -o "$head" | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')
export GLMSERVE_DIST_INIT_ADDR="${addr:-$head}:5757"
exec srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c 'exec {py} \
-c '"'"'{echo}'"'"' --model '"'"'m; rm -rf /'"'"' --nnodes 2 --node-rank "$SLURM_NODEID" \
--dist-init-addr "$GLMSERVE_DIST_INIT_ADDR"'
"""


def test_the_multinode_job_script_word_for_word_accepted_and_run_on_two_nodes(
    slurm_two_nodes, tmp_path
):
    c = slurm_two_nodes
    argv = [sys.executable, "-c", ECHO, "--model", "m; rm -rf /"]
    script = multinode_job_script(_host(c.partition), 2, 5757, argv)
    assert script == EXPECTED.replace("{py}", sys.executable).replace("{echo}", ECHO)
    (tmp_path / "job.sbatch").write_text(script)
    test_only = subprocess.run(
        ["sbatch", "--test-only", str(tmp_path / "job.sbatch")],
        env=c.env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert test_only.returncode == 0 and "on nodes n[1-2]" in test_only.stderr, test_only.stderr
    out = tmp_path / "server.log"
    run = subprocess.run(
        ["sbatch", "--parsable", "--wait", f"--output={out}", f"--chdir={tmp_path}",
         str(tmp_path / "job.sbatch")],
        env=c.env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert run.returncode == 0, (run.stderr, out.read_text() if out.exists() else "")
    end = time.monotonic() + 5  # the output file is complete once the job is
    while time.monotonic() < end and out.read_text().count("ARGV ") < 2:
        time.sleep(0.1)
    argvs = [json.loads(ln[5:]) for ln in out.read_text().splitlines() if ln.startswith("ARGV ")]
    ranks = sorted(a[a.index("--node-rank") + 1] for a in argvs)
    assert ranks == ["0", "1"], argvs
    for a in argvs:
        assert a[:2] == ["--model", "m; rm -rf /"]  # quoted words arrive as they were
        assert a[a.index("--nnodes") + 1] == "2"
        assert a[a.index("--dist-init-addr") + 1] == "127.0.0.1:5757"


def test_launch_of_n_nodes_is_one_job_through_deployment(slurm_two_nodes, tmp_path, capsys,
                                                         monkeypatch):  # fmt: skip
    """``launch --host CLUSTER --set server.nnodes=2``: ONE job of two nodes (two simulator
    servers, ranks 0 and 1, meeting at the first host's address), status shows the node
    list, the URL is node 0's, bench works, stop cancels that one job."""
    import os
    from pathlib import Path

    from glmserve.cli import main
    from glmserve.deploy.deployment import Deployment
    from glmserve.remote.transport import free_local_port
    from glmserve.store import RunStore

    c = slurm_two_nodes
    monkeypatch.setenv("SLURM_CONF", str(c.conf))  # this test's cluster, not the session one
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "hosts.yaml").write_text(
        "hosts:\n  cluster2:\n    kind: slurm\n"
        f"    workdir: {tmp_path / 'shared'}\n"
        f"    slurm: {{partition: {c.partition}, time: '10:00'}}\n"
    )
    port = free_local_port()
    launch = [
        "launch", "--profile", "trtllm_mla", "--host", "cluster2", "--simulate",
        "--set", f"server.port={port}", "--set", "server.nnodes=2",
        "--set", "sim.gpu-arch=sm100", "--set", "sim.speed=20", "--no-wait", "--json",
    ]  # fmt: skip
    assert main(launch) == 0
    store = RunStore.open()
    (run,) = store.list_runs()
    job = run.meta["slurm"]
    assert (job["nnodes"], job["dist_port"]) == (2, port + 1000)
    run_dir = Path(run.run_dir)
    script = (run_dir / "job.sbatch").read_text()
    assert "#SBATCH --nodes=2" in script
    assert (
        'bash -c \'exec bash launch.sh --nnodes 2 --node-rank "$SLURM_NODEID" '
        '--dist-init-addr "$GLMSERVE_DIST_INIT_ADDR"\'' in script
    )
    launch_sh = (run_dir / "launch.sh").read_text()
    assert "--nnodes" not in launch_sh and launch_sh.rstrip().endswith('"$@"')
    verdict = Deployment.resolve(store, run.run_id).watch(poll_s=0.2, timeout_s=90)
    assert verdict.state == "READY", verdict.decisive.diagnosis
    run = store.get_run(run.run_id)
    assert (run.meta["slurm"]["nodes"], run.meta["slurm"]["node_addr"]) == ("n[1-2]", "127.0.0.1")
    log = (run_dir / "server.log").read_text()
    assert "node rank 1 of 2" in log and f"(dist-init-addr 127.0.0.1:{port + 1000})" in log
    assert "The server is fired up and ready to roll!" in log
    capsys.readouterr()
    assert main(["status", run.run_id, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert (row["state"], row["job_state"], row["nodes"]) == ("READY", "RUNNING", "n[1-2]")
    bench = ["bench", run.run_id, "--num-prompts", "2", "--output-len", "4", "--warmup", "0"]
    assert main(bench) == 0
    ours = [j for j, n, _s in c.jobs() if n == f"glmserve-{run.run_id}"]
    assert ours == [job["job_id"]]  # one job for both nodes
    assert main(["stop", run.run_id]) == 0
    assert store.get_run(run.run_id).state == "STOPPED"
    assert {j: s for j, _n, s in c.jobs()}[job["job_id"]] == "CANCELLED"


def test_one_node_crashing_ends_the_whole_job_as_a_crash(slurm_two_nodes, tmp_path, monkeypatch):
    """Node rank 1's server crashes at warmup: srun's --kill-on-bad-exit ends node 0's too
    (NCCL would otherwise hang), and the run is CRASHED with that node's error, the job
    gone from the nodes (not a stall, not a scheduler verdict)."""
    import os
    from pathlib import Path

    from glmserve.cli import main
    from glmserve.deploy.deployment import Deployment
    from glmserve.remote.transport import free_local_port
    from glmserve.store import RunStore

    c = slurm_two_nodes
    monkeypatch.setenv("SLURM_CONF", str(c.conf))
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "hosts.yaml").write_text(
        "hosts:\n  cluster2:\n    kind: slurm\n"
        f"    workdir: {tmp_path / 'shared'}\n"
        f"    slurm: {{partition: {c.partition}, time: '10:00'}}\n"
    )
    launch = [
        "launch", "--profile", "trtllm_mla", "--host", "cluster2", "--simulate",
        "--set", f"server.port={free_local_port()}", "--set", "server.nnodes=2",
        "--set", "sim.gpu-arch=sm100", "--set", "sim.speed=20",
        "--set", "sim.crash-at=warmup", "--set", "sim.fault-node-rank=1", "--no-wait",
    ]  # fmt: skip
    assert main(launch) == 0
    store = RunStore.open()
    (run,) = store.list_runs()
    verdict = Deployment.resolve(store, run.run_id).watch(poll_s=0.2, timeout_s=90)
    assert verdict.state == "CRASHED", verdict.decisive.diagnosis
    run = store.get_run(run.run_id)
    assert run.category == "ILLEGAL_MEMORY_ACCESS"  # the simulator's default crash, node 1's
    assert "illegal memory access" in (run.root_cause or "")
    end = time.monotonic() + 15
    while time.monotonic() < end:
        states = {j: s for j, _n, s in c.jobs()}
        if states.get(run.meta["slurm"]["job_id"]) not in ("RUNNING", "COMPLETING"):
            break
        time.sleep(0.2)
    assert states[run.meta["slurm"]["job_id"]] in ("FAILED", "COMPLETED"), states


def test_more_nodes_than_the_partition_has_stays_pending_with_slurms_reason(
    slurm_two_nodes, tmp_path, monkeypatch
):
    """``--set server.nnodes=3`` on a two-node partition: sbatch takes it (the cluster does
    not enforce partition limits at submission) and Slurm holds it PENDING with its reason;
    the watch says so and ends at ``--timeout`` (TIMEOUT, the queue time never a stall);
    ``stop`` cancels the queued job."""
    import os
    from pathlib import Path

    from glmserve.cli import main
    from glmserve.deploy.deployment import Deployment
    from glmserve.remote.transport import free_local_port
    from glmserve.store import RunStore

    c = slurm_two_nodes
    monkeypatch.setenv("SLURM_CONF", str(c.conf))
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "hosts.yaml").write_text(
        "hosts:\n  cluster2:\n    kind: slurm\n"
        f"    workdir: {tmp_path / 'shared'}\n"
        f"    slurm: {{partition: {c.partition}, time: '10:00'}}\n"
    )
    rc = main([
        "launch", "--profile", "trtllm_mla", "--host", "cluster2", "--simulate",
        "--set", f"server.port={free_local_port()}", "--set", "server.nnodes=3",
        "--set", "server.tp-size=6", "--set", "sim.gpu-arch=sm100", "--no-wait",
    ])  # fmt: skip
    assert rc == 0
    store = RunStore.open()
    (run,) = store.list_runs()
    verdict = Deployment.resolve(store, run.run_id).watch(poll_s=0.2, timeout_s=3)
    res = verdict.decisive
    assert verdict.state == "TIMEOUT"
    reason = res.extra["pending"]
    assert reason == "PartitionNodeLimit"  # Slurm 22.05's reason for more nodes than it has
    assert f"still PENDING (Reason: {reason})" in (res.diagnosis.hint or "")
    jid = run.meta["slurm"]["job_id"]
    assert {j: st for j, _n, st in c.jobs()}[jid] == "PENDING"
    assert main(["stop", run.run_id]) == 0
    assert {j: st for j, _n, st in c.jobs()}[jid] == "CANCELLED"


def test_n_nodes_through_a_login_host_over_ssh(slurm_two_nodes, slurm_two_nodes_login, tmp_path,
                                               monkeypatch):  # fmt: skip
    """The same one-job launch with the cluster behind a login host reached by ssh (no
    ``SLURM_CONF`` here): submitted, watched READY, benched through the forward via the login
    host to node 0's address, stopped, all over ssh."""
    import os
    import sys
    from pathlib import Path

    from glmserve.cli import main
    from glmserve.deploy.deployment import Deployment
    from glmserve.remote.hosts import get_host
    from glmserve.remote.transport import SshTransport, free_local_port
    from glmserve.store import RunStore

    c, login = slurm_two_nodes, slurm_two_nodes_login
    monkeypatch.delenv("SLURM_CONF", raising=False)
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "hosts.yaml").write_text(
        "hosts:\n  cluster2:\n    kind: slurm\n"
        f"    login: {login.alias}\n    ssh_config: {login.ssh_config}\n"
        f"    connect_timeout: 5\n    python: {sys.executable}\n"
        f"    workdir: {tmp_path / 'shared'}\n"
        f"    slurm: {{partition: {c.partition}, time: '10:00', reach: forward}}\n"
    )
    try:
        port = free_local_port()
        launch = [
            "launch", "--profile", "trtllm_mla", "--host", "cluster2", "--simulate",
            "--set", f"server.port={port}", "--set", "server.nnodes=2",
            "--set", "sim.gpu-arch=sm100", "--set", "sim.speed=20", "--no-wait",
        ]  # fmt: skip
        assert main(launch) == 0
        store = RunStore.open()
        (run,) = store.list_runs()
        verdict = Deployment.resolve(store, run.run_id).watch(poll_s=0.2, timeout_s=90)
        assert verdict.state == "READY", verdict.decisive.diagnosis
        run = store.get_run(run.run_id)
        assert run.meta["slurm"]["nodes"] == "n[1-2]"
        bench = ["bench", run.run_id, "--num-prompts", "2", "--output-len", "4", "--warmup", "0"]
        assert main(bench) == 0
        assert main(["stop", run.run_id]) == 0
        assert {j: s for j, _n, s in c.jobs()}[run.meta["slurm"]["job_id"]] == "CANCELLED"
    finally:
        SshTransport(get_host("cluster2")).disconnect()
