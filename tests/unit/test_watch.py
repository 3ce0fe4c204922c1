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
