"""End to end through the real sshd fixture: ``glmserve launch --simulate`` on the ssh host,
then ``glmserve bench RUN --mode decode --min-decode-tok-s X`` over the run's ssh forward.
The gate must pass just below the simulator's configured single-stream speed and fail just
above it; the stored result carries the run's metadata."""

from __future__ import annotations

import json

import httpx
import pytest
from tests.fixtures.cli import run_glmserve as cli

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
    ok = cli(*common, "--min-decode-tok-s", f"{0.9 * speed:.2f}", "--json")
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["decode_tok_s"] == pytest.approx(speed, rel=0.05)
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
