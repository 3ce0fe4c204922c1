"""What a new user met trying the lifecycle verbs with odd input (notes/newuser4.md): an
empty RUN (an unset "$RUN") named as such by every verb, and ``status`` of a run whose host
cannot be reached exiting 5 (its state is only the stored one) instead of 0."""

from __future__ import annotations

import json
import time

import pytest
from tests.fixtures.cli import run_cli

from glmserve.errors import TransportError
from glmserve.store import RunRecord, RunStore


@pytest.mark.parametrize("verb", ["logs", "stop", "diagnose", "bench"])
def test_an_empty_run_id_is_named_an_unset_variable(capsys, verb):
    code, _, err = run_cli(capsys, verb, "")
    assert code == 2, err
    assert "empty" in err and "unset shell variable" in err, err
    assert err.count("\n") == 1  # one line


def _record(run_id: str) -> None:
    with RunStore.open() as store:
        store.add_run(
            RunRecord(run_id=run_id, host="gpu9", profile="p", port=30000,
                      run_dir=f"/r/{run_id}", pid=4242, pgid=4242, proc_start="1",
                      state="READY", created_at=time.time())
        )  # fmt: skip


def test_status_of_a_run_whose_host_is_unreachable_is_exit_5(capsys, monkeypatch):
    import glmserve.deploy.assess as assess

    def unreachable(run, store, t=None):
        raise TransportError("ssh gpu9: connect to host gpu9 port 22: Connection refused")

    monkeypatch.setattr(assess, "assess_run", unreachable)
    _record("ab12cd34")
    code, out, err = run_cli(capsys, "status", "--json")
    assert code == 5, err
    (row,) = json.loads(out)
    assert row["state"] == "READY?" and "Connection refused" in row["error"]
    assert "Connection refused" in err
    code, _, err = run_cli(capsys, "status", "ab12")
    assert code == 5 and "Connection refused" in err


@pytest.mark.parametrize("verb", ["status", "logs", "stop"])
def test_an_unknown_group_id_is_named_a_group_or_run(capsys, verb):
    code, _, err = run_cli(capsys, verb, "g1234567")
    assert code == 2 and "no group or run 'g1234567'" in err, err
