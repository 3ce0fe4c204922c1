"""``glmserve.cli.main``: it returns the exit status, and Ctrl-C reaches it one way."""

from __future__ import annotations

import pytest

from glmserve.cli import diagnose_cmd, main
from glmserve.errors import EXIT_INTERRUPTED, Interrupted, SweepInterrupted


def _verb_raises(monkeypatch, exc: BaseException) -> None:
    def boom(target: str) -> None:
        raise exc

    monkeypatch.setattr(diagnose_cmd, "_diagnose_target", boom)


def test_main_returns_the_status_instead_of_exiting(capsys):
    assert main(["diagnose", "/nonexistent/server.log"]) == 2
    assert capsys.readouterr().err.startswith("error: /nonexistent/server.log: no such log file")


def test_ctrl_c_in_a_verb_prints_interrupted_and_returns_130(monkeypatch, capsys):
    _verb_raises(monkeypatch, KeyboardInterrupt())
    assert main(["diagnose", "x.log"]) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "interrupted\n"


@pytest.mark.parametrize(
    "exc, printed",
    [
        (
            Interrupted("stopped watching: run r1 keeps running"),
            "stopped watching: run r1 keeps running\n",
        ),
        (SweepInterrupted("sweep s1 interrupted"), "error: sweep s1 interrupted\n"),
    ],
)
def test_interrupted_errors_exit_130_notice_or_error(monkeypatch, capsys, exc, printed):
    _verb_raises(monkeypatch, exc)
    assert main(["--debug", "diagnose", "x.log"]) == EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert err.endswith(printed)
    # --debug: a traceback for an error, none for a notice
    assert ("Traceback" in err) is (not exc.notice)
