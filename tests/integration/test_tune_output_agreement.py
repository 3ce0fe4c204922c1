"""``glmserve tune --simulate --probe``: the untuned profile's outputs are the reference; the
searched value that garbles the output (trtllm_mla with the simulated FP8-KV fault, faster than
flashinfer_gtc) has its trials excluded as WRONG_OUTPUT with the reason, and is never best."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.fixtures.cli import GLMSERVE
from tests.fixtures.simulator import free_port

pytestmark = pytest.mark.slow

PROFILE = """\
extends: flashinfer_gtc
description: output-agreement tune base
sim:
  gpu-arch: sm100
  speed: 10
  output-fault: garble@trtllm_mla/fp8_e4m3
"""


def test_garbling_value_is_excluded_with_the_reason(tmp_path):
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    (cfg / "profiles").mkdir(parents=True, exist_ok=True)
    (cfg / "profiles" / "agreebase.yaml").write_text(PROFILE)
    proc = subprocess.run(
        [*GLMSERVE, "tune", "--simulate", "--profile", "agreebase",
         "--search", "server.attention-backend=flashinfer,trtllm_mla",
         "--concurrency", "1", "--output-len", "16", "--num-prompts", "2", "--probe",
         "--repeat", "1", "--timeout", "60", "--set", f"server.port={free_port()}", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["reference"]["outputs"] and data["reference"]["sha256"]
    by = {t["config"]["attention-backend"]: t for t in data["trials"]}
    bad, good = by["trtllm_mla"], by["flashinfer"]
    assert bad["status"] == "WRONG_OUTPUT"
    assert "WRONG_OUTPUT vs agreebase (untuned)" in bad["error"]
    assert "excess NLL" in bad["error"]
    assert bad["output"]["nll_method"] == "teacher-forced"
    assert good["status"] == "ok" and good["output"]["verdict"] == "agrees"
    assert data["best"]["config"]["attention-backend"] == "flashinfer"
    assert "WRONG_OUTPUT" in proc.stderr  # said while it ran
