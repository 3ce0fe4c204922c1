"""The lifecycle end to end through a real OpenSSH sshd on 127.0.0.1 and the real simulator.

Every launch goes ``glmserve`` console script -> ssh (ControlMaster) -> ``nohup setsid bash
launch.sh`` -> ``python -m glmserve.simulator``; verdicts come from the watcher reading the
remote log by byte offset. The simulator runs 20x faster than real time to keep this quick.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from tests.fixtures.cli import GLMSERVE
from tests.fixtures.cli import run_glmserve as cli

from glmserve.remote.hosts import get_host
from glmserve.remote.process import probe_group
from glmserve.remote.stop import stop_run
from glmserve.remote.transport import SshTransport, free_local_port
from glmserve.store import RunStore

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

FAST = ["--set", "sim.speed=20"]


def launch(host: str, port: int, *extra: str, timeout: float = 90):  # type: ignore[no-untyped-def]
    return cli(
        "launch",
        "--profile",
        "trtllm_mla",
        "--host",
        host,
        "--simulate",
        "--set",
        f"server.port={port}",
        "--set",
        "sim.gpu-arch=sm100",  # trtllm_mla starts cleanly on sm100 in the simulator
        *FAST,
        "--poll",
        "0.3",
        *extra,
        timeout=timeout,
    )


def _dead(pid: int) -> bool:
    """No such process, or only its zombie (dead, waiting for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_simulator_launch_reaches_ready_and_stop_leaves_nothing(ssh_host, stop_left_remote_runs):
    port = free_local_port()
    res = launch(ssh_host, port, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout[res.stdout.index("{") :])
    run = data["run"]
    assert data["verdict"]["state"] == "READY"
    assert run["pid"] and run["pgid"] == run["pid"] and run["proc_start"]
    # The server answers on the remote port (through an ssh -L forward).
    from glmserve.remote.endpoint import health_ok, open_endpoint

    with open_endpoint(run["run_id"]) as url:
        assert health_ok(url)
    st = cli("status", "--json")
    rows = json.loads(st.stdout)
    assert [r["state"] for r in rows] == ["READY"]
    # logs -n 3 is the remote file's last three lines.
    remote_log = Path(run["run_dir"]) / "server.log"  # same machine behind the sshd
    lg = cli("logs", run["run_id"][:5], "-n", "3")
    assert lg.stdout.splitlines() == remote_log.read_text().splitlines()[-3:]
    stop = cli("stop", run["run_id"], "--json")
    assert stop.returncode == 0, stop.stderr
    rep = json.loads(stop.stdout)[0]
    assert run["pid"] in rep["signalled"] and rep["left"] == []
    t = SshTransport(get_host(ssh_host))
    assert probe_group(t, run["pgid"]).live_pids == []
    assert _dead(run["pid"])
    assert RunStore.open().get_run(run["run_id"]).state == "STOPPED"
    listed = json.loads(cli("runs", "--json").stdout)
    assert [(r["run_id"], r["state"]) for r in listed] == [(run["run_id"], "STOPPED")]


CRASH_KINDS = {
    "oom": "OOM",
    "flashinfer_fp8_static_assert": "UNSUPPORTED_KV_DTYPE",
    "no_kernel_image": "UNSUPPORTED_ARCH",
    "tllm_unsupported_arch": "UNSUPPORTED_ARCH",
    "nccl_timeout": "NCCL",
    "illegal_memory_access": "ILLEGAL_MEMORY_ACCESS",
    "bad_args": "BAD_ARGS",
    "port_in_use": "PORT_IN_USE",
}


# The profile disables CUDA graphs, so a graph-capture fault is moved to warmup.
CRASH_AT = {"no_kernel_image": ["--set", "sim.crash-at=warmup"]}


@pytest.mark.parametrize("kind", sorted(CRASH_KINDS))
def test_each_crash_kind_gives_its_category_and_exit_3(ssh_host, stop_left_remote_runs, kind):
    port = free_local_port()
    extra = CRASH_AT.get(kind, [])
    res = launch(ssh_host, port, "--set", f"sim.crash-kind={kind}", *extra, "--json")
    assert res.returncode == 3, res.stdout + res.stderr
    verdict = json.loads(res.stdout[res.stdout.index("{") :])["verdict"]
    assert verdict["state"] == "CRASHED"
    assert verdict["category"] == CRASH_KINDS[kind]
    assert verdict["hint"] and verdict["root_cause"]
    assert f"CRASHED {CRASH_KINDS[kind]}" in res.stderr


def test_port_taken_by_another_process_is_refused(ssh_host, stop_left_remote_runs):
    """A port taken by someone else is refused before launching (exit 2, names the port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = launch(ssh_host, port)
    assert res.returncode == 2, res.stderr
    assert f"port {port}" in res.stderr and "already in use" in res.stderr
    assert "Traceback" not in res.stderr


def test_hang_is_stalled_exit_4_and_server_keeps_running(ssh_host, stop_left_remote_runs):
    port = free_local_port()
    res = launch(ssh_host, port, "--set", "sim.hang-at=kv", "--stall-timeout", "1.5")
    assert res.returncode == 4, res.stderr
    assert "stalled" in res.stderr and "glmserve stop" in res.stderr
    run = RunStore.open().list_runs()[0]
    assert run.state == "STALLED"
    t = SshTransport(get_host(ssh_host))
    assert probe_group(t, run.pgid or 0).live_pids  # still there for the user to inspect
    stop_all = cli("stop", "--all", "--timeout", "5")
    assert stop_all.returncode == 0, stop_all.stderr
    assert probe_group(t, run.pgid or 0).live_pids == []
    assert RunStore.open().get_run(run.run_id).ended_at is not None


def test_timeout_is_exit_4(ssh_host, stop_left_remote_runs):
    port = free_local_port()
    res = launch(ssh_host, port, "--set", "sim.hang-at=load", "--timeout", "1")
    assert res.returncode == 4, res.stderr
    assert "timed out" in res.stderr


def test_worker_death_after_ready_is_detected(ssh_host, stop_left_remote_runs):
    port = free_local_port()
    res = launch(ssh_host, port, "--set", "sim.worker-death-after=0.5")
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.split()[0]
    deadline = time.monotonic() + 20
    while True:
        rows = json.loads(cli("status", run_id, "--json").stdout)
        if rows[0]["state"] == "CRASHED" or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert rows[0]["state"] == "CRASHED"
    assert "after READY" in rows[0]["root_cause"]


def test_replace_stops_the_live_run_first(ssh_host, stop_left_remote_runs):
    port = free_local_port()
    first = launch(ssh_host, port, "--no-wait")
    assert first.returncode == 0, first.stderr
    old = RunStore.open().get_run(first.stdout.split()[0])
    refused = launch(ssh_host, port, "--no-wait")
    assert refused.returncode == 2
    assert old.run_id in refused.stderr and "--replace" in refused.stderr
    second = launch(ssh_host, port, "--replace")
    assert second.returncode == 0, second.stderr
    t = SshTransport(get_host(ssh_host))
    assert probe_group(t, old.pgid or 0).live_pids == []
    assert RunStore.open().get_run(old.run_id).state == "STOPPED"


def test_unreachable_host_exit_5_with_ssh_error_line(sshd_server, tmp_path):
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    closed = free_local_port()
    (cfg / "hosts.yaml").write_text(sshd_server.hosts_yaml("deadbox", port=closed))
    res = launch("deadbox", free_local_port())
    assert res.returncode == 5, res.stderr
    assert "Connection refused" in res.stderr and "Traceback" not in res.stderr
    chk = cli("check", "--profile", "trtllm_mla", "--host", "deadbox", "--simulate")
    assert chk.returncode == 5


def test_unknown_host_exit_2_lists_known(ssh_host):
    res = launch("nosuchbox", 18000)
    assert res.returncode == 2
    assert "unknown host 'nosuchbox'" in res.stderr and "testbox" in res.stderr


def test_check_table_no_gpu_row(ssh_host):
    """Without nvidia-smi: a clear no-GPU row; blocking for a real launch, not when simulating."""
    port = ["--set", f"server.port={free_local_port()}"]
    sim = cli("check", "--profile", "trtllm_mla", "--host", ssh_host, "--simulate", *port, "--json")
    rows = {r["check"]: r for r in json.loads(sim.stdout)["rows"]}
    assert rows["reachable"]["status"] == "ok"
    assert rows["python"]["status"] == "ok"
    if "no GPU" in rows["gpus"]["detail"]:
        assert rows["gpus"]["status"] == "warn"
        real = cli("check", "--profile", "trtllm_mla", "--host", ssh_host, *port)
        assert real.returncode == 2
        assert "no GPU" in real.stdout
    assert sim.returncode == 0, sim.stdout + sim.stderr


def test_controlmaster_killed_mid_watch_resumes_at_same_offset(ssh_host, stop_left_remote_runs):
    """Kill the ssh master while the watcher polls: it reconnects and no line is lost/doubled."""
    from glmserve.config import profiles
    from glmserve.deploy.watch import Watcher
    from glmserve.remote.launch import launch_run
    from glmserve.remote.runlog import read_run_log

    port = free_local_port()
    spec = profiles.load_profile(
        "trtllm_mla",
        [f"server.port={port}", "sim.gpu-arch=sm100", "sim.speed=1", "sim.load-seconds=3"],
    )
    spec = profiles.simulate(spec)
    store = RunStore.open()
    run = launch_run(spec, ssh_host, store=store)
    t = SshTransport(get_host(ssh_host))
    killed: dict[str, int] = {}

    def on_tick(tick) -> None:  # type: ignore[no-untyped-def]
        if "offset" not in killed and tick.offset > 0:
            pid = t.master_pid()
            assert pid is not None
            killed["offset"] = tick.offset
            os.kill(pid, signal.SIGKILL)
            # kill() returns before the master is gone; wait so the next poll sees it dead
            # (otherwise ssh may fall back to a direct connection for that one poll).
            deadline = time.monotonic() + 10
            while not _dead(pid) and time.monotonic() < deadline:
                time.sleep(0.01)

    w = Watcher(run, t, store, poll_s=0.3, timeout_s=60, on_tick=on_tick)
    result = w.watch()
    assert result.state == "READY"
    assert killed, "the master was never killed"
    assert result.reconnects >= 1, (killed, t.reconnects)
    assert w.offsets_after_reconnect[0] == killed["offset"], (w.offsets_after_reconnect, killed)
    text = read_run_log(run.run_id)
    # Every complete line was fed exactly once, in order.
    assert w.diag.lines_seen == text[: result.offset].count("\n")
    assert t.master_alive()


def test_ctrl_c_while_waiting_keeps_server_and_says_how(ssh_host, stop_left_remote_runs):
    port = free_local_port()
    proc = subprocess.Popen(
        [
            *GLMSERVE,
            "launch",
            *("--profile", "trtllm_mla", "--host", ssh_host, "--simulate"),
            *("--set", f"server.port={port}", "--set", "sim.hang-at=kv", "--poll", "0.3"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    run_id = proc.stdout.readline().strip()  # printed as soon as the run is recorded
    deadline = time.monotonic() + 30
    store = RunStore.open()
    while store.get_run(run_id).state in ("STARTING",) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _out, errtext = proc.communicate(timeout=30)
    assert proc.returncode == 130, errtext
    assert f"glmserve logs {run_id} -f" in errtext and f"glmserve stop {run_id}" in errtext
    run = store.get_run(run_id)
    t = SshTransport(get_host(ssh_host))
    assert probe_group(t, run.pgid or 0).live_pids  # the server kept running


def test_stop_refuses_a_reused_pid(ssh_host, stop_left_remote_runs):
    """A recorded start time that no longer matches means the PID is someone else's."""
    port = free_local_port()
    res = launch(ssh_host, port, "--no-wait")
    run_id = res.stdout.split()[0]
    store = RunStore.open()
    run = store.get_run(run_id)
    real_start = run.proc_start
    store.update_run(run_id, proc_start=str(int(real_start or 0) + 12345))
    rep = stop_run(run_id, store=store)
    assert rep["signalled"] == [] and "reused" in rep["note"]
    t = SshTransport(get_host(ssh_host))
    assert probe_group(t, run.pgid or 0).live_pids  # untouched
    store.update_run(run_id, proc_start=real_start, state="STARTING", ended_at=None)


def test_concurrent_status_while_watching(ssh_host, stop_left_remote_runs):
    """Two glmserve processes writing the store at once (watch + status) both succeed."""
    port = free_local_port()
    results: dict[str, subprocess.CompletedProcess[str]] = {}
    th = threading.Thread(target=lambda: results.update(l=launch(ssh_host, port)))
    th.start()
    deadline = time.monotonic() + 20
    while not RunStore.open().list_runs() and time.monotonic() < deadline:
        time.sleep(0.05)
    st = cli("status", "--json")
    th.join(60)
    assert st.returncode == 0, st.stderr
    assert results["l"].returncode == 0, results["l"].stderr


def test_patched_profile_uploads_runtime_and_status_shows_patch_ranks(
    ssh_host, stop_left_remote_runs
):
    """flashinfer_gtc lists a runtime patch: runtime/ is uploaded, each rank logs activation."""
    port = free_local_port()
    res = cli(
        "launch",
        "--profile",
        "flashinfer_gtc",
        "--host",
        ssh_host,
        "--simulate",
        "--set",
        f"server.port={port}",
        *FAST,
        "--poll",
        "0.3",
    )
    assert res.returncode == 0, res.stderr
    run = RunStore.open().get_run(res.stdout.split()[0])
    assert (Path(run.run_dir) / "runtime" / "sitecustomize.py").is_file()
    log = (Path(run.run_dir) / "server.log").read_text()
    # The shipped sitecustomize.py ran inside the launched process (PYTHONPATH from launch.sh)...
    assert "glmserve runtime: patches armed: flashinfer_mla_gather_cast" in log
    # ...and every TP rank logged the activation line, as patched SGLang workers do.
    assert log.count("glmserve patch flashinfer_mla_gather_cast active (sglang ") == 8
    assert "patch active on 8/8 ranks" in res.stderr
    rows = json.loads(cli("status", run.run_id, "--json").stdout)
    assert rows[0]["patch_active"] == "8/8"
    table = cli("status").stdout
    assert "patch active on 8/8 ranks" in table


def test_check_validates_flags_against_the_hosts_live_argparse(ssh_host):
    """With SGLang on the host, its argparse spec is dumped (cached) and a bad value fails."""
    port = ["--set", f"server.port={free_local_port()}", "--set", "venv=null"]
    good = cli("check", "--profile", "trtllm_mla", "--host", ssh_host, *port, "--json")
    rows = {r["check"]: r for r in json.loads(good.stdout)["rows"]}
    if rows["sglang"]["status"] != "ok":
        pytest.skip("sglang is not installed for the host's python")
    assert rows["flags"]["status"] in ("ok", "warn"), rows["flags"]
    assert list((Path(os.environ["GLMSERVE_HOME"]) / "argspecs").glob("sglang-*.json"))
    bad = cli(
        "check",
        "--profile",
        "trtllm_mla",
        "--host",
        ssh_host,
        *port,
        "--set",
        "server.attention-backend=no_such_backend",
        "--json",
    )
    rows = {r["check"]: r for r in json.loads(bad.stdout)["rows"]}
    assert rows["flags"]["status"] == "fail" and "no_such_backend" in rows["flags"]["detail"]
    assert bad.returncode == 2


def test_auth_failure_exit_5_with_ssh_error_line(sshd_server, tmp_path):
    """A key the server does not accept: BatchMode means no prompt, just ssh's own line."""
    key = tmp_path / "other_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
        check=True,
        capture_output=True,
    )
    conf = tmp_path / "ssh_config"
    conf.write_text(
        sshd_server.ssh_config.read_text().replace(str(sshd_server.client_key), str(key))
    )
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    text = sshd_server.hosts_yaml("lockedbox").replace(str(sshd_server.ssh_config), str(conf))
    (cfg / "hosts.yaml").write_text(text)
    res = cli("check", "--profile", "trtllm_mla", "--host", "lockedbox", "--simulate")
    assert res.returncode == 5, res.stderr
    assert "Permission denied (publickey)" in res.stderr


def test_unknown_host_key_is_refused_not_accepted(sshd_server, tmp_path):
    """known_hosts is respected: a host key that does not match fails (exit 5), no TOFU."""
    other = tmp_path / "fake_host_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
        check=True,
        capture_output=True,
    )
    typ, pub = other.with_suffix(".pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd_server.port} {typ} {pub}\n")
    conf = tmp_path / "ssh_config"
    conf.write_text(
        sshd_server.ssh_config.read_text().replace(str(sshd_server.known_hosts), str(known))
    )
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    text = sshd_server.hosts_yaml("spoofbox").replace(str(sshd_server.ssh_config), str(conf))
    (cfg / "hosts.yaml").write_text(text)
    res = cli("check", "--profile", "trtllm_mla", "--host", "spoofbox", "--simulate")
    assert res.returncode == 5, res.stderr
    assert "Host key verification failed" in res.stderr
    assert known.read_text().count("\n") == 1  # nothing was added


def test_logs_follow_streams_until_the_server_ends(ssh_host, stop_left_remote_runs):
    port = free_local_port()
    res = launch(ssh_host, port, "--set", "sim.hang-at=kv", "--no-wait")
    run_id = res.stdout.split()[0]
    proc = subprocess.Popen(
        [*GLMSERVE, "logs", run_id, "-f"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + 30
    while "Load weight begin" not in seen and time.monotonic() < deadline:
        seen += proc.stdout.readline()
    assert "Load weight begin" in seen
    assert proc.poll() is None  # still following
    stop_run(run_id, timeout=5)
    _out, errtext = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "no longer running" in errtext
