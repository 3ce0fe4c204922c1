"""Runs on a real single-node Slurm (tests/fixtures/slurm.py), jobs running the simulator,
through the same ``Deployment`` lifecycle and CLI verbs as any host."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from glmserve.remote.transport import free_local_port
from glmserve.store import RunStore

pytestmark = pytest.mark.slow


def _cli(args: list[str]) -> int:
    from glmserve.cli import main

    return int(main(args) or 0)


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
    assert (row["state"], row["job_state"], row["reason"]) == (
        "PENDING",
        "PENDING",
        "PartitionDown",
    )
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


def _launch_slow(slurm, port: int):
    """A run whose job runs but whose server stays in its load phase (not READY)."""
    from glmserve.deploy.deployment import Deployment

    assert _cli([*_launch_args(port), "--set", "sim.load-seconds=300", "--no-wait"]) == 0
    store = RunStore.open()
    return store, Deployment.resolve(store, _run(store).run_id)


def _when_running(store: RunStore, run_id: str, action) -> threading.Thread:
    """Do ``action`` once the watch has seen the job RUNNING (from another thread)."""

    def go() -> None:
        end = time.monotonic() + 30
        while time.monotonic() < end and "RUNNING" not in _events(run_id):
            time.sleep(0.1)
        time.sleep(0.5)
        action()

    th = threading.Thread(target=go, daemon=True)
    th.start()
    return th


def test_external_scancel_is_exited_not_a_crash(slurm, cluster_host):
    store, dep = _launch_slow(slurm, free_local_port())
    jid = dep.runs[0].meta["slurm"]["job_id"]
    th = _when_running(store, dep.id, lambda: slurm.cmd("scancel", jid))
    verdict = dep.watch(poll_s=0.2, timeout_s=60)
    th.join()
    assert verdict.state == "EXITED"
    run = store.get_run(dep.id)
    assert run.state == "EXITED" and "cancelled outside glmserve" in (run.root_cause or "")
    assert run.category is None


def test_node_set_down_is_the_node_failure_verdict(slurm, cluster_host, capsys):
    store, dep = _launch_slow(slurm, free_local_port())
    th = _when_running(store, dep.id, lambda: slurm.node_down("test"))
    verdict = dep.watch(poll_s=0.2, timeout_s=60)
    th.join()
    assert verdict.state == "NODE_FAIL", verdict.decisive.diagnosis
    run = store.get_run(dep.id)
    assert run.state == "NODE_FAIL" and "NODE_FAIL" in (run.root_cause or "")
    from glmserve.cli import views
    from glmserve.errors import EXIT_NODE_FAIL

    assert views.verdict_error(dep, verdict).exit_code == EXIT_NODE_FAIL


def test_pending_in_a_down_partition_honours_timeout(slurm, cluster_host, capsys):
    """Held PENDING (PartitionDown): the watch says so and ends at --timeout (exit 4), the
    job still queued; stop then cancels it."""
    slurm.partition_state("DOWN")
    t0 = time.monotonic()
    rc = _cli([*_launch_args(free_local_port()), "--timeout", "3"])
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == 4 and 3 <= took < 20
    assert "PENDING (Reason: PartitionDown)" in err
    run = _run()
    jid = run.meta["slurm"]["job_id"]
    assert dict((j, s) for j, _n, s in slurm.jobs())[jid] == "PENDING"
    assert "PENDING" in _events(run.run_id) and "RUNNING" not in _events(run.run_id)
    assert _cli(["stop", run.run_id]) == 0
    assert dict((j, s) for j, _n, s in slurm.jobs())[jid] == "CANCELLED"


def test_stop_never_cancels_a_job_it_did_not_submit(slurm, cluster_host, tmp_path):
    """A foreign job with the run's very job name survives `stop`; and a record pointing at
    a foreign job id (an id reused) is refused, the job left running."""
    slurm.partition_state("DOWN")  # everything stays queued: nothing needs to run
    assert _cli([*_launch_args(free_local_port()), "--no-wait"]) == 0
    run = _run()
    name = run.meta["slurm"]["job_name"]
    foreign = slurm.cmd(
        "sbatch", "--parsable", "-J", name, "-o", str(tmp_path / "f.out"), "--wrap", "sleep 60"
    ).strip()
    other = slurm.cmd(
        "sbatch",
        "--parsable",
        "-J",
        name + "x",
        "-o",
        str(tmp_path / "g.out"),
        "--wrap",
        "sleep 60",
    ).strip()
    store = RunStore.open()
    # the record names the foreign job's id: its name matches, its submit time cannot
    forged = {**run.meta, "slurm": {**run.meta["slurm"], "job_id": foreign}}
    store.update_run(run.run_id, meta=forged)
    assert _cli(["stop", run.run_id]) != 0
    states = dict((j, s) for j, _n, s in slurm.jobs())
    assert states[foreign] == "PENDING" and states[run.meta["slurm"]["job_id"]] == "PENDING"
    store.update_run(run.run_id, meta=run.meta)  # the true record: only its job goes
    assert _cli(["stop", run.run_id]) == 0
    states = dict((j, s) for j, _n, s in slurm.jobs())
    assert states[run.meta["slurm"]["job_id"]] == "CANCELLED"
    assert states[foreign] == "PENDING" and states[other] == "PENDING"


def test_time_limit_mid_bench_is_time_limit_with_partial_results(slurm, cluster_host):
    """The job's time limit ends it while a bench runs: the bench stops, stores what it
    measured (incomplete) and exits 8 (TIME_LIMIT); the run is recorded TIME_LIMIT."""
    from tests.fixtures.cli import GLMSERVE

    assert _cli(_launch_args(free_local_port())) == 0
    run = _run()
    bench = [*GLMSERVE, "bench", run.run_id, "--json", "--warmup", "0", "--mode", "concurrency",
             "--concurrency", "2", "--num-prompts", "3000", "--output-len", "64"]  # fmt: skip
    proc = subprocess.Popen(bench, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2)  # measuring by now
    # the time limit shortened to what the job has run: Slurm ends it at its next check
    slurm.cmd("scontrol", "update", f"jobid={run.meta['slurm']['job_id']}", "EndTime=now")
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 8, err
    assert "TIME_LIMIT" in err.strip().splitlines()[-1]
    data = json.loads(out)
    assert data["complete"] is False and data["levels"][0]["completed"] > 0
    with RunStore.open() as store:
        assert store.list_bench_results()[0]["result"]["complete"] is False
        assert store.get_run(run.run_id).state == "TIME_LIMIT"


def test_the_header_is_what_a_real_sbatch_accepts(slurm, tmp_path):
    """The job script as rendered for a host entry, checked by sbatch itself (--test-only)."""
    from glmserve.remote.host_config import HostConfig
    from glmserve.remote.slurm import job_script

    host = HostConfig(
        name="c", kind="slurm",
        slurm={"partition": slurm.partition, "time": "0-00:10:00", "sbatch_options": {
            "cpus-per-task": 1, "mem": "100M", "exclusive": True, "signal": "B:TERM@30"}},
    )  # fmt: skip
    script = tmp_path / "job.sbatch"
    script.write_text(job_script(host))
    res = subprocess.run(
        ["sbatch", "--test-only", str(script)], env=slurm.env, capture_output=True, text=True
    )
    assert res.returncode == 0 and "to start at" in res.stderr, res.stderr


def test_a_host_group_with_a_slurm_node_is_refused_not_half_run(slurm, cluster_host, capsys):
    """A host group mixing a Slurm host in is refused before anything is submitted (N nodes
    on Slurm are one job: --set server.nnodes=N, tests/integration/test_slurm_multinode.py)."""
    args = _launch_args(free_local_port())
    i = args.index("--host")
    args[i : i + 2] = ["--nodes", "cluster,local"]
    before = len(slurm.jobs())
    assert _cli(args) == 2
    assert "run N nodes there as one job" in capsys.readouterr().err
    assert len(slurm.jobs()) == before
    assert RunStore.open().list_runs() == []


def test_external_scancel_after_ready_is_exited_in_status(slurm, cluster_host, capsys):
    """After READY nothing watches: `status` finds the job CANCELLED. slurmstepd's last log
    line ("*** JOB n ON node CANCELLED AT ... ***") must not read as a crash."""
    assert _cli(_launch_args(free_local_port())) == 0
    run = _run()
    slurm.cmd("scancel", run.meta["slurm"]["job_id"])
    end = time.monotonic() + 20
    while time.monotonic() < end and "CANCELLED AT" not in Path(run.log_path).read_text():
        time.sleep(0.2)
    capsys.readouterr()
    assert _cli(["status", run.run_id, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["state"] == "EXITED", row
    assert "cancelled outside glmserve" in row["root_cause"] and row["category"] is None


def test_a_sweep_runs_each_profile_as_its_own_job(slurm, cluster_host):
    """`sweep` goes through the same Deployment: each profile is a job, benched, cancelled
    (sequentially: --max-parallel is not built)."""
    from tests.fixtures.cli import GLMSERVE

    proc = subprocess.run(
        [*GLMSERVE, "sweep", "--simulate", "--host", "cluster", "--profiles",
         "trtllm_mla,flashinfer", "--set", f"server.port={free_local_port()}", "--set",
         "sim.speed=10", "--output-len", "24", "--num-prompts", "2", "--timeout", "60", "--json"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)["rows"]
    assert [r["status"] for r in rows] == ["crashed", "ok"]
    states = dict((j, s) for j, _n, s in slurm.jobs())
    with RunStore.open() as store:
        jobs = [store.get_run(r["run_id"]).meta["slurm"]["job_id"] for r in rows]
    assert len(set(jobs)) == 2
    assert all(states[j] in ("CANCELLED", "COMPLETED", "FAILED") for j in jobs), states
