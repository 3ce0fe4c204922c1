"""Issue 10 #1: hang detection with real SGLang noise, through every path that watches.

The simulator writes uvicorn's access line for every request, as SGLang 0.5.9 does
(``srt/utils/common.py`` set_uvicorn_logging_configs), so a server hung in warmup logs one
``"GET /health HTTP/1.1" 503`` line per watcher poll. Those lines, and anything else our probes
cause, must never count as progress; each phase has its stall budget; ``launch`` and ``sweep``
have an overall deadline even when no option sets one.
"""

from __future__ import annotations

import json
import time

import pytest
from tests.fixtures.cli import run_glmserve
from tests.fixtures.simulator import free_port

POLL_S = 1.0  # launch's default --poll


def _launch(*args: str, timeout: float = 90) -> tuple[int, dict, str]:
    res = run_glmserve(
        "launch", "--profile", "flashinfer", "--simulate", "--json", *args, timeout=timeout
    )
    doc = json.loads(res.stdout[res.stdout.index("{") :]) if "{" in res.stdout else {}
    return res.returncode, doc, res.stderr


def _server_log(doc: dict) -> str:
    with open(doc["run"]["run_dir"] + "/server.log", errors="replace") as fh:
        return fh.read()


def test_warmup_hang_is_stalled_within_budget_plus_one_poll(stop_left_runs):
    """The issue's command: it used to wait forever (every /health poll wrote a log line)."""
    port = free_port()
    t0 = time.monotonic()
    rc, doc, err = _launch(
        "--set", f"server.port={port}", "--set", "sim.hang-at=warmup", "--stall-timeout", "5"
    )  # fmt: skip
    wall = time.monotonic() - t0
    assert rc == 4, err
    verdict = doc["verdict"]
    assert verdict["state"] == "STALLED" and verdict["phase"] == "WARMUP"
    # fired within the budget plus one poll of the last line that showed progress
    assert 5.0 <= verdict["stalled_s"] <= 5.0 + POLL_S, verdict
    assert "stall budget 5s, --stall-timeout 5" in verdict["hint"]
    assert wall < 60
    log = _server_log(doc)
    after_hang = log[log.index('"GET /model_info HTTP/1.1" 200') :]
    assert after_hang.count('"GET /health HTTP/1.1" 503') >= 3  # the noise really was there


def test_load_hang_uses_the_per_phase_budget_and_names_it(stop_left_runs):
    port = free_port()
    rc, doc, err = _launch(
        "--set", f"server.port={port}", "--set", "sim.hang-at=load",
        "--stall-budget", "warmup=1", "--stall-budget", "load=3",
    )  # fmt: skip
    assert rc == 4, err
    verdict = doc["verdict"]
    assert verdict["state"] == "STALLED" and verdict["phase"] == "LOADING_WEIGHTS"
    assert 3.0 <= verdict["stalled_s"] <= 3.0 + POLL_S
    assert "stall budget 3s, --stall-budget load=3" in verdict["hint"]


def test_overall_timeout_hint_names_the_deadline_not_a_stall_budget(stop_left_runs):
    port = free_port()
    rc, doc, err = _launch(
        "--set", f"server.port={port}", "--set", "sim.hang-at=warmup", "--timeout", "6",
        "--stall-timeout", "50",
    )  # fmt: skip
    assert rc == 4, err
    hint = doc["verdict"]["hint"]
    assert hint.startswith("not READY within the overall deadline of 6s (--timeout 6)"), hint
    assert "stall budget 50s, --stall-timeout 50, not reached" in hint
    assert "no log progress for 0s" not in hint


@pytest.mark.parametrize("verb", ["launch", "sweep"])
def test_bad_stall_budget_is_one_line_exit_2_before_anything_starts(verb):
    target = ["--profile"] if verb == "launch" else ["--profiles"]
    res = run_glmserve(verb, *target, "flashinfer", "--simulate", "--stall-budget", "x=1")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == (
        "error: --stall-budget x=1: unknown start-up phase 'x' (one of starting, load, "
        "weights, kv, graphs, warmup)"
    )
    from glmserve.store import RunStore

    with RunStore.open() as store:
        assert store.list_runs() == []


@pytest.mark.parametrize("value", ["0", "-3", "nan"])
def test_unusable_stall_timeout_is_one_line_exit_2_before_anything_starts(value):
    """Review: ``--stall-timeout 0/-3/nan`` used to be dropped in silence (a warmup hang then
    waited the 300 s default) while ``--stall-budget load=-1`` was refused."""
    res = run_glmserve(
        "launch", "--profile", "flashinfer", "--simulate", "--stall-timeout", value,
        "--set", f"server.port={free_port()}",
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: --stall-timeout ") and "positive number" in last, last
    from glmserve.store import RunStore

    with RunStore.open() as store:
        assert store.list_runs() == []


def test_launch_without_timeout_gets_the_default_deadline(monkeypatch, stop_left_runs):
    """No --timeout and no budget that can fire first: the default deadline ends the watch."""
    from typer.testing import CliRunner

    from glmserve.cli._app import app
    from glmserve.deploy import watch
    from glmserve.errors import ServerNotReady

    monkeypatch.setattr(watch, "DEFAULT_DEADLINE_S", 5.0)
    port = free_port()
    res = CliRunner().invoke(
        app,
        ["launch", "--profile", "flashinfer", "--simulate", "--set", f"server.port={port}",
         "--set", "sim.hang-at=warmup", "--json"],
    )  # fmt: skip
    # main() maps the error to its exit code; in-process the error itself is the verdict
    assert isinstance(res.exception, ServerNotReady) and res.exception.exit_code == 4, res.output
    doc = json.loads(res.stdout[res.stdout.index("{") :])
    assert "overall deadline of 5s (the default; --timeout N changes it" in doc["verdict"]["hint"]


def test_sweep_without_timeout_gets_the_default_deadline(monkeypatch):
    """The sweep's watch goes through the same Watcher: its default deadline applies."""
    from glmserve.deploy import watch
    from glmserve.sweep.backend import LifecycleBackend
    from glmserve.sweep.loop import run_sweep
    from glmserve.sweep.state import SweepOptions, start_sweep

    monkeypatch.setattr(watch, "DEFAULT_DEADLINE_S", 5.0)
    port = free_port()
    opts = SweepOptions(overrides=[f"server.port={port}", "sim.hang-at=warmup"])
    assert opts.timeout_s is None
    sw = start_sweep(["flashinfer"], None, True, opts, [])
    t0 = time.monotonic()
    done = run_sweep(sw, opts, LifecycleBackend(None, True))
    assert time.monotonic() - t0 < 60
    entry = done.entries[0]
    assert entry.status == "stalled"
    assert "overall deadline of 5s (the default" in entry.diagnosis["hint"]
