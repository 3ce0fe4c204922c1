"""Watch pieces without a host: line splitting, PID ownership, a scripted log."""

from __future__ import annotations

from glmserve.lifecycle import GroupProbe, verify_ownership
from glmserve.store import RunRecord
from glmserve.watch import LineSplitter


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
    from glmserve import watch
    from glmserve.hosts import HostConfig
    from glmserve.lifecycle import Ownership
    from glmserve.store import RunStore
    from glmserve.transport import LocalTransport

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
    from glmserve import watch
    from glmserve.hosts import HostConfig
    from glmserve.lifecycle import Ownership
    from glmserve.store import RunStore
    from glmserve.transport import LocalTransport

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
