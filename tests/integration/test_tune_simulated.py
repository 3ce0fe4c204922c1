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
  # a costlier eager step than the default 6 ms: the graph-size effect stands clear of the
  # noise of a loaded 2-core box
  no-cuda-graph-ms: 20
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
    # one bench per trial: the grid is about which config wins (by a 15% margin), not about
    # noise; the budgeted tune below keeps the default repeats, --write-profile needs them
    grid = tune("--budget", str(GRID_TRIALS), "--repeat", "1")
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
    # a load-only change reuses the server: one run per config, both loads benched on it
    runs: dict[str, set[str]] = {}
    for t in g["trials"]:
        runs.setdefault(json.dumps(t["config"], sort_keys=True), set()).add(t["run_id"])
    assert all(len(r) == 1 and None not in r for r in runs.values()), runs
    assert len({r for rs in runs.values() for r in rs}) == GRID_TRIALS // 2
    # both hosts served, at the same time
    spans = job_spans(g)
    assert set(spans) == {"la", "lb"}
    assert any(a0 < b1 and b0 < a1 for a0, a1 in spans["la"] for b0, b1 in spans["lb"])
    best = g["best"]["key"]
    summary = [(t["config"], t["concurrency"], t["status"], t["diagnosis"]) for t in g["trials"]]
    assert best == "mem-fraction-static=0.9,cuda-graph-max-bs=32,max-running-requests=16@c16", (
        summary
    )
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
    # the same release for both: without one, render spells the newest release in range
    parent = subprocess.run(
        [*render, "tunebase", "--sglang-version", "0.5.9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    new, old = rendered.stdout.split(), parent.stdout.split()
    diff = {(a, b) for a, b in zip(old, new, strict=True) if a != b}
    assert diff == {("4", "32"), ("4", "16")}


def test_ctrl_c_stops_every_server_then_resume_finishes_and_keeps_what_was_done(
    two_local_hosts,
):
    import signal
    import time

    from glmserve.remote.hosts import get_host
    from glmserve.remote.process import probe_group
    from glmserve.remote.transport import LocalTransport
    from glmserve.store import RunStore

    home = Path(os.environ["GLMSERVE_HOME"])
    args = [
        *GLMSERVE, "tune", "--simulate", "--profile", "tunebase",
        "--search", "server.max-running-requests=4,8,16",
        # fp8_e3m4 is no --kv-cache-dtype choice of 0.5.9: skipped before anything launches
        "--search", "server.kv-cache-dtype=auto,fp8_e3m4",
        "--concurrency", "8", "--output-len", "32", "--num-prompts", "32",
        "--hosts", "la,lb", "--timeout", "60", "--sglang-version", "0.5.9", "--repeat", "1",
        "--set", f"server.port={_port()}", "--json",
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    data: dict = {"trials": []}
    while time.monotonic() < deadline and proc.poll() is None:
        files = sorted((home / "tunes").glob("*/tune.json")) if (home / "tunes").is_dir() else []
        data = json.loads(files[0].read_text()) if files else {"trials": []}
        if any(t["status"] == "ok" for t in data["trials"]) and any(
            t["status"] == "running" and t["run_id"] for t in data["trials"]
        ):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    tune_id = data["tune_id"]
    saved = json.loads((home / "tunes" / tune_id / "tune.json").read_text())
    assert saved["status"] == "interrupted"
    done_before = {t["config"]["max-running-requests"] + t["config"]["kv-cache-dtype"]: t
                   for t in saved["trials"] if t["status"] == "ok"}  # fmt: skip
    assert done_before
    for run in RunStore.open().list_runs():  # every server the tune started is gone
        if run.pgid is not None:  # None: it had exited before launch could read its group
            assert probe_group(LocalTransport(get_host("local")), run.pgid).live_pids == []
    # a server stopped by Ctrl-C is no result: nothing the interrupt touched reads "crashed"
    bad = [
        (t["status"], t["error"], t["host"])
        for t in saved["trials"]
        if t["status"] in ("crashed", "failed", "stalled")
    ]
    assert not bad

    again = subprocess.run(
        [*GLMSERVE, "tune", "--resume", tune_id, "--json"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    d = json.loads(again.stdout)
    assert d["status"] == "done" and len(d["trials"]) == 6
    by = {
        t["config"]["max-running-requests"] + t["config"]["kv-cache-dtype"]: t for t in d["trials"]
    }
    for key, t in done_before.items():  # kept, not run again
        assert by[key]["ended_at"] == t["ended_at"]
    for mrr in ("4", "8", "16"):
        assert by[mrr + "auto"]["status"] == "ok"
        skipped = by[mrr + "fp8_e3m4"]
        assert skipped["status"] == "skipped" and skipped["run_id"] is None
        assert "invalid choice: 'fp8_e3m4'" in skipped["error"]


def test_resume_after_kill_9_stops_the_server_the_killed_tune_left_running():
    """SIGKILL mid-trial leaves that trial's server up; ``--resume`` stops the run the trial
    recorded (verified process group) before running the trial again."""
    import signal
    import time

    from glmserve.remote.hosts import get_host
    from glmserve.remote.process import probe_group
    from glmserve.remote.transport import LocalTransport
    from glmserve.store import RunStore

    def alive(pgid: int) -> bool:
        return bool(probe_group(LocalTransport(get_host("local")), pgid).live_pids)

    home = Path(os.environ["GLMSERVE_HOME"])
    args = [
        *GLMSERVE,
        "tune",
        "--simulate",
        "--profile",
        "flashinfer",
        "--set",
        "sim.speed=10",
        "--search",
        "server.max-running-requests=8",
        "--concurrency",
        "2",
        "--output-len",
        "100",
        "--num-prompts",
        "6",
        "--timeout",
        "60",
        "--repeat",
        "1",
        "--json",
    ]  # fmt: skip  (a bench of a few seconds: long enough to be killed in)
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and target is None:
            for path in sorted(home.glob("tunes/*/tune.json")):
                try:
                    trials = json.loads(path.read_text())["trials"]
                except (json.JSONDecodeError, OSError):
                    continue
                running = [t for t in trials if t["status"] == "running" and t["run_id"]]
                if running:
                    with RunStore.open() as store:
                        run = store.get_run(running[0]["run_id"])
                    if run.state == "READY" and run.pgid:  # the bench comes next
                        target = (path.parent.name, run.run_id, run.pgid)
            time.sleep(0.02)
        assert target, "no READY trial server seen"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    tune_id, run_id, pgid = target
    assert alive(pgid), "the server should outlive a SIGKILLed tune"
    again = subprocess.run([*GLMSERVE, "tune", "--resume", tune_id, "--json"],
                           capture_output=True, text=True, timeout=240)  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"local: stopped run {run_id}, left running by the earlier attempt" in again.stderr
    assert not alive(pgid)
    (trial,) = json.loads(again.stdout)["trials"]
    assert trial["status"] == "ok" and trial["run_id"] != run_id
