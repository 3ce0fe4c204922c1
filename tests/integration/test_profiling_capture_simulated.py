"""``glmserve profile RUN`` against the simulator: /start_profile with num_steps, load driven
while it records, per-rank traces fetched, parsed and turned into findings."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.fixtures.cli import GLMSERVE
from tests.fixtures.simulator import free_port


def glmserve(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [*GLMSERVE, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def launched():
    started: list[str] = []

    def launch(profile: str) -> str:
        # sm100: cutlass_mla's decode kernel exists for SM100-class GPUs only
        res = glmserve("launch", "--simulate", "--profile", profile, "--set",
                       f"server.port={free_port()}", "--set", "sim.speed=20",
                       "--set", "sim.gpu-arch=sm100")  # fmt: skip
        assert res.returncode == 0, res.stderr[-2000:]
        run_id = res.stdout.split()[0]
        started.append(run_id)
        return run_id

    yield launch
    for run_id in started:
        glmserve("stop", run_id)


@pytest.mark.slow
@pytest.mark.parametrize(
    "profile, load, cast_expected",
    [("flashinfer", "decode", True), ("cutlass_mla", "concurrency:4", False)],
)
def test_profile_finds_the_cast_only_where_the_backend_casts(
    launched, profile, load, cast_expected
):
    run_id = launched(profile)
    res = glmserve("profile", run_id, "--steps", "3", "--load", load, "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    analysis = json.loads(res.stdout)
    assert [r["rank"] for r in analysis["ranks"]] == list(range(8))  # tp-size 8: one per rank
    for rank in analysis["ranks"]:
        assert rank["has_gpu"] and rank["kernels"] and rank["window_us"] > 0
        assert rank["steps"] == 3  # no ProfilerStep spans: the requested num_steps
        shares = [k["share"] for k in rank["kernels"]]
        assert shares == sorted(shares, reverse=True)
    kinds = {f["kind"]: f for f in analysis["findings"]}
    if cast_expected:
        top = analysis["ranks"][0]["kernels"][0]
        assert top["kind"] == "cast" and top["short_name"] == "unrolled_elementwise_kernel"
        assert kinds["fp8_kv_cast"]["message"].startswith("aten::copy_ (fp8 -> ")
        assert f"{top['share']:.0%} of decode" in kinds["fp8_kv_cast"]["message"]
    else:
        assert "fp8_kv_cast" not in kinds
        assert not any(k["kind"] == "cast" for k in analysis["ranks"][0]["kernels"])
    fetched = list((Path(os.environ["GLMSERVE_HOME"]) / "profiles" / run_id).rglob("*-TP-*"))
    assert len(fetched) == 8


@pytest.mark.slow
def test_profile_text_output_bad_load_and_report_of_the_run(launched, tmp_path):
    run_id = launched("flashinfer")
    bad = glmserve("profile", run_id, "--load", "burst")
    assert bad.returncode == 2 and "--load: expected decode or concurrency:C" in bad.stderr
    res = glmserve("profile", run_id, "--steps", "2")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "rank 0:" in res.stdout and "top GPU kernels" in res.stdout
    assert "rank 7:" in res.stdout  # other ranks get one line each
    assert "[high] aten::copy_ (fp8 -> " in res.stdout
    html = tmp_path / "run.html"
    rep = glmserve("report", run_id, "--html", str(html))
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert 'class="findings"' in html.read_text() and "aten::copy_ (fp8 -&gt; " in html.read_text()
