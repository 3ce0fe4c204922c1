"""``glmserve sweep --simulate --probe``: a faster profile whose simulated output is garbled
is WRONG_OUTPUT, gets no speedup and is not the winner; a slightly drifting one (the Triton FP8
case) is within the threshold and not flagged."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.fixtures.cli import GLMSERVE
from tests.fixtures.simulator import free_port

from glmserve.bench.agreement import WRONG_OUTPUT

# trtllm_mla reads the FP8 KV natively (no cast): faster than flashinfer_gtc in the cost model.
# On SM100 it starts; the fault makes its output garbled (the rtx6kpro FP8-KV report).
FAST_GARBLED = """\
extends: trtllm_mla
description: faster, but its FP8 KV output is garbled (simulated)
sim:
  gpu-arch: sm100
  output-fault: garble@trtllm_mla/fp8_e4m3
"""
DRIFTING = """\
extends: flashinfer_gtc
description: flashinfer_gtc whose attention drifts slightly (simulated FP8 softmax weights)
sim:
  output-fault: drift=0.02
"""


def user_profiles() -> None:
    d = Path(os.environ["GLMSERVE_CONFIG_DIR"]) / "profiles"
    d.mkdir(parents=True, exist_ok=True)
    (d / "fast_garbled.yaml").write_text(FAST_GARBLED)
    (d / "gtc_drift.yaml").write_text(DRIFTING)


def sweep(*args: str) -> subprocess.CompletedProcess[str]:
    port = free_port()
    return subprocess.run(
        [*GLMSERVE, "sweep", "--simulate", "--set", f"server.port={port}",
         "--set", "sim.speed=10", "--output-len", "24", "--num-prompts", "2",
         "--timeout", "60", "--json", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.slow
def test_garbled_faster_profile_is_wrong_output_and_not_the_winner():
    user_profiles()
    # a known run-to-run spread, the same run factors on every server: repeats (3, the
    # default) give intervals, and the two equal-speed profiles tie
    proc = sweep(
        "--profiles", "flashinfer_gtc,fast_garbled,gtc_drift", "--probe",
        "--set", "sim.run-variation=0.04", "--set", "sim.variation-seed=3",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    rows = {r["profile"]: r for r in data["rows"]}
    gtc, garbled, drift = rows["flashinfer_gtc"], rows["fast_garbled"], rows["gtc_drift"]
    # it is faster: speed alone would have made it the winner
    assert garbled["decode_tok_s"] > 1.2 * gtc["decode_tok_s"], (gtc, garbled)
    assert garbled["status"] == WRONG_OUTPUT
    assert garbled["speedup"] is None
    assert garbled["output"]["verdict"] == WRONG_OUTPUT
    assert garbled["output"]["nll_method"] == "teacher-forced"
    assert "excess NLL" in garbled["diagnosis"]
    assert gtc["output"] == {"verdict": "reference"}  # the first that started
    assert drift["status"] == "ok" and drift["output"]["verdict"] == "agrees"
    assert 0 < drift["output"]["excess_nll"] < 0.05
    assert data["winner"] in ("flashinfer_gtc", "gtc_drift")
    assert data["winner"] != "fast_garbled"
    other = "gtc_drift" if data["winner"] == "flashinfer_gtc" else "flashinfer_gtc"
    assert rows[other]["tie"] is True and not garbled["tie"]
    assert all(len(b["repeats"]) == 3 for e in data["entries"] for b in e["bench"])
    lo, hi = gtc["decode_ci"]
    assert lo <= gtc["decode_tok_s"] <= hi and lo < hi
    md = (Path(os.environ["GLMSERVE_HOME"]) / "sweeps" / data["sweep_id"] / "sweep.md").read_text()
    assert f"| fast_garbled | {WRONG_OUTPUT} |" in md
    assert "## Output agreement" in md


@pytest.mark.slow
def test_reference_named_later_judges_earlier_profiles_from_stored_outputs():
    user_profiles()
    proc = sweep(
        "--profiles", "fast_garbled,flashinfer_gtc", "--reference", "flashinfer_gtc",
        "--repeat", "1",  # about the reference, not about repeats
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    rows = {r["profile"]: r for r in data["rows"]}
    assert rows["fast_garbled"]["status"] == WRONG_OUTPUT
    assert rows["fast_garbled"]["output"]["nll_method"] == "agreed-prefix"
    assert data["winner"] == "flashinfer_gtc"
    # the garbled profile ran first, yet is not the speedup baseline either
    assert rows["flashinfer_gtc"]["speedup"] == pytest.approx(1.0)


def test_reference_must_be_a_profile_of_the_sweep():
    proc = sweep("--profiles", "flashinfer_gtc", "--reference", "nope")
    assert proc.returncode == 2
    assert "--reference nope: not one of --profiles" in proc.stderr
