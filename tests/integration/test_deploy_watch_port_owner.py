"""Issue 10 #4 and #12 (readiness half): READY is only ever the launched process's.

Any server on the port answers ``/health``; SGLang 0.5.9 that loses the port to another
SGLang even logs "fired up and ready to roll" (its warmup thread warms up the other server,
see simulator ``SimServer._bind_failed``) and exits 1. The watcher must not call either READY.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from tests.fixtures.cli import run_glmserve
from tests.fixtures.simulator import FAST, free_port


def test_launch_losing_the_port_to_another_sglang_is_crashed_port_in_use(
    start_simulator, stop_left_runs
):
    """The other server binds first (it loads faster); ours loads, fails to bind, warms the
    other one up, logs the ready line and exits 1. Old behaviour: READY (the other server
    answered our /health while ours was still loading)."""
    port = free_port()
    holder = start_simulator("--port", str(port), "--sim-load-seconds", "6",
                             "--disable-cuda-graph", wait_ready=False)  # fmt: skip
    res = run_glmserve(
        "launch", "--profile", "flashinfer", "--simulate", "--json",
        "--set", f"server.port={port}", "--set", "sim.load-seconds=16",
        timeout=120,
    )  # fmt: skip
    assert res.returncode == 3, res.stderr
    doc = json.loads(res.stdout[res.stdout.index("{") :])
    assert doc["verdict"]["state"] == "CRASHED"
    assert doc["verdict"]["category"] == "PORT_IN_USE"
    assert holder.proc.poll() is None  # the holder was never touched
    log_path = Path(doc["run"]["run_dir"]) / "server.log"
    deadline = time.monotonic() + 30
    while "Application shutdown complete." not in log_path.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    log = log_path.read_text()
    assert log.index("[Errno 98]") < log.index("The server is fired up and ready to roll!")
    diag = run_glmserve("diagnose", str(log_path), "--json")
    assert diag.returncode == 3, diag.stdout + diag.stderr
    assert json.loads(diag.stdout)["category"] == "PORT_IN_USE"
    # a crashed launch is settled (ended): asked by id, status still shows it, never READY
    (row,) = json.loads(run_glmserve("status", doc["run"]["run_id"], "--json").stdout)
    assert row["state"] != "READY"


def test_another_server_answering_health_does_not_make_our_run_ready(
    start_simulator, stop_left_runs
):
    """Ours hangs while loading; a server started later on the same port answers /health
    with 200. Old behaviour: READY within one poll."""
    from glmserve.deploy.assess import assess_run
    from glmserve.deploy.watch import Watcher
    from glmserve.remote.run_host import transport_for_run
    from glmserve.store import RunStore

    port = free_port()
    res = run_glmserve(
        "launch", "--profile", "flashinfer", "--simulate", "--no-wait", "--json",
        "--set", f"server.port={port}", "--set", "sim.hang-at=load",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    run_id = json.loads(res.stdout[res.stdout.index("{") :])["run"]["run_id"]
    start_simulator("--port", str(port), "--disable-cuda-graph", *FAST)  # answers 200 now
    notes: list[str] = []
    with RunStore.open() as store:
        run = store.get_run(run_id)
        w = Watcher(run, transport_for_run(run), store, poll_s=0.2, stall_timeout_s=3,
                    on_tick=lambda t: notes.append(t.note))  # fmt: skip
        result = w.watch()
        assert result.state == "STALLED", result.diagnosis.hint
        assert result.diagnosis.phase.value == "LOADING_WEIGHTS"
        assert any(f"port {port} is held by a process outside this run" in n for n in notes)
        # status asks the same question: the other server's 200 is not our run's health
        info = assess_run(store.get_run(run_id), store)
        assert (info["state"], info["healthy"]) == ("STALLED", None)


def test_ready_line_of_a_process_that_is_gone_is_not_ready(tmp_path):
    """The log says ready but the process group has already ended: EXITED, never READY."""
    from glmserve.deploy.watch import Watcher
    from glmserve.remote.host_config import HostConfig
    from glmserve.remote.transport import LocalTransport
    from glmserve.store import RunRecord, RunStore

    log = tmp_path / "server.log"
    line = "[2026-12-01 08:00:00] The server is fired up and ready to roll!"
    proc = subprocess.Popen(
        ["sh", "-c", f"printf '%s\\n' '{line}' >> {log}"], start_new_session=True
    )
    assert proc.wait(timeout=10) == 0
    with open("/proc/sys/kernel/random/boot_id") as fh:
        boot = fh.read().strip()
    with RunStore.open() as store:
        run = store.add_run(
            RunRecord(run_id="gone1", host="local", profile="p", port=free_port(),
                      run_dir=str(tmp_path), pid=proc.pid, pgid=proc.pid, proc_start="1",
                      boot_id=boot)
        )  # fmt: skip
        result = Watcher(run, LocalTransport(HostConfig()), store, poll_s=0.05).watch()
        assert result.state == "EXITED"
        assert store.get_run("gone1").state == "EXITED"
