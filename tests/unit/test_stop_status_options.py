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
