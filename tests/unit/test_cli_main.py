"""``glmserve.cli.main``: it returns the exit status, and Ctrl-C reaches it one way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


# -- the console script: Ctrl-C while the CLI is still being imported -------------------------
# Ctrl-C is made deterministic: an import hook raises KeyboardInterrupt where SIGINT would
# have landed (inside an import of the CLI's start-up), instead of racing a real signal.
_CTRL_C_DURING_IMPORT = """
import sys

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, CtrlC())
from glmserve.__main__ import main
raise SystemExit(main())
"""


@pytest.mark.parametrize("module", ["typer", "rich.console", "glmserve.cli.lifecycle_cmds"])
def test_ctrl_c_while_the_cli_is_imported_exits_130_without_a_traceback(module):
    code = _CTRL_C_DURING_IMPORT.format(module=module)
    proc = subprocess.run(
        [sys.executable, "-c", code, "runs"], capture_output=True, text=True, timeout=60
    )
    assert (proc.returncode, proc.stderr, proc.stdout) == (EXIT_INTERRUPTED, "interrupted\n", "")


def test_the_console_script_is_the_entry_that_handles_ctrl_c_during_imports():
    import glmserve.__main__ as entry

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    scripts = tomllib.loads(pyproject.read_text())["project"]["scripts"]
    assert scripts == {"glmserve": "glmserve.__main__:main"}
    assert entry.EXIT_INTERRUPTED == EXIT_INTERRUPTED


def test_python_dash_m_glmserve_runs_the_cli():
    proc = subprocess.run(
        [sys.executable, "-m", "glmserve", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (proc.returncode, proc.stdout) == (0, "glmserve 0.1.0\n")


def test_progress_lines_keep_the_start_of_the_message():
    """An audit: long lines were cut from the left (`2-02 19:52:57 TP7] Load weight end`),
    and a run with no log line yet showed `STARTING: ` with nothing after it."""
    from glmserve.cli.views import brief_log_line

    line = "[2026-12-02 19:52:57 TP7] Load weight end. elapsed=1.00 s, " + "x" * 200
    text = brief_log_line(line, 60)
    assert text.startswith("Load weight end. elapsed=1.00 s") and len(text) == 60
    assert text.endswith("…")
    assert brief_log_line("INFO:     Started server process [42]", 60) == (
        "INFO:     Started server process [42]"
    )
    assert brief_log_line("", 60) == "(no log line yet)"


def test_plain_progress_names_an_open_loop_level_by_its_rate(capsys):
    """An audit: open-loop levels started as `bench: concurrency 0: 200 requests`."""
    from glmserve.cli.views import PlainProgress

    p = PlainProgress()
    p.level_started(0, 200, None, 20.0)
    p.level_started(8, 100, None, float("inf"))
    p.level_started(4, None, 30.0)
    assert capsys.readouterr().err.splitlines() == [
        "bench: rate 20 req/s: 200 requests",
        "bench: rate inf req/s, max concurrency 8: 100 requests",
        "bench: concurrency 4: 30 s",
    ]


@pytest.mark.parametrize(("columns", "width"), [("80", 80), ("", 160)])
def test_columns_sets_the_table_width_even_when_piped(columns, width):
    """Audit round 2: `COLUMNS=80 glmserve results show ID | cat` came out 150 wide."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns:
        env["COLUMNS"] = columns
    res = subprocess.run(
        [sys.executable, "-c", "from glmserve.cli._app import out; print(out.width)"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert res.stdout.strip() == str(width)
