"""End to end through the real sshd fixture: ``glmserve launch --simulate`` on the ssh host,
then ``glmserve bench RUN --mode decode --min-decode-tok-s X`` over the run's ssh forward.
The gate must pass below the simulator's configured single-stream speed and fail just above
it; the measured rate is the server's own (``/sim/trace``) and never above the configured
speed (the simulator is never faster than its cost model, only late on a loaded box:
simulator/engine.py, "Pacing"); the stored result carries the run's metadata."""

from __future__ import annotations

import json

import httpx
import pytest
from tests.fixtures.cli import run_glmserve as cli

from glmserve.bench import groundtruth as gt
from glmserve.remote.endpoint import open_endpoint
from glmserve.remote.transport import free_local_port
from glmserve.store import RunStore

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


def configured_decode_tok_s(run_id: str) -> float:
    """The simulator's single-stream speed: 1 / (model step time x time scale)."""
    with open_endpoint(run_id) as url:
        cfg = httpx.get(url + "/sim/config", timeout=10).json()
    return 1.0 / (cfg["single_stream_step_s"] * cfg["time_scale"])


def test_decode_gate_passes_below_and_fails_above_configured_speed(ssh_host, stop_left_remote_runs):
    port = free_local_port()
    res = cli("launch", "--profile", "trtllm_mla", "--host", ssh_host, "--simulate",
              "--set", f"server.port={port}", "--set", "sim.gpu-arch=sm100",
              "--set", "sim.speed=2", "--poll", "0.3")  # fmt: skip
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.split()[0]
    speed = configured_decode_tok_s(run_id)
    assert speed > 20

    common = ("bench", run_id, "--mode", "decode", "--num-prompts", "3", "--output-len", "48")
    # 0.8: a loaded 2-core box makes the simulator late by a few % (never early)
    ok = cli(*common, "--min-decode-tok-s", f"{0.8 * speed:.2f}", "--json")
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    with open_endpoint(run_id) as url:
        trace = httpx.get(url + "/sim/trace", timeout=30).json()
    truth = gt.truth_decode_tok_s(trace, data["levels"][0]["window_start"])
    assert truth and data["decode_tok_s"] == pytest.approx(truth, rel=0.05)
    assert data["decode_tok_s"] <= speed * 1.02
    assert data["gates"][0]["ok"] is True
    meta = data["meta"]
    assert meta["run_id"] == run_id and meta["profile"] == "trtllm_mla"
    assert meta["sglang_version"] and meta["glmserve_version"]
    assert any("trtllm_mla" in str(a) for a in meta["argv"] or [])

    bad = cli(*common, "--min-decode-tok-s", f"{1.1 * speed:.2f}")
    assert bad.returncode == 1, bad.stderr
    last = bad.stderr.strip().splitlines()[-1]
    assert "decode tok/s" in last and "below the minimum" in last

    with RunStore.open() as store:
        rows = store.list_bench_results(run_id=run_id)
    assert len(rows) == 2  # both results stored against the run, the failed one too
    assert all(r["meta"]["profile"] == "trtllm_mla" for r in rows)
