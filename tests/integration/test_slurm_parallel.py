"""``sweep`` and ``tune`` with ``--max-parallel 2`` on the real single-node Slurm of
tests/fixtures/slurm.py (2 CPUs, OverSubscribe=FORCE:4: two jobs fit at once): each profile /
config is its own job, two run at once (their RUNNING..stopped spans overlap), each worker
serves on its own port, and the queue wait is reported apart from the trial."""

from __future__ import annotations

import json
import subprocess

import pytest
from tests.fixtures.cli import GLMSERVE
from tests.fixtures.simulator import free_ports

from glmserve.store import RunStore
from glmserve.sweep.state import sweep_dir

pytestmark = pytest.mark.slow


def _job_spans(run_ids: list[str]) -> dict[str, tuple[str, float, float]]:
    """Per run: (Slurm job id, when glmserve saw it RUNNING, when it was stopped)."""
    out = {}
    with RunStore.open() as store:
        for rid in run_ids:
            run = store.get_run(rid)
            ev = store.list_events(rid)
            start = min(e["ts"] for e in ev if e["state"] == "RUNNING")
            end = max(e["ts"] for e in ev)
            out[rid] = (run.meta["slurm"]["job_id"], start, end)
    return out


def _overlap(spans: list[tuple[str, float, float]]) -> bool:
    return max(s for _j, s, _e in spans) < min(e for _j, _s, e in spans)


def test_sweep_max_parallel_2_runs_two_jobs_at_once(slurm, cluster_host):
    port = free_ports(2)
    proc = subprocess.run(
        [*GLMSERVE, "sweep", "--simulate", "--host", "cluster", "--profiles",
         "trtllm_mla,flashinfer", "--set", f"server.port={port}", "--set", "sim.gpu-arch=sm100",
         "--set", "sim.speed=10", "--output-len", "24", "--num-prompts", "4", "--repeat", "1",
         "--timeout", "60", "--max-parallel", "2", "--json"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)["rows"]
    assert [r["status"] for r in rows] == ["ok", "ok"], rows
    spans = _job_spans([r["run_id"] for r in rows])
    assert len({j for j, _s, _e in spans.values()}) == 2
    assert _overlap(list(spans.values())), spans
    with RunStore.open() as store:
        ports = {store.get_run(r["run_id"]).port for r in rows}
    assert ports == {port, port + 1}  # slot k serves on server.port + k
    sweep = json.loads((sweep_dir(json.loads(proc.stdout)["sweep_id"]) / "sweep.json").read_text())
    assert all(isinstance(e["queued_s"], float | int) for e in sweep["entries"]), sweep
    assert [r["queued_s"] for r in rows] == [e["queued_s"] for e in sweep["entries"]]


def test_max_parallel_is_refused_off_slurm(tmp_path):
    proc = subprocess.run(
        [*GLMSERVE, "sweep", "--simulate", "--profiles", "flashinfer", "--max-parallel", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "--max-parallel" in proc.stderr, proc.stderr
    assert "sw-" not in proc.stderr  # refused before a sweep was created
    tune = subprocess.run(
        [*GLMSERVE, "tune", "--simulate", "--profile", "trtllm_mla",
         "--search", "server.max-running-requests=4,16", "--max-parallel", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert tune.returncode == 2 and "--max-parallel 2" in tune.stderr, tune.stderr


def test_tune_max_parallel_2_runs_two_jobs_at_once(slurm, cluster_host):
    proc = subprocess.run(
        [*GLMSERVE, "tune", "--simulate", "--profile", "trtllm_mla",
         "--search", "server.max-running-requests=4,16", "--concurrency", "4",
         "--output-len", "24", "--num-prompts", "8", "--repeat", "1", "--hosts", "cluster",
         "--max-parallel", "2", "--timeout", "60", "--set", "sim.gpu-arch=sm100",
         "--set", "sim.speed=10", "--set", f"server.port={free_ports(2)}", "--json"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    trials = data["trials"]
    assert [t["status"] for t in trials] == ["ok", "ok"], trials
    spans = _job_spans([t["run_id"] for t in trials])
    assert len({j for j, _s, _e in spans.values()}) == 2
    assert _overlap(list(spans.values())), spans
    assert all(t["queued_s"] is not None for t in trials)
