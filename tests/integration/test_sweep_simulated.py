"""``glmserve sweep --simulate`` end to end: the real console script, the simulator as the
launcher, a real SIGINT mid-sweep, ``--resume``, then ``glmserve report`` on what was stored."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.fixtures.cli import GLMSERVE
from tests.fixtures.simulator import free_port

# The seeds' order: flashinfer, + the patch, then trtllm_mla and cutlass_mla, whose decode
# kernels are SM100-only: on the simulator's default SM120 both die at warmup.
PROFILES = "flashinfer,flashinfer_gtc,trtllm_mla,cutlass_mla"
# 10x real time: fast, yet slow enough that a busy 2-core box's client does not cap the
# simulated decode speed (at 50x both flashinfer variants measured the same).


def glmserve(*args: str) -> list[str]:
    return [*GLMSERVE, *args]


def sweep_args(port: int, *extra: str) -> list[str]:
    return glmserve(
        "sweep", "--simulate", "--profiles", PROFILES, "--set", f"server.port={port}",
        "--set", "sim.speed=10", "--output-len", "24", "--num-prompts", "2",
        "--timeout", "60", "--repeat", "1", *extra,
    )  # fmt: skip


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is dead for our purpose
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


def sweeps(home: Path) -> list[Path]:
    root = home / "sweeps"
    return sorted(root.glob("*/sweep.json")) if root.is_dir() else []


def run_pids(run_ids: list[str]) -> dict[str, int]:
    from glmserve.store import RunStore

    with RunStore.open() as store:
        return {r: store.get_run(r).pid for r in run_ids}


@pytest.mark.slow
def test_simulated_sweep_table_json_markdown_and_report(tmp_path):
    port = free_port()
    proc = subprocess.run(
        sweep_args(port, "--bench", "decode", "--bench", "concurrency", "--concurrency", "1,4",
                   "--json"),
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    rows = {r["profile"]: r for r in data["rows"]}
    assert [r["profile"] for r in data["rows"]] == PROFILES.split(",")
    for name in ("trtllm_mla", "cutlass_mla"):
        assert rows[name]["status"] == "crashed"
        assert rows[name]["diagnosis"].startswith("UNSUPPORTED_ARCH")
        assert "SM100" in rows[name]["hint"]
    for name in ("flashinfer", "flashinfer_gtc"):
        assert rows[name]["status"] == "ok", rows[name]
        assert rows[name]["decode_tok_s"] > 0 and rows[name]["ttft_ms"] > 0
        assert set(rows[name]["aggregate_tok_s"]) == {"1", "4"}
    assert rows["flashinfer"]["speedup"] == pytest.approx(1.0)
    # casting only the batch's rows beats casting the whole FP8 pool (the seeds' 10.5 -> 13.5)
    assert rows["flashinfer_gtc"]["speedup"] > 1.15
    # every server the sweep started is gone
    pids = run_pids([r["run_id"] for r in data["rows"]])
    assert pids and not any(pid_alive(p) for p in pids.values() if p)
    sweep_id = data["sweep_id"]
    home = Path(os.environ["GLMSERVE_HOME"])
    md = (home / "sweeps" / sweep_id / "sweep.md").read_text()
    assert "| trtllm_mla | crashed | UNSUPPORTED_ARCH" in md
    assert "| cutlass_mla | crashed | UNSUPPORTED_ARCH" in md
    html = tmp_path / "r.html"
    rep = subprocess.run(glmserve("report", sweep_id, "--html", str(html)),
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    page = html.read_text()
    assert page.count('class="bar" data-group=') >= 2 + 2 * 3 * 3  # decode + 3 latency charts
    assert page.count('class="point"') == 4


@pytest.mark.slow
def test_flashinfer_gtc_beats_plain_flashinfer_because_of_the_whole_pool_cast():
    port = free_port()
    proc = subprocess.run(
        glmserve("sweep", "--simulate", "--profiles", "flashinfer,flashinfer_gtc",
                 "--set", f"server.port={port}", "--set", "sim.speed=10", "--output-len", "24",
                 "--num-prompts", "2", "--profile-steps", "2", "--repeat", "1", "--json"),
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    plain, gtc = data["rows"]
    assert gtc["speedup"] > 1.15, (plain, gtc)
    plain_trace, gtc_trace = (e["trace"] for e in data["entries"])
    kinds = [f["kind"] for f in plain_trace["findings"]]
    assert "fp8_kv_cast" in kinds  # the whole-pool cast, found in plain flashinfer's trace
    cast = next(f for f in plain_trace["findings"] if f["kind"] == "fp8_kv_cast")
    gtc_cast = [f for f in gtc_trace["findings"] if f["kind"] == "fp8_kv_cast"]
    assert "whole KV pool" in cast["message"]
    assert not gtc_cast or gtc_cast[0]["share"] < cast["share"] / 2
    assert not gtc_cast or "gather-then-cast is active" in gtc_cast[0]["message"]


@pytest.mark.slow
def test_ctrl_c_mid_sweep_stops_the_server_and_resume_continues():
    home = Path(os.environ["GLMSERVE_HOME"])
    port = free_port()
    proc = subprocess.Popen(sweep_args(port), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        target = None
        while time.monotonic() < deadline and target is None:
            for path in sweeps(home):
                try:
                    sw = json.loads(path.read_text())
                except (json.JSONDecodeError, OSError):
                    continue
                running = [e for e in sw["entries"] if e["status"] == "running" and e["run_id"]]
                if running:
                    pid = run_pids([running[0]["run_id"]])[running[0]["run_id"]]
                    if pid and pid_alive(pid):
                        target = (sw["sweep_id"], running[0], pid)
            time.sleep(0.02)
        assert target, "no running profile with a live server seen"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    sweep_id, entry, pid = target
    assert proc.returncode == 130, err[-2000:]
    assert not pid_alive(pid), "the running server survived Ctrl-C"
    assert f"--resume {sweep_id}" in err
    saved = json.loads((home / "sweeps" / sweep_id / "sweep.json").read_text())
    assert saved["status"] == "interrupted"
    statuses = {e["profile"]: e["status"] for e in saved["entries"]}
    assert statuses[entry["profile"]] == "interrupted"
    kept = {p for p, s in statuses.items() if s in ("ok", "crashed")}
    resumed = subprocess.run(glmserve("sweep", "--resume", sweep_id, "--json"),
                             capture_output=True, text=True, timeout=240)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = json.loads(resumed.stdout)
    assert final["status"] == "done"
    assert [r["status"] for r in final["rows"]] == ["ok", "ok", "crashed", "crashed"]
    for p in kept:
        assert f"{p}: " in resumed.stderr and "(kept from before)" in resumed.stderr


@pytest.mark.slow
@pytest.mark.sshd
def test_sweep_over_ssh_captures_traces_and_stops_every_server(ssh_host):
    """Remote host through a real sshd: launch, watch, bench, profile capture (traces copied
    back over the ssh transport), stop, for each profile."""
    from glmserve.remote.hosts import get_host
    from glmserve.remote.process import probe_group
    from glmserve.remote.transport import SshTransport
    from glmserve.store import RunStore

    port = free_port()
    proc = subprocess.run(
        glmserve("sweep", "--simulate", "--host", ssh_host, "--profiles", "trtllm_mla,flashinfer",
                 "--set", f"server.port={port}", "--set", "sim.speed=10", "--output-len", "24",
                 "--num-prompts", "2", "--profile-steps", "2", "--repeat", "1", "--json"),
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert [r["status"] for r in data["rows"]] == ["crashed", "ok"]
    trace = data["entries"][1]["trace"]
    assert len(trace["ranks"]) == 8 and trace["ranks"][0]["top_kernels"]
    t = SshTransport(get_host(ssh_host))
    with RunStore.open() as store:
        for row in data["rows"]:
            run = store.get_run(row["run_id"])
            assert run.host == ssh_host
            assert probe_group(t, run.pgid).live_pids == []


@pytest.mark.slow
def test_resume_after_kill_9_stops_the_server_the_sweep_recorded_and_only_that_one():
    """SIGKILL mid-bench leaves the server up (nothing could stop it). ``--resume`` stops the
    run its own entry recorded (by the store's verified process group), then runs the
    profile again on the same port; a server the sweep did not record is still refused."""
    home = Path(os.environ["GLMSERVE_HOME"])
    port = free_port()
    args = glmserve("sweep", "--simulate", "--profiles", "flashinfer", "--set",
                    f"server.port={port}", "--set", "sim.speed=10", "--output-len", "100",
                    "--num-prompts", "4", "--timeout", "60", "--repeat", "1")  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # A bench of ~4 s: long enough to be killed in, short enough for the resume to run it.
    try:
        deadline = time.monotonic() + 60
        target = None
        while time.monotonic() < deadline and target is None:
            for path in sweeps(home):
                try:
                    entry = json.loads(path.read_text())["entries"][0]
                except (json.JSONDecodeError, OSError, IndexError):
                    continue
                if entry["status"] == "running" and entry["run_id"]:
                    from glmserve.store import RunStore

                    with RunStore.open() as store:
                        run = store.get_run(entry["run_id"])
                    if run.state == "READY":  # the bench comes next
                        target = (path, entry["run_id"], run.pid)
            time.sleep(0.02)
        assert target, "no READY server seen"
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    path, run_id, pid = target
    assert pid_alive(pid), "the server should outlive a SIGKILLed sweep"
    sweep_id = path.parent.name
    recorded = path.read_text()

    # Not recorded by the sweep: the port is someone else's, so refused, and left alone.
    doc = json.loads(recorded)
    doc["entries"][0]["run_id"] = None
    path.write_text(json.dumps(doc))
    refused = subprocess.run(glmserve("sweep", "--resume", sweep_id), capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert f"glmserve run {run_id} is alive there" in refused.stderr
    assert pid_alive(pid)

    path.write_text(recorded)  # as the killed sweep left it: its entry names the run
    resumed = subprocess.run(glmserve("sweep", "--resume", sweep_id, "--json"),
                             capture_output=True, text=True, timeout=240)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"stopped run {run_id}, left running by the earlier attempt" in resumed.stderr
    assert not pid_alive(pid)
    final = json.loads(resumed.stdout)
    assert [r["status"] for r in final["rows"]] == ["ok"]
    assert final["entries"][0]["run_id"] != run_id
