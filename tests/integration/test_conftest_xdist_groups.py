"""tests/conftest.py's xdist set-up, as the README's test command runs it (two workers).

The Slurm modules must share one worker (one cluster start per run): the group marker has to
be on the items before pytest-xdist turns it into the ``@slurm`` nodeid suffix it schedules
by. Once it was added after, and no group ever took effect.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_slurm_items_carry_the_group_xdist_schedules_by():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
         "--setup-plan", "-p", "no:randomly", "-p", "no:cacheprovider",
         "tests/integration/test_slurm_fixture.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "test_slurm_fixture.py::test_a_job_runs_on_the_node@slurm" in proc.stdout


def test_each_worker_reads_configs_whose_base_profile_has_its_own_port():
    from glmserve.config.profiles import load_profile

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        pytest.skip("not distributed: the shipped configs/ is read")
    assert load_profile("glm5-nvfp4-tp8").port == 8000 + 100 * (int(worker[2:]) + 1)
    assert load_profile("trtllm_mla").port == 8000 + 100 * (int(worker[2:]) + 1)
    assert Path(os.environ["GLMSERVE_CONFIGS"]).name == "configs"
