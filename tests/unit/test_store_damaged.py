"""Run ids and GLMSERVE_HOME that are hostile, damaged or odd, through the CLI.

The run store is a file users can break (a crash mid-copy, a newer glmserve, a second
process holding the lock): every such case is exit 2 and one line naming the file.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import glmserve.store as store_mod
from glmserve.cli import main
from glmserve.store import RunRecord, RunStore


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "internal error" not in captured.err, captured
    return int(rc), captured.out, captured.err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def db_path() -> Path:
    return Path(os.environ["GLMSERVE_HOME"]) / "runs.sqlite"


def _fresh_store() -> Path:
    RunStore.open().close()
    return db_path()


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["logs", "../../etc/passwd"], "no run '../../etc/passwd'"),
        (["stop", "x;rm -rf /"], "no run 'x;rm -rf /'"),
        (["status", "$(id)"], "no run '$(id)'"),
        (["logs", "%"], "no run '%'"),  # LIKE wildcards are literal
        (["logs", "_"], "no run '_'"),
        (["logs", "a\nb"], "no run 'a\\nb'"),
    ],
)
def test_hostile_run_ids_are_not_found_in_one_line(capsys, args, fragment):
    store = RunStore.open()
    store.add_run(RunRecord(run_id="r1", host="local", profile="p", port=1, run_dir="/x"))
    store.close()
    code, _, err = run(capsys, *args)
    assert code == 2
    assert fragment in one_line(err)


@pytest.mark.parametrize("content", [b"garbage" * 1000, b"SQLite format 3\x00" + b"\x00" * 80])
@pytest.mark.parametrize("verb", ["status", "runs"])
def test_corrupt_store(capsys, content, verb):
    db_path().write_bytes(content)
    code, _, err = run(capsys, verb)
    assert code == 2
    assert one_line(err).startswith(f"error: {db_path()}: cannot open run store")


def test_store_from_a_newer_glmserve_is_refused_not_misread(capsys):
    path = _fresh_store()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO _migrations VALUES ('m999_from_the_future', 0)")
    code, _, err = run(capsys, "runs")
    assert code == 2
    line = one_line(err)
    assert "written by a newer glmserve" in line and "m999_from_the_future" in line


def test_store_missing_a_table(capsys):
    path = _fresh_store()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE runs")
    code, _, err = run(capsys, "status")
    assert code == 2
    assert "missing table runs" in one_line(err)


def test_damaged_json_cell_names_the_run(capsys):
    path = _fresh_store()
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO runs (run_id, host, profile, port, run_dir, created_at, updated_at, "
            "spec) VALUES ('r1', 'local', 'p', 1, '/x', 0, 0, '{broken')"
        )
    code, _, err = run(capsys, "runs")
    assert code == 2
    assert "run 'r1' column spec is not valid JSON" in one_line(err)


def test_locked_store_is_one_line_after_the_busy_timeout(capsys, monkeypatch):
    path = _fresh_store()
    monkeypatch.setattr(store_mod, "BUSY_TIMEOUT_MS", 200)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        code, _, err = run(capsys, "runs")
    finally:
        holder.close()
    assert code == 2
    line = one_line(err)
    assert str(path) in line and "database is locked" in line


def test_store_path_is_a_directory(capsys):
    db_path().mkdir()
    code, _, err = run(capsys, "runs")
    assert code == 2
    assert "not a regular file" in one_line(err)


def test_glmserve_home_is_a_file(capsys, tmp_path, monkeypatch):
    f = tmp_path / "home-file"
    f.write_text("x")
    monkeypatch.setenv("GLMSERVE_HOME", str(f))
    code, _, err = run(capsys, "runs")
    assert code == 2
    assert one_line(err) == f"error: GLMSERVE_HOME {f} exists but is not a directory"
    monkeypatch.setenv("GLMSERVE_HOME", str(f / "sub"))
    code, _, err = run(capsys, "status")
    assert code == 2
    assert f"GLMSERVE_HOME {f / 'sub'}: cannot create it" in one_line(err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_glmserve_home_unwritable(capsys, tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    monkeypatch.setenv("GLMSERVE_HOME", str(ro / "home"))
    code, _, err = run(capsys, "runs")
    assert code == 2
    assert "cannot create it" in one_line(err)


@contextmanager
def _unwritable(folder: Path) -> Iterator[None]:
    """``folder`` unwritable for this process: mode 555, or (root ignores modes) the
    immutable attribute; skips where neither works."""
    folder.chmod(0o555)
    immutable = os.access(folder, os.W_OK)
    if immutable and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
        folder.chmod(0o755)
        pytest.skip("root without chattr: no way to make a folder unwritable here")
    try:
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


@pytest.mark.parametrize("verb", [["runs"], ["status"], ["logs", "r1"]])
def test_existing_store_in_a_read_only_home_names_the_directory(capsys, verb):
    """SQLite said "unable to open database file" (or "attempt to write a readonly
    database"): the message says the folder is not writable, and why that matters."""
    path = _fresh_store()
    with _unwritable(path.parent):
        code, _, err = run(capsys, *verb)
    assert code == 2
    assert one_line(err) == (
        f"error: {path}: cannot open run store: the directory {path.parent} is not writable "
        "(SQLite creates the store's journal and lock files there, even to read it); make it "
        "writable or point GLMSERVE_HOME at a writable directory"
    )


def test_runs_last_beyond_sqlite_integers(capsys):
    _fresh_store()
    code, _, _ = run(capsys, "runs", "--last", str(2**80), "--json")
    assert code == 0
