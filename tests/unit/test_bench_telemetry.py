"""Pure parts of bench telemetry: /metrics parsing (prometheus_client), nvidia-smi CSV,
per-level GPU figures (power, energy, tokens/J, throttling), downsampling, series export."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from glmserve.bench import gpu_telemetry as gt
from glmserve.bench.gpu_telemetry import GpuSampler
from glmserve.bench.telemetry import downsample, parse_metrics, series_lines, summary

FAKE_SMI = Path(__file__).resolve().parents[1] / "fixtures" / "bin" / "nvidia-smi"

# Two scheduler ranks (DP 2), as SGLang labels them (collector.py: tp_rank/dp_rank labels).
TWO_RANKS = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",model_name="m"} 3.0
sglang:num_running_reqs{dp_rank="1",model_name="m"} 5.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",model_name="m"} 0.25
sglang:token_usage{dp_rank="1",model_name="m"} 0.75
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m"} 1.5e+03
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 1.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 2.0
sglang:time_to_first_token_seconds_count{model_name="m"} 2.0
sglang:time_to_first_token_seconds_sum{model_name="m"} 0.35
"""


def test_parse_metrics_sums_counts_and_averages_ratios():
    m = parse_metrics(TWO_RANKS)
    assert m["num_running_reqs"] == 8.0  # requests add up over ranks
    assert m["token_usage"] == 0.5  # a ratio is averaged, not summed to 1.0
    assert m["generation_tokens_total"] == 1500.0  # the counter, not its _created
    assert m["ttft_s_count"] == 2.0 and m["ttft_s_sum"] == pytest.approx(0.35)


def test_parse_metrics_one_reading_per_dp_rank_not_per_tp_rank():
    # --enable-metrics-for-all-schedulers: every TP rank of one DP group reports the same batch
    text = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",tp_rank="1",pp_rank="0",moe_ep_rank="1"} 7.0
sglang:num_running_reqs{model_name="m",tp_rank="0",pp_rank="0",moe_ep_rank="0"} 6.0
sglang:num_running_reqs{model_name="m",tp_rank="2",pp_rank="0",moe_ep_rank="2"} 7.0
"""
    assert parse_metrics(text)["num_running_reqs"] == 6.0  # rank 0's, not 20


def test_parse_metrics_ignores_garbage_and_counts_it():
    """A line the Prometheus parser refuses no longer loses the whole scrape (the other
    lines are read) and is counted, not raised (bench.prom_text)."""
    from glmserve.bench.telemetry import parse_metrics_noted

    assert parse_metrics("sglang:num_running_reqs{ 3\n") == {}
    parsed, reading = parse_metrics_noted("sglang:num_running_reqs{ 3\nsglang:num_queue_reqs 2\n")
    assert parsed == {"num_queue_reqs": 2.0}
    assert reading.ignored == {"unparsable lines": 1}


def test_simulator_metrics_parse_with_the_prometheus_parser():
    from glmserve.simulator.handlers.metrics import render_metrics

    class Eng:
        def __init__(self):
            self.pool_tokens = 1000
            self.counters = {"prompt_tokens_total": 10, "generation_tokens_total": 20,
                             "num_requests_total": 2, "num_aborted_requests_total": 0}  # fmt: skip
            self.latencies = {"ttft": [0.2], "itl": [0.01, 0.02], "e2e": [1.0]}
            self.cache = types.SimpleNamespace(hit_tokens=7)  # the radix cache's hits

        def used_tokens(self):
            return 250

        def gauges(self):
            return {"num_running_reqs": 2.0, "num_queue_reqs": 1.0, "num_used_tokens": 250.0,
                    "gen_throughput": 42.5, "cache_hit_rate": 0.0}  # fmt: skip

    class Opts:
        served_model_name = "glm"

        class shape:
            cuda_graph = True

    m = parse_metrics(render_metrics(Eng(), Opts()))
    assert (m["num_running_reqs"], m["num_queue_reqs"], m["token_usage"]) == (2.0, 1.0, 0.25)
    assert m["gen_throughput"] == 42.5 and m["itl_s_count"] == 2.0
    text = render_metrics(Eng(), Opts())
    assert re.search(r"^sglang:cached_tokens_total(\{[^}]*\})? 7\.0$", text, re.M), text


def test_stand_in_prints_the_real_query_format():
    q = gt.QUERY.split()
    out = subprocess.run([str(FAKE_SMI), *q[1:-2]], capture_output=True, text=True, check=True)
    rows = gt.parse_lines(out.stdout)
    assert [r["index"] for r in rows] == [0.0, 1.0]
    assert rows[1]["power_w"] == 310.0 and rows[0]["throttle"] == 0.0


def test_parse_lines_not_supported_and_malformed():
    text = "0, [N/A], 1980, 3201, 97, 100, 50, 0x0000000000000004\ngarbage\n1, 2\n"
    (row,) = gt.parse_lines(text)
    assert row["power_w"] is None and row["throttle"] == 4.0


def test_parse_lines_never_reads_a_figure_from_nan_inf_or_negative_fields():
    """A broken or faked nvidia-smi (a hostile host) printing nan/inf/-5: no NaN power or
    energy, no int(nan) crash (was exit 70), no GPU index 1e300."""
    text = (
        "nan, 100, 1980, 3201, 97, 100, 50, 0x0\n"  # no GPU index: line skipped
        "inf, 100, 1980, 3201, 97, 100, 50, 0x0\n"
        "1e300, 100, 1980, 3201, 97, 100, 50, 0x0\n"
        "0.5, 100, 1980, 3201, 97, 100, 50, 0x0\n"
        "0, nan, -1980, inf, 97, 100, 50, nan\n"
        "1, -300, 1980, 3201, 97, 100, 50, 1e400\n"
        "2, 250.5, 1980, 3201, 97, 100, 50, 2.5\n"
    )
    rows = gt.parse_lines(text)
    assert [r["index"] for r in rows] == [0.0, 1.0, 2.0]
    assert rows[0]["power_w"] is None and rows[0]["sm_mhz"] is None
    assert rows[0]["mem_mhz"] is None and rows[0]["throttle"] is None
    assert rows[1]["power_w"] is None and rows[1]["throttle"] is None
    assert rows[2]["power_w"] == 250.5 and rows[2]["throttle"] is None
    d = gt.derive(rows, seconds=2.0, output_tokens=100)
    assert d["power_w_mean"] == 250.5 and d["energy_j"] == 501.0 and d["throttled"] is False


def _row(i, w, thr=0):
    return {"index": i, "power_w": w, "sm_mhz": 1980.0, "mem_mhz": 3201.0, "util_pct": 90.0,
            "mem_used_mib": 1.0, "temp_c": 60.0, "throttle": float(thr)}  # fmt: skip


def test_derive_energy_tok_per_j_and_throttle_bits():
    rows = [_row(0, 100.0), _row(1, 200.0), _row(0, 300.0), _row(1, 200.0)]
    d = gt.derive(rows, seconds=10.0, output_tokens=8000)
    assert d["power_w_mean"] == 400.0  # GPU 0 mean 200 + GPU 1 mean 200
    assert d["energy_j"] == 4000.0 and d["output_tok_per_j"] == 2.0
    assert d["throttled"] is False
    idle_and_boost = gt.derive([_row(0, 100.0, 0x1 | 0x10)], 1.0, 1)
    assert idle_and_boost["throttled"] is False  # idle / sync boost do not slow a loaded GPU
    power_cap = gt.derive([_row(0, 100.0, 0x4), _row(1, 100.0)], 1.0, 1)
    assert power_cap["throttled"] is True
    assert [g["throttled"] for g in power_cap["gpus"]] == [True, False]


def test_derive_without_power_has_no_tok_per_j():
    d = gt.derive([_row(0, None)], 5.0, 100)
    assert "output_tok_per_j" not in d and d["samples"] == 1


def test_downsample_keeps_real_samples_evenly():
    assert downsample(5, 10) == [0, 1, 2, 3, 4]
    idx = downsample(1000, 11)
    assert idx[0] == 0 and idx[-1] == 999 and len(idx) == 11
    assert all(b - a in (99, 100) for a, b in itertools.pairwise(idx))


def test_summary_cache_hit_from_counters():
    s = {"prompt_tokens_total": [100.0, 300.0], "cached_tokens_total": [0.0, 150.0],
         "num_queue_reqs": [0.0, 4.0, 2.0]}  # fmt: skip
    out = summary(s)
    assert out["cache_hit_rate_counters"] == 0.75 and out["num_queue_reqs_max"] == 4.0


def test_series_lines_long_format():
    level = {"concurrency": 4, "request_rate": None, "telemetry": {
        "server": {"interval_s": 1.0, "t": [0.5, 1.5], "num_running_reqs": [1.0, 4.0]},
        "gpu": {"series": {"0": {"t": [0.25], "power_w": [300.0], "sm_mhz": [1980.0]}}},
    }}  # fmt: skip
    lines = series_lines(7, {"levels": [level]})
    assert lines[1] == {"id": 7, "level": 0, "concurrency": 4, "request_rate": None,
                        "source": "server", "t": 1.5, "num_running_reqs": 4.0}  # fmt: skip
    assert lines[2]["source"] == "gpu" and lines[2]["power_w"] == 300.0 and lines[2]["gpu"] == 0


class FakeTransport:
    """A transport whose host has no nvidia-smi (runs the script locally without it)."""

    def __init__(self, out: str, rc: int = 0):
        self.out, self.rc = out, rc

    def run(self, cmd, timeout=60):
        from glmserve.remote.transport import Result

        return Result(cmd=cmd, rc=self.rc, stdout=self.out, stderr="")


def test_no_nvidia_smi_is_a_note_not_an_error():
    s = gt.GpuSampler(FakeTransport(gt.NO_SMI + "\n")).start()
    assert s.pid is None and "no nvidia-smi" in (s.note or "")
    lg = gt.LevelGpu(s)
    with lg:
        pass
    assert lg.doc(100) == {"note": s.note}


def test_bench_table_shows_tok_per_j_only_with_gpu_telemetry():
    from glmserve.bench.results import build_result
    from glmserve.cli.views.bench import _cells, table_columns

    lv = {"concurrency": 4, "requests": 4, "completed": 4, "errors": 0, "output_tok_s": 100.0}
    plain = build_result("concurrency", [dict(lv)], {}, {}, {}, None)
    assert "tok/J" not in table_columns(plain, wide=True)
    hot = dict(lv, output_tok_per_j=0.1234, gpu_throttled=True)
    measured = build_result("concurrency", [hot], {}, {}, {}, None)
    assert "tok/J" in table_columns(measured, wide=True)
    assert _cells(hot)["tok/J"] == "0.123!"  # "!" marks a throttled level


def test_repeats_keep_a_throttle_seen_in_any_repeat():
    from glmserve.bench.repeats import merge_levels

    a = {"concurrency": 4, "output_tok_s": 10.0, "output_tok_per_j": 1.0, "gpu_throttled": False}
    b = {"concurrency": 4, "output_tok_s": 12.0, "output_tok_per_j": 3.0, "gpu_throttled": True}
    out = merge_levels([a, b])
    assert out["gpu_throttled"] is True and out["output_tok_per_j"] == 2.0


@pytest.mark.parametrize("value", ["-1", "nan", "3601"])
def test_bad_metrics_interval_is_a_one_line_error(capsys, value):
    from tests.fixtures.cli import run_cli

    rc, _, err = run_cli(
        capsys, "bench", "--url", "http://127.0.0.1:9", "--metrics-interval", value
    )
    assert rc == 2
    assert err.strip().splitlines()[-1].startswith("error:") and "--metrics-interval" in err
    assert "Traceback" not in err


def test_a_reset_inside_the_level_drops_the_before_after_rate():
    """The counter went 10 -> 110 -> 5 -> 160 (a restart, then growth past the start): the
    scrapes before and after the level see +150 and no reset; the series saw it."""
    from glmserve.bench.telemetry import LevelTelemetry

    tel = LevelTelemetry("http://x", 1.0)
    m = tel.metrics
    assert m is not None
    m.t0, m.times = 100.0, [100.5, 101.5, 102.0, 103.0]
    m.samples = [{"generation_tokens_total": v} for v in (10.0, 110.0, 5.0, 160.0)]
    level = {"server": {"generation_tokens": 150.0, "generation_tok_s": 50.0}}
    tel.attach(level)
    assert "generation_tok_s" not in level["server"]
    assert "generation_tokens" not in level["server"]
    assert "went back during the level" in level["server"]["metrics_notes"][0]
    assert level["telemetry"]["server"]["counter_resets"] == ["generation_tokens_total"]


def test_counter_rate_per_raw_interval_and_reset():
    from glmserve.bench.telemetry import MetricsSampler

    m = MetricsSampler("http://x", 1.0)
    m.t0 = 100.0
    m.times = [100.5, 101.5, 102.0, 103.0]
    m.samples = [{"generation_tokens_total": v} for v in (10.0, 110.0, 160.0, 5.0)]
    doc = m.series()
    assert doc["generation_tok_s"] == [None, 100.0, 100.0, None]  # reset: no negative rate
    assert doc["t"] == [0.5, 1.5, 2.0, 3.0]


def _state(pid: int) -> str | None:
    """A process's state letter, None when gone (Z: a zombie awaiting its reaper)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_loop_is_stopped_when_the_hosts_shell_has_job_control(tmp_path, monkeypatch):
    """With job control (``set -m``) a background job leads its own process group, so
    ``setsid`` forks: ``$!`` would name the parent that exits at once and the loop would
    survive ``stop``. The PID the loop reports itself is its group's: it stops."""
    from glmserve.remote.hosts import LOCAL, HostConfig
    from glmserve.remote.transport import LocalTransport

    class JobControl(LocalTransport):
        def run_bytes(self, cmd, timeout=60, stdin=None):
            return super().run_bytes("set -m; " + cmd, timeout=timeout, stdin=stdin)

    monkeypatch.setenv("FAKE_SMI_PIDFILE", str(tmp_path / "pid"))
    s = GpuSampler(JobControl(HostConfig(name=LOCAL)), command=str(FAKE_SMI)).start()
    assert s.pid is not None, s.note
    # the loop writes its pid once its interpreter is up, after start() has returned
    pidfile, deadline = tmp_path / "pid", time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    loop = int(pidfile.read_text())
    try:
        assert os.getpgid(loop) == s.pid  # the reported PID leads the loop's group
        s.stop()
        deadline = time.monotonic() + 5
        while _state(loop) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(loop) in (None, "Z")
    finally:
        if _state(loop) not in (None, "Z"):  # a failed stop leaves no orphan behind
            os.kill(loop, signal.SIGTERM)


def test_sim_trace_gauges_follow_since_step():
    """Polling /sim/trace?since_step=N stays cheap: only gauge changes after step N."""
    from glmserve.simulator.engine import Engine

    eng = Engine.__new__(Engine)
    eng.steps = [(1, "decode", 0.0, 1.0, 1.1, 0.0, 1, 1), (2, "decode", 1.1, 2.0, 2.1, 0.0, 1, 1)]
    assert eng._seen_until(0) == float("-inf")
    assert eng._seen_until(1) == 1.1 and eng._seen_until(2) == 2.1
    assert eng._seen_until(7) == float("-inf")  # not kept: all of them


def _wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while _state(pid) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    return _state(pid) in (None, "Z")


def _stand_in_pid(path: Path) -> int:
    """The PID the nvidia-smi stand-in writes once its Python is up (after ``start``)."""
    deadline = time.monotonic() + 10
    while True:
        text = path.read_text().strip() if path.exists() else ""
        if text:
            return int(text)
        assert time.monotonic() < deadline, "the nvidia-smi stand-in never started"
        time.sleep(0.05)


def test_loop_dies_with_a_sigkilled_bench(tmp_path):
    """A bench killed with SIGKILL runs no ``finally``: the nvidia-smi loop it started must
    not outlive it (its keeper sees the pipe close and stops the loop's process group)."""

    code = (
        "import sys, time\n"
        "from glmserve.bench.gpu_telemetry import GpuSampler\n"
        "from glmserve.remote.hosts import LOCAL, HostConfig\n"
        "from glmserve.remote.transport import LocalTransport\n"
        "s = GpuSampler(LocalTransport(HostConfig(name=LOCAL)), command=sys.argv[1]).start()\n"
        "print(s.pid, s.path, flush=True)\n"
        "time.sleep(60)\n"
    )
    env = dict(os.environ, FAKE_SMI_PIDFILE=str(tmp_path / "pid"))
    bench = subprocess.Popen(
        [sys.executable, "-c", code, str(FAKE_SMI)], stdout=subprocess.PIPE, env=env, text=True
    )
    loop = None
    try:
        pid, path = bench.stdout.readline().split()
        assert pid.isdigit(), pid
        loop = _stand_in_pid(tmp_path / "pid")
        assert _state(loop) not in (None, "Z")
        bench.kill()
        bench.wait(timeout=10)
        assert _wait_gone(loop), "the nvidia-smi loop outlived its SIGKILLed bench"
        assert _wait_gone(int(pid))
        deadline = time.monotonic() + 5
        while Path(path).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(path).exists()  # its CSV removed too
    finally:
        if bench.poll() is None:
            bench.kill()
        if loop is not None and _state(loop) not in (None, "Z"):
            os.kill(loop, signal.SIGTERM)  # a failed test leaves no orphan behind


def test_a_normal_stop_kills_the_keeper_first(tmp_path, monkeypatch):
    """stop() kills the keeper by PID before stopping the loop: it never fires later."""
    from glmserve.remote.hosts import LOCAL, HostConfig
    from glmserve.remote.transport import LocalTransport

    monkeypatch.setenv("FAKE_SMI_PIDFILE", str(tmp_path / "pid"))
    s = GpuSampler(LocalTransport(HostConfig(name=LOCAL)), command=str(FAKE_SMI)).start()
    assert s.pid is not None and s.keeper is not None, s.note
    keeper = s.keeper
    loop = _stand_in_pid(tmp_path / "pid")
    try:
        s.stop()
        assert keeper.poll() is not None and s.keeper is None
        assert _wait_gone(loop)
    finally:
        if _state(loop) not in (None, "Z"):
            os.kill(loop, signal.SIGTERM)


def _telemetry_with_rows(seconds: float):
    from glmserve.bench.telemetry import LevelTelemetry

    tel = LevelTelemetry("http://x", 0, GpuSampler(transport=None, pid=1, path="/x"))
    tel.gpu.rows = gt.parse_lines("0, 300.00, 1980, 3201, 97, 131072, 54, 0x0\n")
    tel.gpu.t0, tel.gpu.t1 = 0.0, seconds
    return tel


def test_no_tokens_per_joule_for_a_level_where_nothing_completed():
    """A level whose requests all failed (server killed mid-level) has output_tokens from
    the cut streams and no output tok/s; tok/J from those tokens was still printed."""
    level = {"concurrency": 8, "requests": 16, "completed": 0, "output_tokens": 824}
    _telemetry_with_rows(10.0).attach(level)
    assert "output_tok_per_j" not in level
    assert level["telemetry"]["gpu"]["output_tok_per_j"] is None
    assert "no request completed" in level["telemetry"]["gpu"]["note"]
    ok = {"concurrency": 8, "requests": 16, "completed": 16, "output_tokens": 3000}
    _telemetry_with_rows(10.0).attach(ok)
    assert ok["output_tok_per_j"] == pytest.approx(3000 / 3000.0)  # 300 W x 10 s


def test_tokens_per_joule_counts_the_tokens_output_tok_s_counts():
    """A level with a failed stream: tok/J's tokens are every stream's, failed ones included,
    as output tok/s counts them (the server produced them and the energy was spent); the
    full-window figures (output_tok_s_full) count completed requests only."""
    from glmserve.bench.metrics import StreamRecord, level_metrics

    done = StreamRecord(0.0, 0.0, [1.0, 2.0, 3.0], [10, 20, 30], completion_tokens=30, end=3.0)
    cut = StreamRecord(0.0, 0.0, [1.0, 2.0], [10, 20], end=2.0, error="stream cut")
    lm = level_metrics([done, cut], concurrency=2, window="full").__dict__
    assert lm["completed"] == 1 and lm["errors"] == 1
    assert lm["output_tokens"] == 50  # both streams
    assert lm["output_tok_s"] * lm["window_s"] == pytest.approx(50)  # both streams too
    assert lm["output_tok_s_full"] * lm["duration_s"] == pytest.approx(30)  # completed only
    level = {k: lm[k] for k in ("concurrency", "requests", "completed", "output_tokens")}
    _telemetry_with_rows(10.0).attach(level)
    assert level["output_tok_per_j"] == pytest.approx(50 / 3000.0)  # 300 W x 10 s
