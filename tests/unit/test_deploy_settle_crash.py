"""``Deployment.settle_crash`` when what is left of a crashed run cannot be checked or
stopped: it says why and names ``glmserve stop RUN``, and the run stays live (not ended), so
``status`` keeps listing it and ``stop --all`` keeps trying it."""

from __future__ import annotations

import time

import pytest

import glmserve.deploy.deployment as deployment
import glmserve.remote.process as process
import glmserve.remote.stop as stop
from glmserve.deploy.deployment import Deployment
from glmserve.errors import GlmserveError, ProcessUnverified
from glmserve.remote.process import Ownership
from glmserve.store import RunRecord, RunStore


@pytest.fixture
def crashed(monkeypatch) -> Deployment:
    store = RunStore.open()
    store.add_run(
        RunRecord(run_id="c0ffee02", host="local", profile="p", port=30000, run_dir="/r",
                  pid=4242, pgid=4242, proc_start="1", state="CRASHED", created_at=time.time())
    )  # fmt: skip
    monkeypatch.setattr(deployment, "CRASH_SETTLE_S", 0.0)
    monkeypatch.setattr(Deployment, "transport", lambda self, run: None)
    return Deployment([store.get_run("c0ffee02")], store)


def _said(dep: Deployment) -> tuple[list[dict], list[str]]:
    lines: list[str] = []
    return dep.settle_crash(lines.append), lines


def test_leftovers_that_cannot_be_stopped_are_said_and_the_run_stays_live(crashed, monkeypatch):
    monkeypatch.setattr(process, "run_ownership", lambda t, run: Ownership([4243]))

    def fails(run_id, timeout, store):
        raise GlmserveError("processes still alive after KILL: [4243]")

    monkeypatch.setattr(stop, "stop_run", fails)
    reports, lines = _said(crashed)
    assert [r["ok"] for r in reports] == [False]
    assert "still up (pid 4243)" in lines[0]
    assert "could not stop" in lines[-1] and "glmserve stop c0ffee02" in lines[-1]
    run = crashed.store.get_run("c0ffee02")
    assert run.ended_at is None and run.state == "CRASHED"
    assert [r.run_id for r in crashed.store.list_runs(live_only=True)] == ["c0ffee02"]


def test_an_unverifiable_group_is_said_and_left_live(crashed, monkeypatch):
    def unverified(t, run):
        raise ProcessUnverified("the /proc probe came back cut off or empty")

    monkeypatch.setattr(process, "run_ownership", unverified)
    reports, lines = _said(crashed)
    assert reports == [] and "could not be checked" in lines[0]
    assert "glmserve stop c0ffee02" in lines[0]
    assert crashed.store.get_run("c0ffee02").ended_at is None


def test_a_group_already_gone_is_recorded_ended_keeping_the_verdict(crashed, monkeypatch):
    monkeypatch.setattr(process, "run_ownership", lambda t, run: Ownership([]))
    assert _said(crashed) == ([], [])
    run = crashed.store.get_run("c0ffee02")
    assert run.ended_at is not None and run.state == "CRASHED"
