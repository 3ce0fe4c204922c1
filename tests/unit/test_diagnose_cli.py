"""`glmserve diagnose` through the real CLI entry point (exit codes, JSON, stdin, run ids)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from glmserve.cli import main

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
OOM = (
    "[2026-11-30 10:00:01] server_args=ServerArgs(mem_fraction_static=0.88, "
    "max_running_requests=128, tp_size=8, port=30000)\n"
    "[2026-11-30 10:00:02 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
    "[2026-11-30 10:00:09] Received sigquit from a child process. "
    "It usually means the child failed.\n"
    "[2026-11-30 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. [bold]x[/bold]\n"
)
READY = "[2026-11-30 10:12:07] The server is fired up and ready to roll!\n"


def run(argv: list[str]) -> int:
    return main(argv)


def test_crashed_file_exits_3_with_file_line_and_hint(tmp_path: Path, capsys) -> None:
    log = tmp_path / "server.log"
    log.write_text(OOM)
    assert run(["diagnose", str(log)]) == 3
    cap = capsys.readouterr()
    assert "CRASHED" in cap.out and "OOM" in cap.out
    assert f"{log}:5: torch.OutOfMemoryError" in cap.out
    assert "[bold]x[/bold]" in cap.out  # log text is printed literally, not as rich markup
    assert "0.88" in cap.out  # the hint carries the numbers from the log
    assert cap.err.count("\n") == 1 and "OOM" in cap.err  # one-line summary on stderr


def test_ready_file_exits_0(tmp_path: Path, capsys) -> None:
    log = tmp_path / "ok.log"
    log.write_text(READY)
    assert run(["diagnose", str(log)]) == 0
    assert "READY" in capsys.readouterr().out


def test_json_output(tmp_path: Path, capsys) -> None:
    log = tmp_path / "server.log"
    log.write_text(OOM)
    assert run(["diagnose", str(log), "--json"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "CRASHED" and data["category"] == "OOM" and data["line"] == 5
    assert data["root_cause"].startswith("torch.OutOfMemoryError") and data["hint"]
    assert data["tp_size"] == 8 and "patch_active" in data


def test_stdin(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(READY.encode())))
    assert run(["diagnose", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "READY"


def test_binary_file_does_not_crash_the_cli(tmp_path: Path, capsys) -> None:
    log = tmp_path / "junk.log"
    log.write_bytes(bytes(range(256)) * 50 + b"\nKilled\n")
    assert run(["diagnose", str(log)]) == 3
    assert "CRASH" in capsys.readouterr().out


def test_unknown_target_without_lifecycle_is_a_usage_error(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "glmserve.remote.run_host", None)  # import fails
    assert run(["diagnose", "no-such-run-or-file"]) == 2
    assert "no such log file or run: no-such-run-or-file" in capsys.readouterr().err


def test_run_id_reads_the_run_log(tmp_path: Path, capsys) -> None:
    """A run recorded in the store (host local): its server.log is read by byte offset."""
    from glmserve.store import RunRecord, RunStore

    (tmp_path / "server.log").write_text(OOM)
    with RunStore.open() as store:
        store.add_run(
            RunRecord(run_id="d1a90000", host="local", profile="p", port=1, run_dir=str(tmp_path))
        )
    assert run(["diagnose", "d1a90000", "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["category"] == "OOM"


def test_directory_is_rejected(tmp_path: Path, capsys) -> None:
    assert run(["diagnose", str(tmp_path)]) == 2
    assert "is not a file" in capsys.readouterr().err


def test_help_documents_exit_codes(capsys) -> None:
    assert run(["diagnose", "--help"]) == 0
    text = capsys.readouterr().out
    assert "Exit codes" in text and "CRASHED" in text and "glmserve diagnose server.log" in text


def test_a_missing_file_is_named_as_a_file_not_looked_up_as_a_run(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nope.log"
    assert run(["diagnose", str(missing)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {missing}: no such log file"
    assert run(["profile", str(tmp_path / "traces")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {tmp_path / 'traces'}: no such trace file or directory"
