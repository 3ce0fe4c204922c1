"""A stdout (or stderr) that cannot be written is one line and exit 74, never "internal error
... please report it" (70) nor the interpreter's "Exception ignored" (120); EPIPE stays a
silent exit 1."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from glmserve.cli import diagnose_cmd, main
from glmserve.store import RunStore

FULL = "error: cannot write output: No space left on device\n"
needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")


def glmserve(*args: str, buffered: bool = True, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "glmserve", *args], env=env, timeout=60, text=True, **kw
    )


@needs_dev_full
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize(
    "args", [["results"], ["runs"], ["results", "--json"], ["--version"], ["--help"]]
)
def test_a_full_stdout_is_one_line_and_exit_74(args, buffered):
    with open("/dev/full", "w") as full:
        proc = glmserve(*args, buffered=buffered, stdout=full, stderr=subprocess.PIPE)
    assert (proc.returncode, proc.stderr) == (74, FULL)


@needs_dev_full
def test_a_full_stderr_as_well_raises_nothing_more():
    with open("/dev/full", "w") as full:
        proc = glmserve("results", stdout=full, stderr=full)
    assert proc.returncode == 74


@needs_dev_full
def test_a_full_stderr_does_not_change_a_usage_errors_status():
    with open("/dev/full", "w") as full:
        proc = glmserve("results", "--bogus", stdout=subprocess.PIPE, stderr=full)
    assert (proc.returncode, proc.stdout) == (2, "")


@pytest.mark.parametrize("args", [["results"], ["--version"]])
def test_a_closed_pipe_stays_a_silent_exit_1(args):
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = glmserve(*args, stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (1, "")


def test_a_closed_stdout_is_one_line_and_exit_74():
    proc = glmserve("results", stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1))
    assert proc.returncode == 74
    assert proc.stderr == "error: cannot write output: Bad file descriptor\n"


class _Failing(io.StringIO):
    """A stdout whose every write fails as a full disk (or a dead device) fails it."""

    def __init__(self, code: int = errno.ENOSPC) -> None:
        super().__init__()
        self.code = code

    def write(self, text: str) -> int:
        raise OSError(self.code, os.strerror(self.code))


def test_a_dead_device_is_named(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _Failing(errno.EIO))
    assert main(["results"]) == 74
    assert capsys.readouterr().err == "error: cannot write output: Input/output error\n"


def test_writing_the_error_to_a_full_stderr_raises_nothing(monkeypatch):
    monkeypatch.setattr(sys, "stdout", _Failing())
    monkeypatch.setattr(sys, "stderr", _Failing())
    assert main(["results"]) == 74


def test_bench_says_its_stored_result_is_kept(monkeypatch, capsys, fake):
    fake.n_tokens, fake.itl = 4, 0.0
    monkeypatch.setattr(sys, "stdout", _Failing())
    code = main(["bench", "--url", fake.url, "--warmup", "0", "--num-prompts", "2"])
    err = capsys.readouterr().err
    assert code == 74
    assert err.endswith(FULL.replace("\n", " (results already stored are kept)\n"))
    with RunStore.open() as store:
        assert len(store.list_bench_results()) == 1


def test_an_oserror_of_a_verb_itself_is_still_an_internal_error(monkeypatch, capsys):
    def boom(target: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(diagnose_cmd, "_diagnose_target", boom)
    assert main(["diagnose", "x.log"]) == 70
    assert capsys.readouterr().err.startswith("internal error: OSError")


def test_exit_74_is_documented():
    from glmserve.errors import EXIT_OUTPUT, OutputError

    docs = (Path(__file__).parents[2] / "docs" / "exit-codes.md").read_text()
    assert EXIT_OUTPUT == OutputError.exit_code == 74
    assert "\n| 74 | " in docs


def test_a_failed_write_leaves_nothing_for_the_next_command(monkeypatch, capsys):
    """rich keeps the text of a write that failed and sends it again with its next print, so an
    in-process caller (a test worker, a script calling ``main`` twice) saw the earlier
    "cannot write output" line ahead of the next command's own error."""
    with monkeypatch.context() as failing:
        failing.setattr(sys, "stdout", _Failing())
        failing.setattr(sys, "stderr", _Failing())
        assert main(["results"]) == 74
    capsys.readouterr()
    assert main(["bench", "--url", "http://127.0.0.1:9", "--request-rate", "5,,10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --request-rate") and len(err.splitlines()) == 1, err
