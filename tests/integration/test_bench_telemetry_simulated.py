"""Issue 24 items 3-4 against the simulator: the stored ``/metrics`` series equals the
simulator's ground truth at each sample (within one interval), the stand-in ``nvidia-smi``
gives power and tokens/J in the result and is stopped with the bench, and a host without
``nvidia-smi`` gives a note, never an error."""

from __future__ import annotations

import json
import os
from bisect import bisect_right
from pathlib import Path

import httpx
import pytest
from tests.fixtures.cli import run_cli

FAKE_BIN = Path(__file__).resolve().parents[1] / "fixtures" / "bin"
INTERVAL = 0.2
# Gauges the simulator logs at every change (engine.note_gauges) and /metrics serves.
CHECKED = ("num_running_reqs", "num_queue_reqs", "num_used_tokens", "gen_throughput")

pytestmark = pytest.mark.slow


def _bench(capsys, url: str, *extra: str) -> tuple[int, dict, str]:
    rc, out, err = run_cli(
        capsys, "bench", "--url", url, "--mode", "concurrency", "--concurrency", "6",
        "--num-prompts", "30", "--input-len", "64", "--output-len", "48",
        "--metrics-interval", str(INTERVAL), "--json", *extra,
    )  # fmt: skip
    return rc, (json.loads(out) if out.strip().startswith("{") else {}), err


def _values_in_window(log: list[list[float]], col: int, lo: float, hi: float) -> set[float]:
    """Every value gauge ``col`` had in [lo, hi]: the state at ``lo`` plus each change."""
    times = [g[0] for g in log]
    i = max(0, bisect_right(times, lo) - 1)
    out = {log[i][col]} if log and times[i] <= lo else set()
    j = bisect_right(times, hi)
    out.update(g[col] for g in log[i:j])
    return out


def test_metrics_series_equal_ground_truth_and_gpu_tok_per_j(
    start_simulator, capsys, monkeypatch, tmp_path
):
    pidfile = tmp_path / "smi.pid"
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SMI_PIDFILE", str(pidfile))
    monkeypatch.setenv("FAKE_SMI_POWER_W", "300")  # GPUs 0 and 1: 300 W and 310 W
    sim = start_simulator(
        "--enable-metrics", "--max-running-requests", "4", "--sim-speed", "4"
    )  # fmt: skip
    rc, res, err = _bench(capsys, sim.url)
    assert rc == 0, err
    (level,) = res["levels"]
    series = level["telemetry"]["server"]
    assert series["interval_s"] == INTERVAL
    assert series["kept"] >= 5 and len(series["t"]) == series["kept"]
    # max-running 4 with 6 in flight: the queue gauge saw requests waiting
    assert max(series["num_queue_reqs"]) >= 1 and max(series["num_running_reqs"]) == 4

    truth = httpx.get(sim.url + "/sim/trace", params={"requests": "0"}, timeout=10).json()
    cols = truth["gauge_fields"]
    log = truth["gauges"]
    for i, t in enumerate(series["t"]):
        at = series["t0_perf"] + t  # when the scrape's answer arrived (perf_counter)
        for key in CHECKED:
            seen = _values_in_window(log, cols.index(key), at - INTERVAL, at)
            v = series[key][i]
            assert any(abs(v - s) <= 1e-6 * max(1.0, abs(s)) for s in seen), (key, t, v, seen)
    # the queue-time histogram (SGLang's sglang:queue_time_seconds) is the trace's admitted -
    # arrival over every request (the warmup's too), and the stored series saw it grow
    from glmserve.bench.telemetry import parse_metrics

    full = httpx.get(sim.url + "/sim/trace", timeout=10).json()["requests"].values()
    now = parse_metrics(httpx.get(sim.url + "/metrics", timeout=10).text)
    assert now["queue_time_s_count"] == len(full) == 31
    assert now["queue_time_s_sum"] == pytest.approx(sum(r["admitted"] - r["arrival"] for r in full))
    assert max(series["queue_time_s_count"]) > min(series["queue_time_s_count"])
    # control: the same check fails for the samples in reverse order (it can tell them apart)
    col = cols.index("num_running_reqs")
    rev = list(reversed(series["num_running_reqs"]))
    assert any(
        rev[i] not in _values_in_window(log, col, series["t0_perf"] + t - INTERVAL,
                                        series["t0_perf"] + t)
        for i, t in enumerate(series["t"])
    )  # fmt: skip

    gpu = level["telemetry"]["gpu"]
    assert [g["index"] for g in gpu["gpus"]] == [0, 1]
    assert gpu["power_w_mean"] == pytest.approx(610.0)
    seconds = gpu["energy_j"] / gpu["power_w_mean"]
    assert level["output_tok_per_j"] == pytest.approx(level["output_tokens"] / (610.0 * seconds))
    assert level["output_tokens"] == 30 * 48 and gpu["throttled"] is False
    # the loop was stopped with the bench, by its process group
    pid = int(pidfile.read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


def test_no_nvidia_smi_is_a_note(start_simulator, capsys, monkeypatch, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    for tool in ("bash", "mktemp", "setsid", "kill", "rm", "cat", "python3"):
        src = next((Path(d) / tool for d in os.environ["PATH"].split(os.pathsep)
                    if (Path(d) / tool).exists()), None)  # fmt: skip
        if src is not None:
            (empty / tool).symlink_to(src)
    monkeypatch.setenv("PATH", str(empty))
    sim = start_simulator("--enable-metrics", "--sim-speed", "20")
    rc, res, err = _bench(capsys, sim.url)
    assert rc == 0, err
    assert any("no nvidia-smi" in n for n in res["notes"]), res["notes"]
    assert "gpu" not in res["levels"][0]["telemetry"]
    assert "output_tok_per_j" not in res["levels"][0]


def test_run_id_bench_samples_gpus_on_the_runs_host(monkeypatch, tmp_path, stop_left_runs):
    """``bench RUN``: nvidia-smi runs on the run's host through its transport (local here),
    and is gone when the bench ends."""
    from tests.fixtures.cli import run_glmserve

    pidfile = tmp_path / "smi.pid"
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SMI_PIDFILE", str(pidfile))
    monkeypatch.setenv("FAKE_SMI_POWER_W", "400")
    monkeypatch.setenv("FAKE_SMI_GPUS", "1")
    monkeypatch.setenv("FAKE_SMI_THROTTLE", "0x0000000000000004")  # SW power cap
    launch = run_glmserve("launch", "--profile", "flashinfer", "--simulate", "--poll", "0.2",
                          "--json")  # fmt: skip
    assert launch.returncode == 0, launch.stderr
    run_id = json.loads(launch.stdout[launch.stdout.index("{") :])["run"]["run_id"]
    assert not pidfile.exists()  # only the bench's -lms loop writes it
    bench = run_glmserve("bench", run_id, "--num-prompts", "3", "--output-len", "32", "--json")
    assert bench.returncode == 0, bench.stderr
    (level,) = json.loads(bench.stdout)["levels"]
    assert level["power_w_mean"] == pytest.approx(400.0) and level["gpu_throttled"] is True
    assert level["output_tok_per_j"] == pytest.approx(level["output_tokens"] / level["energy_j"])
    pid = int(pidfile.read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
