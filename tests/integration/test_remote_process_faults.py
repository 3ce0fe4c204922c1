"""Process-control faults (issue 11 #3-#6, #8; issue 10 #12): each test injects the fault for
real (a slow ``setsid`` on PATH, a damaged or full store, an unreachable host, a log written
while it is read over ssh) and checks that glmserve neither loses a server nor hits a stranger.

Servers are the real simulator launched by ``glmserve launch --simulate`` on the ``local``
host (no ssh needed) unless the fault is about ssh; every test proves at the end that no
process it caused is left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.fixtures.cli import GLMSERVE
from tests.fixtures.cli import run_glmserve as cli

from glmserve.remote.transport import free_local_port
from glmserve.store import RunRecord, RunStore

pytestmark = [pytest.mark.slow]

SIM = ["--simulate", "--set", "sim.gpu-arch=sm100", "--set", "sim.speed=20"]


def _launch_args(port: int, *extra: str) -> list[str]:
    return ["launch", "--profile", "trtllm_mla", "--set", f"server.port={port}", *SIM, *extra]


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after ``(comm)``: [state, ppid, pgrp, ...]; None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def _start_time(pid: int) -> int:
    st = _stat(pid)
    assert st is not None
    return int(st[19])


def _boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _under(root: Path) -> list[int]:
    """Live processes whose working directory is under ``root`` (what a launch started
    there: launch.sh runs in its run dir)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cwd = os.readlink(d / "cwd")
        except OSError:
            continue
        if cwd.startswith(str(root)) and _alive(int(d.name)):
            found.append(int(d.name))
    return found


def _kill_exact(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def home() -> Iterator[Path]:
    """This test's GLMSERVE_HOME; afterwards every process started under it is killed (by
    exact PID, found by its working directory) and the test fails if one was left."""
    root = Path(os.environ["GLMSERVE_HOME"])
    yield root
    left = _under(root)
    _kill_exact(left)
    assert not left, f"processes left running under {root}: {left}"


def _spawn_own_group(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(list(argv), start_new_session=True)


def _record(store: RunStore, run_id: str, proc: subprocess.Popen | None, **kw) -> RunRecord:
    """A run record for a real process we started (pid = its own group) or for ``kw``."""
    fields: dict = {"host": "local", "profile": "p", "port": free_local_port(), "run_dir": "/x"}
    if proc is not None:
        fields.update(
            pid=proc.pid,
            pgid=proc.pid,
            proc_start=str(_start_time(proc.pid)),
            boot_id=_boot_id(),
        )
    fields.update(kw)
    return store.add_run(RunRecord(run_id=run_id, **fields))


# -- #3: slow setsid -----------------------------------------------------------------------------
@pytest.fixture
def slow_setsid(tmp_path: Path) -> dict[str, str]:
    """PATH with a ``setsid`` that waits 3 s first (a loaded host), then runs the real one."""
    real = shutil.which("setsid")
    assert real
    wrap = tmp_path / "slowbin"
    wrap.mkdir()
    (wrap / "setsid").write_text(f'#!/bin/bash\nsleep 3\nexec {real} "$@"\n')
    (wrap / "setsid").chmod(0o755)
    return {**os.environ, "PATH": f"{wrap}:{os.environ['PATH']}", "COLUMNS": "200"}


def _cli_env(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*GLMSERVE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        start_new_session=True,  # its group is not the test's: a wrong pgid hits nothing here
    )


def test_slow_setsid_records_the_servers_own_process(home, slow_setsid):
    """#3: with setsid delayed past the old 2 s wait, the record is still the server's own
    pid/pgid/start (from the handshake), status sees it alive, and stop stops it."""
    port = free_local_port()
    res = _cli_env(slow_setsid, *_launch_args(port, "--no-wait"))
    assert res.returncode == 0, res.stderr
    run = RunStore.open().get_run(res.stdout.split()[0])
    assert run.pid and run.pgid == run.pid
    st = _stat(run.pid)
    assert st is not None and int(st[2]) == run.pid  # it leads its own group...
    assert int(run.proc_start or 0) == _start_time(run.pid)  # ...and is that exact process
    rows = json.loads(_cli_env(slow_setsid, "status", run.run_id, "--json").stdout)
    assert rows[0]["state"] != "EXITED" and run.pid in rows[0]["alive_pids"]
    stop = _cli_env(slow_setsid, "stop", run.run_id, "--json")
    assert stop.returncode == 0, stop.stderr
    assert not _alive(run.pid)


def test_stop_never_signals_a_group_the_recorded_process_does_not_lead(home):
    """#3: a record whose pgid is not its process's group (what a late setsid used to record)
    and a stranger that later leads a group with that id: stop signals only the recorded
    process, never the stranger's group."""
    ours = _spawn_own_group("sleep", "300")
    time.sleep(0.05)  # the stranger starts later than ours (start times tick every 10 ms)
    stranger = _spawn_own_group("sleep", "300")
    try:
        store = RunStore.open()
        _record(store, "ab12cd34", ours, pgid=stranger.pid)
        res = cli("stop", "ab12cd34", "--json", "--timeout", "5")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)[0]["signalled"] == [ours.pid]
        assert ours.wait(10) == -signal.SIGTERM
        assert _alive(stranger.pid), "the stranger's group was signalled"
    finally:
        _kill_exact([ours.pid, stranger.pid])
        ours.wait(5)
        stranger.wait(5)


def test_probe_reports_the_recorded_pid_outside_its_group():
    """The probe finds the recorded PID wherever its group is (the old one looked only in
    the recorded group), so a wrong group is noticed instead of trusted."""
    from glmserve.remote.process import parse_probe, probe_script

    me = os.getpid()
    out = subprocess.run(
        ["bash", "-c", probe_script(999_999_999, me)], capture_output=True, text=True
    ).stdout
    probe = parse_probe(out)
    assert me in probe.outside and probe.members == []


# -- #12 / vanish: two launches, one port ----------------------------------------------------------
def test_two_launches_on_one_port_at_once_only_one_starts(home):
    """#12: two launches on one port at the same moment: the store claim lets exactly one
    start; the other is refused (exit 2) before starting anything."""
    port = free_local_port()
    procs = [
        subprocess.Popen(
            [*GLMSERVE, *_launch_args(port, "--no-wait")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for _ in range(2)
    ]
    results = [(p.wait(120), *p.communicate()) for p in procs]
    codes = sorted(rc for rc, _o, _e in results)
    assert codes == [0, 2], results
    refused = next(e for rc, _o, e in results if rc == 2)
    assert f":{port}" in refused or f"port {port}" in refused, refused
    assert "Traceback" not in refused
    runs = RunStore.open().list_runs()
    started = [r for r in runs if r.pid is not None]
    assert len(started) == 1 and len(_under(home)) >= 1
    stop = cli("stop", "--all")
    assert stop.returncode == 0, stop.stderr
    assert not _alive(started[0].pid)


def test_status_during_a_launch_does_not_drop_the_run(home, slow_setsid):
    """#12 (B vanished): ``status`` while another glmserve is between recording a run and
    starting it must not mark that run ended; afterwards it is listed live and ``stop --all``
    stops it."""
    port = free_local_port()
    launch = subprocess.Popen(
        [*GLMSERVE, *_launch_args(port, "--no-wait")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=slow_setsid,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not RunStore.open().list_runs() and time.monotonic() < deadline:
        time.sleep(0.05)
    during = _cli_env(slow_setsid, "status", "--json")
    assert launch.wait(120) == 0, launch.communicate()
    assert during.returncode == 0, during.stderr
    run = RunStore.open().list_runs()[0]
    rows = json.loads(cli("status", "--json").stdout)
    assert [r["run_id"] for r in rows] == [run.run_id], rows
    assert cli("stop", "--all").returncode == 0
    assert run.pid and not _alive(run.pid)


# -- #4: stop --all past an unreachable host -----------------------------------------------------
def test_stop_all_tries_every_run_and_reports_each(home, sshd_server):
    """#4: the newest run's host is unreachable: the older, local run is still stopped, the
    table lists both outcomes, and the exit code is the failure's (5)."""
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "hosts.yaml").write_text(sshd_server.hosts_yaml("deadbox", port=free_local_port()))
    local = _spawn_own_group("sleep", "300")
    try:
        store = RunStore.open()
        _record(store, "10ca1000", local, created_at=time.time() - 60)
        _record(store, "dead0000", None, host="deadbox", pid=4242, pgid=4242, proc_start="1")
        res = cli("stop", "--all", "--timeout", "5")
        assert res.returncode == 5, res.stdout + res.stderr
        assert local.wait(10) == -signal.SIGTERM  # tried although the first run failed
        table = res.stderr
        assert "10ca1000" in table and "stopped" in table
        assert "dead0000" in table and "FAILED" in table and "Connection refused" in table
        assert "1 of 2 run(s) not stopped: dead0000 (deadbox)" in table
        js = json.loads(cli("stop", "--all", "--json").stdout)
        assert [(r["run_id"], r["ok"]) for r in js] == [("dead0000", False)]
    finally:
        _kill_exact([local.pid])
        local.wait(5)


# -- #5: damaged store -------------------------------------------------------------------------
def _damage_events_table(path: Path) -> None:
    """Overwrite the events table's root page with garbage: a malformed runs.sqlite that
    still opens and reads (as the one in the report did)."""
    db = sqlite3.connect(path)
    page = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'events'").fetchone()[0]
    db.close()
    with path.open("r+b") as f:
        f.seek((root - 1) * page)
        f.write(b"\xa5" * page)


def test_malformed_store_starts_nothing(home):
    """#5: a malformed runs.sqlite: launch refuses before starting anything (exit 2, names
    the file), instead of starting a server it then cannot record."""
    store = RunStore.open()
    store.add_event(_record(store, "0ld00000", None).run_id, "EXITED")
    store.close()
    _damage_events_table(home / "runs.sqlite")
    res = cli(*_launch_args(free_local_port(), "--no-wait"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "runs.sqlite" in res.stderr and "Traceback" not in res.stderr
    assert _under(home) == []  # nothing was started


def test_store_write_failing_after_start_stops_the_server(home):
    """#5: the store takes the run's row but not the write after the start (a fault in the
    file injected as a trigger): the launch stops what it started and says so, naming the
    run and pid; no server is left that no record points at."""
    store = RunStore.open()
    store.db.execute(
        "CREATE TRIGGER fail_pid BEFORE UPDATE OF pid ON runs "
        "BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
    )
    store.close()
    res = cli(*_launch_args(free_local_port(), "--no-wait"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "could not be recorded" in res.stderr and "stopped again" in res.stderr
    assert "pid " in res.stderr and "Traceback" not in res.stderr
    deadline = time.monotonic() + 10
    while _under(home) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _under(home) == []


# -- #6: full disk -------------------------------------------------------------------------------
def _in_full_tmpfs(script: str, home: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``script`` (bash) in a private mount namespace where ``home`` is a 1 MiB tmpfs;
    ``fill`` in the script fills it up (ENOSPC from then on). The mount dies with it."""
    home.mkdir(parents=True, exist_ok=True)
    prog = (
        f"mount -t tmpfs -o size=1m tmpfs {home} || exit 77; "
        f"fill() {{ dd if=/dev/zero of={home}/filler bs=4k 2>/dev/null; true; }}; " + script
    )
    env = {**os.environ, "GLMSERVE_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run(
        ["unshare", "-m", "bash", "-c", prog],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _glmserve_sh(*args: str) -> str:
    return " ".join(map(shlex.quote, [*GLMSERVE, *args]))


@pytest.fixture
def tmpfs_home(tmp_path: Path) -> Path:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    probe = subprocess.run(
        ["unshare", "-m", "bash", "-c", f"mount -t tmpfs -o size=64k tmpfs {tmp_path}"],
        capture_output=True,
    )
    if probe.returncode != 0:
        pytest.skip("cannot mount a tmpfs in a private mount namespace here")
    return tmp_path / "fullhome"


def test_stop_works_while_the_disk_is_full(tmpfs_home):
    """#6: with the store's disk full, ``stop`` still stops the run (exit 0) and says the stop
    could not be recorded."""
    target = _spawn_own_group("sleep", "300")
    try:
        rec = {
            "pid": target.pid,
            "start": _start_time(target.pid),
            "boot": _boot_id(),
        }
        make = (
            "from glmserve.store import RunStore, RunRecord; s = RunStore.open(); "
            "s.add_run(RunRecord(run_id='fu11d15c', host='local', profile='p', port=1, "
            f"run_dir='/x', pid={rec['pid']}, pgid={rec['pid']}, proc_start='{rec['start']}', "
            f"boot_id='{rec['boot']}')); s.close()"
        )
        script = (
            f"{shlex.quote(sys.executable)} -c {shlex.quote(make)} || exit 9; fill; "
            f"{_glmserve_sh('stop', 'fu11d15c', '--timeout', '5')}"
        )
        res = _in_full_tmpfs(script, tmpfs_home)
        assert res.returncode == 0, res.stdout + res.stderr
        assert target.wait(10) == -signal.SIGTERM
        assert "stopped but not recorded" in res.stderr
    finally:
        _kill_exact([target.pid])
        target.wait(5)


def test_bench_result_survives_a_full_store_disk(tmpfs_home, tmp_path, start_simulator):
    """#6: bench with the store's disk full and --output elsewhere: the result is written to
    --output (complete, valid JSON), and the exit is 2 naming the store problem."""
    sim = start_simulator("--tp-size", "1", "--disable-cuda-graph", "--sim-speed", "20")
    out = tmp_path / "result.json"
    make = "from glmserve.store import RunStore; RunStore.open().close()"
    bench = _glmserve_sh(
        "bench",
        "--url",
        sim.url,
        "--mode",
        "decode",
        "--num-prompts",
        "2",
        "--output-len",
        "8",
        "--warmup",
        "0",
        "--output",
        str(out),
    )
    script = f"{shlex.quote(sys.executable)} -c {shlex.quote(make)} || exit 9; fill; {bench}"
    res = _in_full_tmpfs(script, tmpfs_home)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "bench result not stored" in res.stderr and str(out) in res.stderr
    data = json.loads(out.read_text())
    assert data["id"] is None and data["levels"], data


# -- #8: a log that grows while it is read over ssh ----------------------------------------------
WRITER = """
import sys, time
end = time.monotonic() + float(sys.argv[2])
with open(sys.argv[1], "a", buffering=1) as f:
    i = 0
    while time.monotonic() < end:
        i += 1
        f.write(f"Decode batch. #running-req: 1, line {i} " + "x" * 80 + "\\n")
        time.sleep(0.005)  # ~150 lines/s, as a busy server logs
"""


@pytest.mark.sshd
def test_reading_a_growing_log_over_ssh_returns_at_once(ssh_host, tmp_path):
    """#8: ``logs -n 5`` and ``status`` on a log written at ~150 lines/s over the real sshd
    return while the writer is still writing (bounded reads), with the last 5 lines."""
    run_dir = tmp_path / "remote" / "runs" / "9r0w1n90"
    run_dir.mkdir(parents=True)
    log = run_dir / "server.log"
    log.write_text("".join(f"boot line {i}\n" for i in range(20000)))  # ~300 KB already
    store = RunStore.open()
    store.add_run(
        RunRecord(run_id="9r0w1n90", host=ssh_host, profile="p", port=1, run_dir=str(run_dir))
    )
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), "40"])
    try:
        time.sleep(0.5)  # it is writing
        logs = cli("logs", "9r0w1n90", "-n", "5", timeout=60)
        assert writer.poll() is None, "logs returned only after the writer stopped"
        assert logs.returncode == 0, logs.stderr
        lines = logs.stdout.splitlines()
        assert len(lines) == 5 and all("Decode batch" in ln for ln in lines), lines
        numbers = [int(ln.split("line ")[1].split()[0]) for ln in lines]
        assert numbers == list(range(numbers[0], numbers[0] + 5))  # consecutive: a real tail
        status = cli("status", "9r0w1n90", "--json", timeout=60)
        assert writer.poll() is None, "status returned only after the writer stopped"
        assert status.returncode == 0, status.stderr
    finally:
        writer.kill()
        writer.wait(5)


def test_ctrl_c_while_starting_leaves_no_server(home, slow_setsid):
    """No data lost / nothing half-done on Ctrl-C: interrupted while the start waits for a
    slow setsid, the launch stops the server once it reports itself, and exits 130."""
    port = free_local_port()
    proc = subprocess.Popen(
        [*GLMSERVE, *_launch_args(port, "--no-wait")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=slow_setsid,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not list(home.glob("local/runs/*/launch.sh")) and time.monotonic() < deadline:
        time.sleep(0.05)  # uploaded: the start (and its 3 s setsid) comes next
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _out, errtext = proc.communicate(timeout=60)
    assert proc.returncode == 130, errtext
    run = RunStore.open().list_runs()[0]
    assert run.state == "FAILED" and run.port_claim is None
