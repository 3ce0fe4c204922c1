"""A bench measures the run it names, or nothing: identity, death mid-bench, failed requests.

Real peers throughout: runs launched with ``glmserve launch --simulate`` on the local host
(and over the real sshd fixture), benched through the console script, results read back
from the run store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.fixtures.cli import GLMSERVE
from tests.fixtures.cli import run_glmserve as cli
from tests.fixtures.simulator import FAST, free_port

from glmserve.store import RunStore

pytestmark = pytest.mark.slow


@pytest.fixture
def launch():
    """``launch(profile, *sets, host=None) -> run id``; every run started is stopped after."""
    started: list[str] = []

    def _launch(profile: str, *sets: str, host: str | None = None) -> str:
        args = ["launch", "--simulate", "--profile", profile, "--poll", "0.3"]
        if host:
            args += ["--host", host]
        for s in ("sim.speed=20", *sets):
            args += ["--set", s]
        res = cli(*args)
        assert res.returncode == 0, res.stderr[-2000:]
        run_id = res.stdout.split()[0]
        started.append(run_id)
        return run_id

    yield _launch
    for run_id in started:
        cli("stop", run_id)


def bench_rows(run_id: str | None = None) -> list[dict]:
    with RunStore.open() as store:
        return store.list_bench_results(run_id=run_id) if run_id else store.list_bench_results()


def status(run_id: str) -> dict:
    res = cli("status", run_id, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)[0]


def test_bench_of_a_stopped_run_is_refused_although_another_server_holds_its_port(launch):
    """Issue 10 #2: launch A on P, stop A, launch B on P: `bench A` must not measure B."""
    port = free_port()
    a = launch("flashinfer", f"server.port={port}")
    assert cli("stop", a).returncode == 0
    b = launch("flashinfer_gtc", f"server.port={port}")
    res = cli("bench", a, "--num-prompts", "2", "--output-len", "16", "--warmup", "0")
    assert res.returncode == 2, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert f"run {a} is STOPPED" in last and "nothing stored" in last
    assert bench_rows() == []
    ok = cli("bench", b, "--num-prompts", "2", "--output-len", "16", "--json")
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["meta"]["identity"]["listener"] == "ours"
    assert [r["run_id"] for r in bench_rows()] == [b]


def test_another_server_on_the_runs_port_is_named_and_not_measured(launch):
    """A alive, but what answers on the port it is recorded with is another run's server
    (its listening socket is not in A's process group): bench and profile refuse, nothing is
    stored, status says the port is lost."""
    a = launch("flashinfer", f"server.port={free_port()}")
    other_port = free_port()
    launch("trtllm_mla", f"server.port={other_port}", "sim.gpu-arch=sm100")
    with RunStore.open() as store:
        # the record now names a port another live run has claimed: drop A's claim so the
        # store lets the tampered row be (a stale row of this shape is what bench must catch)
        store.update_run(a, port=other_port, port_claim=None)
    res = cli("bench", a, "--num-prompts", "2", "--output-len", "16")
    # The run's port is held by a process outside it while its log says ready: the shared
    # READY rule (assess.assess_run) calls that a lost port, before /server_info is even asked
    # (the /server_info field comparison is unit-tested in tests/unit/test_identity.py).
    assert res.returncode == 3, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert f"run {a} is CRASHED" in last and "held by a process outside this run" in last
    assert bench_rows() == []
    prof = cli("profile", a, "--steps", "2")
    assert prof.returncode == 3 and "held by a process outside this run" in prof.stderr
    assert status(a)["state"] == "CRASHED"


def test_bench_of_a_run_whose_worker_died_is_refused_with_its_diagnosis(launch):
    """Issue 10 #11: after a worker death (status CRASHED), `bench RUN` exited 0 with 0/2 ok."""
    # sim.speed=20 scales SGLang's 20 s health-check timeout to 1 s
    run = launch("flashinfer", f"server.port={free_port()}", "sim.worker-death-after=0.5")
    deadline = time.monotonic() + 30
    while status(run)["state"] != "CRASHED":
        assert time.monotonic() < deadline, "worker death never seen by status"
        time.sleep(0.5)
    res = cli("bench", run, "--num-prompts", "2", "--output-len", "16")
    assert res.returncode == 3, res.stderr
    assert f"run {run} is CRASHED" in res.stderr and "died" in res.stderr
    assert bench_rows() == []


def test_crash_during_bench_reports_the_diagnosis_and_keeps_partial_results(launch):
    """Issue 10 #8: sim.crash-at=after-ready:3 mid-bench was 'server unreachable ... connect
    failed' (exit 5) and status kept saying 'patch active on 8/8'."""
    # 6 s after ready: past the bench's start-up and warmup on a loaded 2-core box (at 3 s a
    # level sometimes had completed nothing yet)
    run = launch("flashinfer_gtc", f"server.port={free_port()}", "sim.crash-at=after-ready:6")
    res = cli("bench", run, "--mode", "concurrency", "--concurrency", "4",
              "--num-prompts", "1000", "--output-len", "64", "--json")  # fmt: skip
    assert res.returncode == 3, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert "ILLEGAL_MEMORY_ACCESS" in last and "an illegal memory access" in last
    assert "unreachable" not in last
    data = json.loads(res.stdout)
    assert data["complete"] is False and data["stopped"].startswith("server CRASHED")
    level = data["levels"][0]
    assert 0 < level["completed"] < 1000
    (row,) = bench_rows(run)
    assert row["result"]["complete"] is False
    st = status(run)
    assert st["state"] == "CRASHED" and st["category"] == "ILLEGAL_MEMORY_ACCESS"
    assert st["patch_active"] == "0/8"  # the ranks are gone: nothing is patched any more


def test_every_request_failing_is_an_error_and_never_complete(start_simulator):
    """Issue 10 #11: a bench with no request ok exited 0 and was stored complete."""
    sim = start_simulator("--context-length", "64", "--disable-cuda-graph", *FAST)
    res = cli("bench", "--url", sim.url, "--num-prompts", "3", "--input-len", "128",
              "--output-len", "16", "--warmup", "0", "--json")  # fmt: skip
    assert res.returncode == 5, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert "no request succeeded (3 of 3 failed" in last and "HTTP 400" in last
    data = json.loads(res.stdout)
    assert data["complete"] is False and data["stopped"] == "3 of 3 requests failed"
    assert data["levels"][0]["output_tok_s"] is None
    (row,) = bench_rows()
    assert row["result"]["complete"] is False


@pytest.mark.sshd
def test_server_killed_mid_bench_over_ssh_is_detected_and_diagnosed(launch, ssh_host):
    """Issue 10 #11: over ssh a server killed mid-bench gave exit 0, `complete: true`, 0 of 24
    ok and a made-up tok/s: the ssh forward accepts, then closes, every new connection."""
    run = launch("flashinfer", f"server.port={free_port()}", "sim.speed=5", host=ssh_host)
    cmd = [*GLMSERVE, "bench", run, "--mode", "concurrency", "--concurrency", "4",
           "--num-prompts", "2000", "--output-len", "48", "--json"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    try:
        with RunStore.open() as store:
            rec = store.get_run(run)
        deadline = time.monotonic() + 60
        while _served(rec.log_path) < 8:  # the bench is under way (the sshd host is this box)
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
            time.sleep(0.2)
        os.killpg(rec.pgid, signal.SIGKILL)  # the run's recorded process group
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - t0 < 15, "a dead server must be seen within a few polls"
    assert proc.returncode == 3, err
    last = err.strip().splitlines()[-1]
    assert f"run {run} EXITED during the measurement" in last
    data = json.loads(out)
    assert data["complete"] is False
    (row,) = bench_rows(run)
    assert row["result"]["complete"] is False


def _served(log_path: str) -> int:
    """Streams the server logged as answered (uvicorn access lines for /generate)."""
    with open(log_path, errors="replace") as f:
        return f.read().count('"POST /generate HTTP/1.1" 200')


def test_a_group_node_dying_mid_bench_ends_the_bench_naming_it(tmp_path):
    """Via node 0 the same monitor watches every node: node 1 dying mid-bench (node 0 would
    still answer HTTP, then hang in the collectives on real GPUs) ends the bench, exit 3."""
    from dataclasses import replace

    from glmserve.config import profiles
    from glmserve.deploy.deployment import Deployment
    from glmserve.deploy.plan import plan_spec

    cfg_dir = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg_dir.mkdir(parents=True, exist_ok=True)
    (cfg_dir / "hosts.yaml").write_text(
        f"hosts:\n  la:\n    workdir: {tmp_path / 'a'}\n  lb:\n    workdir: {tmp_path / 'b'}\n"
    )
    spec = profiles.load_profile("trtllm_mla", [f"server.port={free_port()}",
                                                "sim.gpu-arch=sm100", "sim.speed=5"])  # fmt: skip
    spec = replace(profiles.simulate(spec), nodes=["la", "lb"])
    store = RunStore.open()
    dep = Deployment.launch(plan_spec(spec), store=store)
    gid, runs = dep.id, dep.runs
    try:
        assert dep.watch(poll_s=0.2, timeout_s=60).state == "READY"  # followers marked READY
        cmd = [*GLMSERVE, "bench", gid, "--mode", "concurrency", "--concurrency", "4",
               "--num-prompts", "2000", "--output-len", "48", "--json"]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while _served(runs[0].log_path) < 8:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.2)
            os.killpg(int(runs[1].pgid or 0), signal.SIGKILL)  # node 1's recorded group
            t0 = time.monotonic()
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert time.monotonic() - t0 < 15
        assert proc.returncode == 3, err
        assert f"run {runs[1].run_id} EXITED during the measurement" in err
        data = json.loads(out)
        assert data["complete"] is False and data["stopped"].startswith("server EXITED")
        assert 0 < data["levels"][0]["completed"] < 2000
    finally:
        dep.stop(timeout=5, raise_failure=True)


def test_a_worker_dying_mid_bench_is_diagnosed_not_reported_complete(launch):
    """A scheduler that dies silently (SGLang does not notice, /health turns 503): its
    streams stall; the bench asks /health then and reports the crash (exit 3)."""
    # 6 s after ready: past the bench's start-up even on a loaded 2-core box (at 2 s the
    # worker sometimes died before the first level, a crash with no result to print)
    run = launch("flashinfer", f"server.port={free_port()}", "sim.worker-death-after=6")
    res = cli("bench", run, "--mode", "concurrency", "--concurrency", "2", "--num-prompts",
              "2000", "--output-len", "48", "--stall-timeout", "2", "--json")  # fmt: skip
    assert res.returncode == 3, res.stderr
    assert "a worker likely died" in res.stderr.strip().splitlines()[-1]
    data = json.loads(res.stdout)
    assert data["complete"] is False and data["levels"][0]["errors"] >= 1
    assert status(run)["state"] == "CRASHED"


def test_a_run_stopped_mid_bench_is_stopped_not_a_crash(launch):
    """`glmserve stop RUN` during `bench RUN` was reported as 'run EXITED during the
    measurement', exit 3 and stored as a server exit: it is STOPPED, exit 2, as `launch`
    says of a run stopped while it watched; the partial result is stored, incomplete."""
    run = launch("flashinfer", f"server.port={free_port()}")
    with RunStore.open() as store:
        log_path = store.get_run(run).log_path
    bench = subprocess.Popen(
        [*GLMSERVE, "bench", run, "--mode", "concurrency", "--concurrency", "2",
         "--num-prompts", "2000", "--output-len", "48", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while _served(log_path) < 3:  # measuring (past the warmup)
            assert time.monotonic() < deadline and bench.poll() is None, "bench never ran"
            time.sleep(0.1)
        assert cli("stop", run).returncode == 0
        out, err = bench.communicate(timeout=60)
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode == 2, err
    last = err.strip().splitlines()[-1]
    assert f"run {run} was stopped during the measurement" in last, err
    assert "crash" not in last.lower() and "EXITED" not in last
    data = json.loads(out)
    assert data["complete"] is False and data["stopped"].startswith("server STOPPED")
    (row,) = bench_rows(run)
    assert row["result"]["complete"] is False
    assert status(run)["state"] == "STOPPED"
