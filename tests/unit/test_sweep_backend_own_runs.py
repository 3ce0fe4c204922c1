"""Which runs a sweep entry may stop when its launch was interrupted before the run id came
back: only those its own launch created, never a server of the same profile that was already
there (found by an adversarial CI run: a refused ``--resume`` stopped the earlier attempt's
server, started within the one-second clock slack, that the sweep had not recorded)."""

from __future__ import annotations

import time

import pytest

from glmserve.deploy import deployment
from glmserve.store import RunRecord, RunStore
from glmserve.sweep.backend import LifecycleBackend
from glmserve.sweep.state import SweepOptions


def _live_run(store: RunStore, run_id: str, profile: str = "flashinfer") -> None:
    store.add_run(
        RunRecord(run_id=run_id, host="local", profile=profile, port=1, run_dir="/x",
                  state="READY", created_at=time.time())
    )  # fmt: skip


def test_an_entry_that_never_launched_claims_no_run():
    be = LifecycleBackend(None, True)
    since = time.time()
    _live_run(be.store, "older0001")  # the killed attempt's server, a moment ago
    be.prepare("flashinfer", SweepOptions())  # the check then fails: no launch
    assert be.runs_started_since("flashinfer", since) == []


def test_a_run_that_existed_before_launch_is_not_claimed(monkeypatch):
    be = LifecycleBackend(None, True)
    since = time.time()
    _live_run(be.store, "older0002")

    def interrupted_launch(cls, plan, *, store=None, **kw):
        _live_run(store, "mine0001")  # created, then Ctrl-C before the id is returned
        raise KeyboardInterrupt

    monkeypatch.setattr(deployment.Deployment, "launch", classmethod(interrupted_launch))
    spec = be.prepare("flashinfer", SweepOptions())
    with pytest.raises(KeyboardInterrupt):
        be.launch(spec)
    assert be.runs_started_since("flashinfer", since) == ["mine0001"]
    be.prepare("flashinfer", SweepOptions())  # the next entry starts clean
    assert be.runs_started_since("flashinfer", since) == []
