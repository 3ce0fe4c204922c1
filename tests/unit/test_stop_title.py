"""The ``stop --all`` table's title counts only runs this stop signalled as stopped: a run
already ended (a crash whose processes were gone) used to read "1/1 stopped"."""

from __future__ import annotations

from glmserve.cli.views import stop_title


def rep(ok: bool, signalled: list[int]) -> dict:
    return {"run_id": "r", "host": "local", "ok": ok, "signalled": signalled}


def test_an_ended_run_is_not_counted_as_stopped():
    assert stop_title([rep(True, [])]) == "stop: 0 stopped, 1 not running (1 run)"


def test_each_outcome_is_counted_once():
    reports = [rep(True, [10]), rep(True, []), rep(False, []), rep(True, [11, 12])]
    assert stop_title(reports) == "stop: 2 stopped, 1 not running, 1 FAILED (4 runs)"
