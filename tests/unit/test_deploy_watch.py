"""Watch pieces without a host: line splitting, PID ownership, a scripted log."""

from __future__ import annotations

from glmserve.deploy.watch import LineSplitter
from glmserve.remote.process import GroupProbe, verify_ownership
from glmserve.store import RunRecord


def test_line_splitter_keeps_partial_lines():
    s = LineSplitter()
    assert s.feed(b"a\nb") == ["a"]
    assert s.feed(b"c\r\nd\n") == ["bc", "d"]
    assert s.feed(b"tail") == []
    assert s.flush() == ["tail"]


def _run() -> RunRecord:
    return RunRecord(
        run_id="r", host="local", profile="p", port=1, run_dir="/x",
        pid=100, pgid=100, proc_start="5000", boot_id="boot-a",
    )  # fmt: skip


def test_ownership_accepts_the_group_it_started():
    probe = GroupProbe("boot-a", [(100, "S", 5000), (101, "S", 5100), (102, "Z", 5200)])
    own = verify_ownership(_run(), probe)
    assert own.alive and own.pids == [100, 101]


def test_ownership_refuses_reused_pid_other_boot_and_older_members():
    assert not verify_ownership(_run(), GroupProbe("boot-a", [(100, "S", 9999)])).alive
    assert "rebooted" in verify_ownership(_run(), GroupProbe("boot-b", [(100, "S", 5000)])).reason
    older = GroupProbe("boot-a", [(100, "S", 5000), (7, "S", 10)])
    assert not verify_ownership(_run(), older).alive
    assert not verify_ownership(_run(), GroupProbe("boot-a", [])).alive


def test_watcher_survives_truncation_and_reports_crash(tmp_path, monkeypatch):
    """Polls read only new bytes; a truncated log is re-read from 0; a crash line ends it."""
    from glmserve.deploy import watch
    from glmserve.remote.host_config import HostConfig
    from glmserve.remote.process import Ownership
    from glmserve.remote.transport import LocalTransport
    from glmserve.store import RunStore

    monkeypatch.setattr(watch, "run_ownership", lambda t, run: Ownership([4242]))
    store = RunStore.open()
    run = store.add_run(
        RunRecord(run_id="w1", host="local", profile="p", port=1, run_dir=str(tmp_path))
    )
    log = tmp_path / "server.log"
    log.write_text("[2026-01-01 00:00:00 TP0] Load weight begin. avail mem=90.00 GB\npart")
    script = [
        lambda: log.write_text("rotated\n"),  # shorter than what was read: truncation
        lambda: log.open("a").write(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        ),
    ]
    offsets: list[int] = []

    def on_tick(tick):  # type: ignore[no-untyped-def]
        offsets.append(tick.offset)
        if script:
            script.pop(0)()

    w = watch.Watcher(run, LocalTransport(HostConfig()), store, poll_s=0.01, on_tick=on_tick,
                      health=False)  # fmt: skip
    result = w.watch()
    assert result.state == "CRASHED"
    assert result.diagnosis.category.value == "OOM"
    assert offsets[0] > 0 and offsets[1] == len(b"rotated\n")  # re-read from the top
    assert w.diag.lines_seen == 3  # load line, "rotated", the OOM line ("part" never completed)
    assert store.get_run("w1").state == "CRASHED"
    assert [e["state"] for e in store.list_events("w1")][-1] == "CRASHED"


def test_watcher_stall_budget(tmp_path, monkeypatch):
    from glmserve.deploy import watch
    from glmserve.remote.host_config import HostConfig
    from glmserve.remote.process import Ownership
    from glmserve.remote.transport import LocalTransport
    from glmserve.store import RunStore

    monkeypatch.setattr(watch, "run_ownership", lambda t, run: Ownership([4242]))
    store = RunStore.open()
    run = store.add_run(
        RunRecord(run_id="w2", host="local", profile="p", port=1, run_dir=str(tmp_path))
    )
    (tmp_path / "server.log").write_text("[2026-01-01 00:00:00 TP0] Load weight begin.\n")
    w = watch.Watcher(run, LocalTransport(HostConfig()), store, poll_s=0.02,
                      stall_timeout_s=0.2, health=False)  # fmt: skip
    result = w.watch()
    assert result.state == "STALLED"
    assert result.diagnosis.phase.value == "LOADING_WEIGHTS"
    assert 0.2 <= result.elapsed_s < 2


# --- issue 10 #1: what counts as progress, which budget fires ---------------------------------
# Lines as SGLang 0.5.9 writes them: uvicorn's access format from srt/utils/common.py
# set_uvicorn_logging_configs ('[%(asctime)s] %(levelprefix)s %(client_addr)s -
# "%(request_line)s" %(status_code)s'), the health-check failure from http_server.py
# health_generate, the deprecation note get_model_info logs.
NOISE = [
    '[2026-12-01 08:23:26] INFO:     127.0.0.1:45196 - "GET /health HTTP/1.1" 503 Service '
    "Unavailable",
    '[2026-12-01 08:23:27] INFO:     127.0.0.1:45206 - "GET /health_generate HTTP/1.1" 200 OK',
    '[2026-12-01 08:23:27] INFO:     10.0.0.7:51000 - "POST /generate HTTP/1.1" 200 OK',
    "[2026-12-01 08:23:28] Health check failed. Server couldn't get a response from detokenizer "
    "for last 20 seconds. tic start time: 08:23:08. last_heartbeat time: 08:23:08",
    "[2026-12-01 08:23:29] Endpoint '/get_model_info' is deprecated and will be removed in a "
    "future version. Please use '/model_info' instead.",
    "",
]
PROGRESS = [
    "[2026-12-01 08:20:01 TP0] Load weight begin. avail mem=93.42 GB",
    "Loading safetensors checkpoint shards:  49% Completed | 41/83 [02:10<02:05, 0.31it/s]",
    "[2026-12-01 08:21:40 TP3] Capture cuda graph begin. This can take up to several minutes.",
    "[2026-12-01 08:22:00] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C "
    "to quit)",
    "[2026-12-01 08:22:05 TP0] Using default HuggingFace chat template with detected content",
]  # fmt: skip


def test_access_and_probe_lines_are_not_progress_server_lines_are():
    from glmserve.diagnose import is_progress_line

    assert [ln for ln in NOISE if is_progress_line(ln)] == []
    assert all(is_progress_line(ln) for ln in PROGRESS)


def test_stall_budget_precedence_and_source():
    from glmserve.diagnose import State, phase_stall_budget, stall_budget

    assert stall_budget(State.WARMUP) == (phase_stall_budget(State.WARMUP), "default for WARMUP")
    assert stall_budget(State.WARMUP, 5) == (5, "--stall-timeout 5")
    per = {State.LOADING_WEIGHTS: 3600.0}
    assert stall_budget(State.LOADING_WEIGHTS, 5, per) == (3600.0, "--stall-budget load=3600")
    assert stall_budget(State.WARMUP, 5, per) == (5, "--stall-timeout 5")
    assert stall_budget(State.READY, 5, per)[0] == float("inf")  # READY never stalls


def test_parse_stall_budgets_names_and_errors():
    import pytest

    from glmserve.deploy.stall_budgets import parse_stall_budgets
    from glmserve.diagnose import State
    from glmserve.errors import ConfigError

    got = parse_stall_budgets(["load=3600", "WARMUP=120", "capturing_graphs=900.5"])
    assert got == {State.LOADING_WEIGHTS: 3600, State.WARMUP: 120, State.CAPTURING_GRAPHS: 900.5}
    for bad, why in (("load", "want PHASE=SECONDS"), ("load=-1", "positive"),
                     ("ready=5", "unknown start-up phase"), ("load=x", "positive")):  # fmt: skip
        with pytest.raises(ConfigError, match=why) as exc:
            parse_stall_budgets([bad])
        assert str(exc.value).startswith(f"--stall-budget {bad}: ")


def test_docs_document_the_default_budgets_and_deadline():
    """The docs' table is the user's contract: it must be the table the code uses."""
    import re
    from pathlib import Path

    from glmserve.deploy.watch import DEFAULT_DEADLINE_S
    from glmserve.diagnose import STALL_PHASE_NAMES, State, phase_stall_budget

    readme = (Path(__file__).parents[2] / "docs" / "lifecycle.md").read_text()
    section = readme[readme.index("## Stall budgets") :]
    section = section[: section.index("\n#", 1)]
    rows = dict(re.findall(r"^\| `(\w+)` \| [A-Z_]+ \| (\d+) s", section, re.M))
    want = {
        "starting": State.STARTING,
        "load": State.LOADING_WEIGHTS,
        "kv": State.KV_ALLOCATED,
        "graphs": State.CAPTURING_GRAPHS,
        "warmup": State.WARMUP,
    }
    assert set(want) <= set(STALL_PHASE_NAMES)
    assert {k: int(v) for k, v in rows.items()} == {
        k: int(phase_stall_budget(s)) for k, s in want.items()
    }
    assert f"{int(DEFAULT_DEADLINE_S)} s" in section


def _watch_file(tmp_path, monkeypatch, writes, **kw):  # type: ignore[no-untyped-def]
    """Watch a log file written by ``writes`` (one per tick) with the stall budget in kw."""
    from glmserve.deploy import watch
    from glmserve.remote.host_config import HostConfig
    from glmserve.remote.process import Ownership
    from glmserve.remote.transport import LocalTransport
    from glmserve.store import RunStore

    monkeypatch.setattr(watch, "run_ownership", lambda t, run: Ownership([4242]))
    store = RunStore.open()
    run = store.add_run(
        RunRecord(run_id="w3", host="local", profile="p", port=1, run_dir=str(tmp_path))
    )
    log = tmp_path / "server.log"
    log.write_bytes(b"[2026-12-01 08:20:01 TP0] Load weight begin. avail mem=93.42 GB\n")
    pending = list(writes)

    def on_tick(_tick):  # type: ignore[no-untyped-def]
        if pending:
            with log.open("ab") as fh:
                fh.write(pending.pop(0))

    w = watch.Watcher(run, LocalTransport(HostConfig()), store, poll_s=0.05, health=False,
                      on_tick=on_tick, **kw)  # fmt: skip
    return w.watch()


def test_tqdm_redraws_on_one_line_are_progress(tmp_path, monkeypatch):
    """SGLang's weight bar rewrites one line with \\r for minutes: each redraw is progress,
    so a budget shorter than the whole load but longer than one shard never fires."""
    bar = "\rLoading safetensors checkpoint shards: {p:3d}% Completed | {n}/83 [00:01<00:05]"
    writes = []
    for i in range(1, 9):
        writes += [bar.format(p=i * 10, n=i * 8).encode()] + [b""] * 3  # a redraw every 4 ticks
    writes += [b"\n[2026-12-01 08:20:31 TP0] Load weight end. elapsed=30.0 s\n"]
    result = _watch_file(tmp_path, monkeypatch, writes, stall_timeout_s=0.6)
    assert result.state == "STALLED"  # only after the end line: ~8 x 4 ticks of redraws
    assert result.diagnosis.last_progress.startswith("Load weight end.")


def test_access_lines_do_not_keep_a_hung_phase_alive(tmp_path, monkeypatch):
    writes = [(NOISE[0] + "\n").encode()] * 200  # one /health 503 per tick, forever
    result = _watch_file(tmp_path, monkeypatch, writes, stall_timeout_s=0.5)
    assert result.state == "STALLED" and 0.5 <= result.diagnosis.stalled_s < 1.5
    assert "stall budget 0.5s, --stall-timeout 0.5" in (result.diagnosis.hint or "")


# --- issue 10 #12: who holds the port ---------------------------------------------------------
def test_parse_port_view_states():
    from glmserve.deploy.port_owner import parse_port_view

    assert parse_port_view("listen: ?\n", [1]).state == "unknown"
    assert parse_port_view("", [1]).state == "unknown"
    assert parse_port_view("listen:\n", [1]).state == "free"
    ours = parse_port_view("listen: 77\nfd 10 77\n", [10, 11])
    assert (ours.state, ours.holders) == ("ours", [10])
    assert parse_port_view("listen: 77\n", [10]).state == "foreign"
    assert parse_port_view("listen: 77\nfd 99 77\n", [10]).state == "foreign"  # not verified ours
    assert parse_port_view("listen: 77 78\nfd 10 77\n", [10]).state == "foreign"  # a 2nd holder


def test_port_owner_script_sees_real_listeners(tmp_path):
    """A real listener in its own process group: ours for that group, foreign for another."""
    import os
    import signal
    import subprocess
    import sys

    from glmserve.deploy.port_owner import parse_port_view, port_owner_script
    from glmserve.remote.host_config import HostConfig
    from glmserve.remote.transport import LocalTransport

    code = (
        "import socket, sys, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "print(s.getsockname()[1], flush=True); time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              start_new_session=True, text=True)  # fmt: skip
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        t = LocalTransport(HostConfig())

        def view(pgid: int, pids: list[int]):  # type: ignore[no-untyped-def]
            return parse_port_view(t.run(port_owner_script(pgid, port)).stdout, pids)

        assert view(holder.pid, [holder.pid]).state == "ours"
        assert view(other.pid, [other.pid]).state == "foreign"
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
        assert view(other.pid, [other.pid]).state == "free"
    finally:
        for p in (holder, other):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


# SGLang 0.5.9 losing --port to another SGLang (issue 10 #4): uvicorn's startup runs the
# lifespan (SGLang starts its warmup thread there), the bind fails (uvicorn server.py:
# logger.error(exc); await self.lifespan.shutdown(); sys.exit(1)), the lifespan's
# warmup_thread.join() waits for _execute_server_warmup, which warmed up the other server,
# and _wait_and_warmup logs the ready line; then the process exits 1.
PORT_LOST = """\
[2026-12-01 08:26:45 TP0] max_total_num_tokens=495009, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2048, context_len=202752, available_gpu_mem=20.10 GB
[2026-12-01 08:26:45] INFO:     Started server process [3458]
[2026-12-01 08:26:45] INFO:     Waiting for application startup.
[2026-12-01 08:26:45] INFO:     Application startup complete.
[2026-12-01 08:26:45] ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use
[2026-12-01 08:26:45] INFO:     Waiting for application shutdown.
[2026-12-01 08:26:46] The server is fired up and ready to roll!
[2026-12-01 08:26:46] INFO:     Application shutdown complete.
"""  # noqa: E501


def test_ready_line_after_a_lost_bind_stays_crashed_port_in_use():
    from glmserve.diagnose import Category, State, diagnose_text

    d = diagnose_text(PORT_LOST)
    assert d.state is State.CRASHED and d.category is Category.PORT_IN_USE
    assert "[Errno 98]" in (d.root_cause or "")
    # an exception SGLang merely logged before READY is still cleared by READY
    survived = diagnose_text(
        "[2026-12-01 08:26:45] ValueError: bad chat template, falling back\n"
        "[2026-12-01 08:26:46] The server is fired up and ready to roll!\n"
    )
    assert survived.state is State.READY


def test_ready_line_before_the_bind_waits_for_our_listener(tmp_path):
    """--skip-server-warmup: SGLang's warmup thread logs the ready line as the lifespan starts,
    a moment before uvicorn binds. READY waits until the run's own process listens."""
    import os
    import signal
    import subprocess
    import sys

    from glmserve.deploy.watch import Watcher
    from glmserve.remote.host_config import HostConfig
    from glmserve.remote.transport import LocalTransport, free_local_port
    from glmserve.store import RunStore

    port = free_local_port()
    log = tmp_path / "server.log"
    code = (
        "import socket, time\n"
        f"open({str(log)!r}, 'a').write('[2026-12-01 08:00:00] The server is fired up and "
        "ready to roll!\\n')\n"
        f"time.sleep(1.0); s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen()\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        with open(f"/proc/{proc.pid}/stat") as fh:
            start = fh.read().rsplit(")", 1)[1].split()[19]
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
        notes: list[str] = []
        with RunStore.open() as store:
            run = store.add_run(
                RunRecord(run_id="bind1", host="local", profile="p", port=port,
                          run_dir=str(tmp_path), pid=proc.pid, pgid=proc.pid, proc_start=start,
                          boot_id=boot)
            )  # fmt: skip
            w = Watcher(run, LocalTransport(HostConfig()), store, poll_s=0.1, timeout_s=20,
                        on_tick=lambda t: notes.append(t.note))  # fmt: skip
            result = w.watch()
        assert result.state == "READY" and result.elapsed_s >= 0.5
        assert any("nothing listens on port" in n for n in notes)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# --- issue 20 #4: only listeners a probe of the bound address reaches count --------------------
def test_parse_port_view_counts_only_listeners_at_the_bound_address():
    from glmserve.deploy.port_owner import parse_port_view

    # ours on 127.0.0.2 (inode 77), a stranger on 127.0.0.1 (inode 88), as /proc/net/tcp
    # writes them on a little-endian host
    text = "listen: 77@0200007F 88@0100007F\nfd 10 77\n"
    assert parse_port_view(text, [10], "127.0.0.2").state == "ours"
    assert parse_port_view(text, [10], "127.0.0.1").state == "foreign"
    assert parse_port_view(text, [10]).state == "foreign"  # no address known: all count
    wild = "listen: 77@0200007F 99@00000000\nfd 10 77\n"  # a wildcard stranger answers too
    assert parse_port_view(wild, [10], "127.0.0.2").state == "foreign"
    v6 = "listen: 5@00000000000000000000000001000000\nfd 10 5\n"  # ::1
    assert parse_port_view(v6, [10], "::1").state == "ours"
    assert parse_port_view(v6, [10], "127.0.0.1").state == "free"
