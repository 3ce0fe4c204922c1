"""Issue 23, simulated end to end: the triton and trtllm_mla_decode profiles in a sweep on the
modelled SM120 box rank as the calibrated cost model says, a tune over Triton's KV splits finds
a different best value at concurrency 1 and at 64, and the backend facts decide what starts
(a ServerArgs refusal on SM90, a first-decode crash on 0.5.23)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.fixtures.cli import GLMSERVE
from tests.fixtures.simulator import free_port

from glmserve.config.profiles import load_profile
from glmserve.simulator import costmodel, options

pytestmark = pytest.mark.slow

SWEPT = ["flashinfer", "flashinfer_gtc", "triton", "trtllm_mla_decode"]
SPEED = 2  # the simulator runs 2x real time; the sweep reports what the client saw
INPUT_LEN, OUTPUT_LEN = 128, 48
# Neither test is about the start-up: its simulated phases take no time (the phases and their
# log lines still run, in order).
NO_STARTUP_WAIT = [
    "--set", "sim.load-seconds=0", "--set", "sim.kv-seconds=0",
    "--set", "sim.graphs-seconds=0", "--set", "sim.warmup-seconds=0",
]  # fmt: skip


def predicted_decode_tok_s(profile: str) -> float:
    """Single-stream decode speed the cost model gives the profile on its own flags."""
    spec = load_profile(profile)
    opts = options.parse([*spec.argv, "--sim-gpu-arch", "sm120"],
                         {"GLMSERVE_PATCHES": ",".join(spec.patches)})  # fmt: skip
    assert opts.crash_kind is None, (profile, opts.crash_kind)
    ctx = INPUT_LEN + OUTPUT_LEN // 2
    return 1.0 / costmodel.decode_step_s(opts.model, opts.shape, 1, ctx)


def test_sweep_on_sm120_ranks_as_the_calibrated_model():
    proc = subprocess.run(
        [*GLMSERVE, "sweep", "--simulate", "--profiles", ",".join(SWEPT),
         "--set", "sim.gpu-arch=sm120", "--set", f"sim.speed={SPEED}",
         "--set", f"server.port={free_port()}", "--bench", "decode",
         "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN), "--num-prompts", "3",
         *NO_STARTUP_WAIT, "--timeout", "90", "--repeat", "1", "--json"],
        capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["profile"]: r for r in json.loads(proc.stdout)["rows"]}
    for name in SWEPT:  # the facts table: all four run on SM120 under 0.5.9
        assert rows[name]["status"] == "ok", rows[name]
    measured = {n: rows[n]["decode_tok_s"] / SPEED for n in SWEPT}
    model = {n: predicted_decode_tok_s(n) for n in SWEPT}
    print("sweep decode tok/s", measured, "model", model)
    assert sorted(SWEPT, key=measured.get) == sorted(SWEPT, key=model.get)
    for n in SWEPT:
        assert measured[n] == pytest.approx(model[n], rel=0.2), (n, measured, model)


def _tune(concurrency: str, tmp_path: Path) -> dict:
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    (cfg / "profiles").mkdir(parents=True, exist_ok=True)
    # long contexts (KV splits matter there), a cheap prefill so the trial is all decode
    (cfg / "profiles" / "tritontune.yaml").write_text(
        "extends: triton\ndescription: kv-split tune base\n"
        "sim:\n  speed: 2\n  prefill-us-per-token: 1\n"
    )
    args = [
        *GLMSERVE, "tune", "--simulate", "--profile", "tritontune",
        "--search", "server.triton-attention-num-kv-splits=8,16,32,64",
        "--objective", "decode_tok_s", "--concurrency", concurrency,
        "--input-len", "4000", "--output-len", "24", "--num-prompts", concurrency,
        "--timeout", "90", "--set", f"server.port={free_port()}", *NO_STARTUP_WAIT, "--json",
    ]  # fmt: skip
    proc = subprocess.run(args, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_tune_kv_splits_best_depends_on_the_load(tmp_path):
    best = {}
    for conc in ("1", "64"):
        data = _tune(conc, tmp_path)
        ok = [t for t in data["trials"] if t["status"] == "ok"]
        assert len(ok) == 4, data["trials"]
        best[conc] = data["best"]["config"]["triton-attention-num-kv-splits"]
        print(conc, {t["config"]["triton-attention-num-kv-splits"]: t["metrics"]["decode_tok_s"]
                     for t in ok})  # fmt: skip
    # the calibrated model: many splits for one long sequence, few for a full batch
    assert best == {"1": "64", "64": "16"}, best


def _simulate(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "glmserve.simulator", *argv, "--sim-speed", "20"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_sm90_refuses_trtllm_mla_decode_at_server_args():
    spec = load_profile("trtllm_mla_decode")
    argv = [*spec.argv, "--sim-gpu-arch", "sm90"]
    argv[argv.index("--port") + 1] = str(free_port())
    proc = _simulate(argv)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.rstrip().endswith(
        "ValueError: TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x). "
        "Please use a different backend."
    )
    assert "Load weight" not in proc.stderr and "server_args=" not in proc.stderr


def test_0523_trtllm_mla_decode_dies_at_the_first_decode_with_the_xqa_line():
    spec = load_profile("trtllm_mla_decode")
    argv = [*spec.argv, "--sim-gpu-arch", "sm120", "--sim-sglang-version", "0.5.23"]
    argv[argv.index("--port") + 1] = str(free_port())
    proc = _simulate(argv)
    assert proc.returncode == -9, proc.stderr[-2000:]  # SIGKILL to itself (a shell shows 137)
    assert (
        "ValueError: multi_ctas_kv_counter_buffer is only supported by the trtllm-gen backend"
        in proc.stderr
    )
