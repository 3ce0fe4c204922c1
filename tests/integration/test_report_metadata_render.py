"""Issue 14 #5: the report rendered by a real headless Chromium shows the metadata block
(result ids, bench settings, SGLang version, host, GPUs, date), the flag diff between the
compared profiles, and names a result whose settings differ instead of a speedup."""

from __future__ import annotations

import copy

import pytest
from tests.fixtures.report import CHROMIUM, Tables, chromium, three_profile_sweep

from glmserve.cli import main
from glmserve.sweep.state import save_sweep

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")

BASE_ARGV = ["python3", "-u", "-m", "sglang.launch_server", "--model-path", "/m/GLM-5",
             "--tp-size", "8", "--attention-backend", "flashinfer",
             "--kv-cache-dtype", "auto"]  # fmt: skip
GPUS = ["NVIDIA H200, 143771 MiB, 570.86"] * 8
SETTINGS = {"mode": "decode", "api": "native", "input_len": 128, "output_len": 256,
            "num_prompts": 5, "warmup": 1, "seed": 0}  # fmt: skip


def _with_meta(bench: list[dict], argv: list[str], speed: float) -> list[dict]:
    out = copy.deepcopy(bench)
    for b in out:
        b["settings"] = {**SETTINGS, "mode": b["mode"], "concurrency": [1, 4, 16]}
        b["server"] = {"version": "0.5.9", "sim_speed": speed}
        b["meta"] = {"argv": argv, "sglang_version": "0.5.9", "host": "gpu-7",
                     "gpus": GPUS, "finished_at": 1764583200.0, "run_id": "r1"}  # fmt: skip
    return out


@pytest.mark.slow
def test_rendered_report_shows_metadata_and_flag_diff(tmp_path):
    sw = three_profile_sweep()
    trt = [*BASE_ARGV[:-4], "--attention-backend", "cutlass_mla", "--kv-cache-dtype", "fp8_e4m3",
           "--enable-dp-attention"]  # fmt: skip
    sw.entries[0].bench = _with_meta(sw.entries[0].bench, BASE_ARGV, 20.0)
    sw.entries[2].bench = _with_meta(sw.entries[2].bench, trt, 10.0)
    save_sweep(sw)
    html = tmp_path / "report.html"
    rc = main(["report", sw.sweep_id, "--html", str(html)])
    assert rc == 0
    proc = chromium(tmp_path, "--dump-dom", html.as_uri())
    assert proc.returncode == 0, proc.stderr[-1500:]
    dom = Tables()
    dom.feed(proc.stdout)
    assert "metadata" in dom.section

    meta = dom.tables["metadata"]
    head, rows = meta[0], meta[1:]
    for col in ("series", "result", "date", "settings", "sglang", "host", "gpus", "simulated"):
        assert col in head
    by = [dict(zip(head, r, strict=True)) for r in rows]
    first = next(r for r in by if r["series"] == "flashinfer_gtc")
    assert first["sglang"] == "0.5.9" and first["host"] == "gpu-7"
    assert first["gpus"] == "8 x NVIDIA H200"
    assert first["date"] == "2025-12-01 10:00 UTC"
    assert "input=128" in first["settings"] and "output=256" in first["settings"]
    assert first["simulated"] == "sim-speed 20"

    diff = dom.tables["flag-diff"]
    assert diff[0][0] == "flag"
    a, b = diff[0].index("flashinfer_gtc"), diff[0].index("cutlass_mla")
    # (the crashed trtllm_mla has no result: its column is its profile as it renders now)
    flags = {r[0]: [r[a], r[b]] for r in diff[1:] if r[a] != r[b]}
    assert flags == {
        "--attention-backend": ["flashinfer", "cutlass_mla"],
        "--enable-dp-attention": ["(absent)", "(set)"],
        "--kv-cache-dtype": ["auto", "fp8_e4m3"],
        # no run records: env and patches of the profiles as they render now, which differ
        "env GLMSERVE_PATCHES": ["flashinfer_mla_gather_cast", "(absent)"],
        "patches": ["flashinfer_mla_gather_cast", "(none)"],
    }
    # the sim-speed-10 profile is named as incomparable, and gets no speedup
    assert any("cutlass_mla" in li and "sim_speed 10 vs 20" in li for li in dom.incomparable)
    summary = {r[0]: r for r in dom.tables["summary"][1:]}
    assert "n/c" in summary["cutlass_mla"][-2]
