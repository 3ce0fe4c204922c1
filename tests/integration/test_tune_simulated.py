"""``glmserve tune --simulate`` end to end on two local simulated hosts (no ssh): the real
console script, real simulator servers, the cost model's responses to the searched flags.

The space: mem-fraction-static 0.9 | 0.97 (0.97 leaves less than the activations and graph
buffers need: CUDA OOM at start-up), cuda-graph-max-bs 4 | 32 (a batch of 16 runs eagerly at
4), max-running-requests 4 | 16 (4 queues a load of 16), at concurrency 4 and 16.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.fixtures.cli import GLMSERVE

pytestmark = pytest.mark.slow

PROFILE = """\
extends: trtllm_mla
description: tune test base (graphs on, small caps)
server:
  disable-cuda-graph: false
  cuda-graph-max-bs: 4
  max-running-requests: 4
  mem-fraction-static: 0.9
sim:
  gpu-arch: sm100
  speed: 10
"""
SEARCH = [
    "--search", "server.mem-fraction-static=0.9,0.97",
    "--search", "server.cuda-graph-max-bs=4,32",
    "--search", "server.max-running-requests=4,16",
]  # fmt: skip
GRID_TRIALS = 2 * 2 * 2 * 2  # configs x loads


@pytest.fixture
def two_local_hosts(tmp_path: Path) -> list[str]:
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    (cfg / "profiles").mkdir(parents=True, exist_ok=True)
    (cfg / "profiles" / "tunebase.yaml").write_text(PROFILE)
    (cfg / "hosts.yaml").write_text(
        f"hosts:\n  la:\n    workdir: {tmp_path / 'a'}\n  lb:\n    workdir: {tmp_path / 'b'}\n"
    )
    return ["la", "lb"]


def tune(*extra: str) -> subprocess.CompletedProcess:
    args = [
        *GLMSERVE, "tune", "--simulate", "--profile", "tunebase", *SEARCH,
        "--concurrency", "4,16", "--output-len", "32", "--num-prompts", "64",
        "--slo", "ttft_p99_ms=1000,tpot_p99_ms=100", "--hosts", "la,lb", "--timeout", "60",
        "--set", f"server.port={_port()}", "--json", *extra,
    ]  # fmt: skip
    return subprocess.run(args, capture_output=True, text=True, timeout=240)


def _port() -> int:
    from tests.fixtures.simulator import free_port

    return free_port()


def job_spans(data: dict) -> dict[str, list[tuple[float, float]]]:
    """Per host, the (start, end) of each config it served (its trials run back to back)."""
    by: dict[tuple[str, str], list[dict]] = {}
    for t in data["trials"]:
        key = ",".join(f"{k}={v}" for k, v in t["config"].items())
        by.setdefault((t["host"], key), []).append(t)
    spans: dict[str, list[tuple[float, float]]] = {}
    for (host, _), ts in by.items():
        spans.setdefault(host, []).append(
            (min(t["started_at"] for t in ts), max(t["ended_at"] for t in ts))
        )
    return spans


def best_of_others(data: dict, best_key: str) -> float:
    """The best feasible objective of every *other* config (to show the winner is clear)."""
    best_cfg = best_key.split("@")[0]
    vals = [
        t["metrics"]["output_tok_s"]
        for t in data["trials"]
        if t["status"] == "ok"
        and t["metrics"]["meets_slo"]
        and ",".join(f"{k}={v}" for k, v in t["config"].items()) != best_cfg
    ]
    return max(vals)


def test_budgeted_search_finds_the_grid_best_in_fewer_trials_ooms_recorded_profile_written(
    two_local_hosts,
):
    grid = tune("--budget", str(GRID_TRIALS))
    assert grid.returncode == 0, grid.stderr[-3000:]
    g = json.loads(grid.stdout)
    assert g["strategy"] == "grid" and g["status"] == "done"
    assert len(g["trials"]) == GRID_TRIALS
    # the OOM configs are failed trials with their diagnosis; the tune went on and finished
    oom = [t for t in g["trials"] if t["config"]["mem-fraction-static"] == "0.97"]
    assert len(oom) == GRID_TRIALS // 2
    for t in oom:
        assert t["status"] == "crashed", t
        assert t["diagnosis"]["category"] == "OOM", t["diagnosis"]
    # both hosts served, at the same time
    spans = job_spans(g)
    assert set(spans) == {"la", "lb"}
    assert any(a0 < b1 and b0 < a1 for a0, a1 in spans["la"] for b0, b1 in spans["lb"])
    best = g["best"]["key"]
    assert best == "mem-fraction-static=0.9,cuda-graph-max-bs=32,max-running-requests=16@c16"
    assert g["best"]["metrics"]["output_tok_s"] > 1.15 * best_of_others(g, best)
    assert best in g["pareto"]

    small = tune("--budget", "12", "--write-profile", "tuned", "--sglang-version", "0.5.9")
    assert small.returncode == 0, small.stderr[-3000:]
    s = json.loads(small.stdout)
    assert s["strategy"] == "coordinate"
    assert len(s["trials"]) <= 12 < GRID_TRIALS
    assert s["best"]["key"] == best

    # --write-profile: extends the original, sets only the tuned keys that changed
    path = Path(os.environ["GLMSERVE_CONFIG_DIR"]) / "profiles" / "tuned.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["extends"] == "tunebase"
    assert doc["server"] == {"cuda-graph-max-bs": 32, "max-running-requests": 16}
    render = [*GLMSERVE, "render", "--format", "argv", "--profile"]
    rendered = subprocess.run(
        [*render, "tuned", "--sglang-version", "0.5.9"], capture_output=True, text=True, timeout=60
    )
    assert rendered.returncode == 0, rendered.stderr
    parent = subprocess.run([*render, "tunebase"], capture_output=True, text=True, timeout=60)
    new, old = rendered.stdout.split(), parent.stdout.split()
    diff = {(a, b) for a, b in zip(old, new, strict=True) if a != b}
    assert diff == {("4", "32"), ("4", "16")}
