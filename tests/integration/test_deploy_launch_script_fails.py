"""A launch script that fails before SGLang starts names the failure (issue 20 #9).

A missing venv (``source .../bin/activate`` under ``set -euo pipefail``) or a typo in the
host's ``python:`` (``exec pythn3 ...``) makes bash print one line to server.log and exit:
that line is the root cause, not "ended without an error line, exit status not known".
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from glmserve.config import profiles
from glmserve.deploy.deployment import Deployment
from glmserve.deploy.plan import plan_spec
from glmserve.remote.transport import free_local_port
from glmserve.store import RunStore

pytestmark = pytest.mark.slow


def _launch_and_watch(**change: str) -> tuple[object, str]:
    # The real launcher (no simulator pre-check): the script is what a GPU host would run.
    spec = profiles.load_profile("trtllm_mla", [f"server.port={free_local_port()}"])
    spec = replace(spec, **change)
    store = RunStore.open()
    dep = Deployment.launch(plan_spec(spec), store=store)
    try:
        verdict = dep.watch(poll_s=0.1, timeout_s=60)
    finally:
        dep.stop(timeout=5)
    run = store.get_run(dep.runs[0].run_id)
    return verdict, run


@pytest.mark.parametrize(
    ("change", "quoted"),
    [
        (
            {"venv": "/nonexistent/glmserve-venv"},
            "/nonexistent/glmserve-venv/bin/activate: No such",
        ),
        ({"python": "pythn3-typo", "venv": None}, "pythn3-typo: not found"),
    ],
    ids=["missing-venv", "python-typo"],
)
def test_a_failed_launch_script_quotes_bashs_line(change, quoted):
    verdict, run = _launch_and_watch(**change)
    d = verdict.results[0].diagnosis
    assert verdict.state == "CRASHED", (verdict.state, d.hint)
    assert d.category is not None and d.category.value == "LAUNCH_FAILED"
    assert quoted in (d.root_cause or "")
    assert "glmserve check" in d.hint and "--simulate" in d.hint
    # what the store keeps (status, runs show it)
    assert run.state == "CRASHED" and quoted in (run.root_cause or "")
    log = (Path(run.run_dir) / "server.log").read_text()
    assert quoted in log
