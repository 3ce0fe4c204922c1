"""`stop --timeout` is a finite number of seconds (inf never sent the KILL, nan got a
confusing message) and `status ''` (an unset "$RUN") is refused, not read as "all live runs"."""

from __future__ import annotations

import pytest
from tests.fixtures.cli import run_cli


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "5000"])
def test_stop_timeout_is_bounded(capsys, value):
    code, _, err = run_cli(capsys, "stop", "--all", "--timeout", value)
    assert code == 2 and "--timeout: expected 0 to 3600 seconds" in err


def test_status_of_an_empty_id_is_refused(capsys):
    code, _, err = run_cli(capsys, "status", "")
    assert code == 2 and "empty RUN id" in err


def test_stop_with_neither_run_nor_all_says_what_is_missing(capsys):
    code, _, err = run_cli(capsys, "stop")
    assert code == 2 and err.strip().endswith("give a RUN id or --all"), err


def test_stop_with_both_run_and_all_says_not_both(capsys):
    code, _, err = run_cli(capsys, "stop", "abc", "--all")
    assert code == 2 and err.strip().endswith("give a RUN id or --all, not both"), err
