"""The installed ``glmserve`` console script on real inputs (a corpus log on stdin, a seed launch
script): e2e, since it runs whatever ``glmserve`` is on PATH (moved here from the unit tier,
which needs nothing installed but ``.[test]``)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
LOGS = DATA / "logs"
SEED = str(DATA / "scripts" / "run_tp8_trtllm_mla.sh")
pytestmark = pytest.mark.skipif(
    shutil.which("glmserve") is None, reason="glmserve console script not installed"
)


def test_validate_names_the_script_line_and_has_examples() -> None:
    proc = subprocess.run(
        ["glmserve", "validate", "--sglang-version", "0.5.8", SEED],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert ":14: error:" in proc.stdout
    help_proc = subprocess.run(
        ["glmserve", "validate", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert help_proc.returncode == 0 and "Examples" in help_proc.stdout


def test_console_script_on_a_corpus_log() -> None:
    """The installed executable end to end, stdin included."""
    log = LOGS / "nccl_unhandled_system_error_4289.log"
    proc = subprocess.run(
        ["glmserve", "diagnose", "-", "--json"],
        input=log.read_bytes(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr
    assert json.loads(proc.stdout)["category"] == "NCCL"
