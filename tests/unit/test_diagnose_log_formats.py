"""0.5.2x log formats and SGLang's soft watchdog (issue 10 #5, #6).

Lines are taken from the SGLang 0.5.23 sources, cited per test; the server_args line is the one
0.5.23's own code prints (tests/data/sglang_lines/server_args_0.5.23.log, regenerated from the
release by ``tests/integration/test_diagnose_server_args_release.py``).
"""

from __future__ import annotations

from pathlib import Path

from glmserve.diagnose import Category, LogDiagnoser, State, diagnose_lines, diagnose_text

DATA = Path(__file__).resolve().parents[1] / "data" / "sglang_lines"
ARGS_0523 = next(
    ln for ln in (DATA / "server_args_0.5.23.log").read_text().splitlines() if ln.startswith("[")
)
# 0.5.23 srt/model_executor/pool_configurator.py:95-99 (max_total_num_tokens <= 0).
NOT_ENOUGH = (
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
    "Current value: mem_fraction_static=0.9"
)
# 0.5.23 srt/managers/scheduler_components/metrics_reporter.py:962-963 with
# SGLANG_LOG_FORWARD_ITERS=1: iter_msg = f" [{batch_iter}]".
DECODE_ITER = (
    "[2026-03-02 11:00:{s:02d} TP0] Decode batch [{it}], #running-req: 3, #full token: 412, "
    "full token usage: 0.00, cuda graph: True, gen throughput (token/s): 97.31, #queue-req: 0, "
)
# 0.5.23 srt/utils/watchdog.py:153-156 (logger.error of WatchdogRaw._watchdog_once).
WATCHDOG = "[2026-03-02 11:05:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, "
SOFT = WATCHDOG + "self.soft=True)"
HARD = WATCHDOG + "self.soft=False)"
READY = "[2026-03-02 10:09:17] The server is fired up and ready to roll!"


def both(lines: list[str]):
    """The verdict through watch's per-line ``feed`` and through diagnose's bulk path."""
    a = diagnose_lines(lines)
    b = diagnose_text("\n".join(lines) + "\n")
    assert a.to_dict() == b.to_dict()
    return a


def test_dict_server_args_are_read() -> None:
    d = both([ARGS_0523])
    assert d.tp_size == 8
    assert d.server_args["mem_fraction_static"] == "0.9"
    assert d.server_args["port"] == "30000"
    assert d.server_args["model_path"] == "zai-org/GLM-5-FP8"


def test_not_enough_memory_hint_names_the_numbers_from_a_dict_line() -> None:
    d = both(
        [ARGS_0523, "[2026-03-02 10:08:09 TP0] Load weight end. avail mem=51.02 GB", NOT_ENOUGH]
    )
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.OOM, 3)
    assert "from 0.9 to 0.93" in (d.hint or "")


def test_capture_oom_hint_uses_the_per_phase_graph_flag() -> None:
    d = both(
        [
            ARGS_0523,
            "[2026-03-02 10:08:13 TP0] Capture cuda graph begin. This can take up to several "
            "minutes. avail mem=10.2 GB",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        ]
    )
    assert d.category is Category.OOM
    assert "from 0.9 to 0.85" in (d.hint or "")
    assert "--cuda-graph-max-bs-decode from 64 to 32" in (d.hint or "")


def test_the_server_args_line_is_not_cut_before_its_last_keys() -> None:
    """0.5.23's line is ~18K characters, longer than the 16K a line is matched on."""
    assert len(ARGS_0523) > 16_384
    d = both([ARGS_0523])
    assert "enable_dp_attention" in d.server_args  # resolved_dict() appends it last


def test_decode_batch_with_forward_iteration_means_ready() -> None:
    d = both([DECODE_ITER.format(s=s, it=800 + 40 * s) for s in range(3)])
    assert d.state is State.READY and d.ready_line == 1


def test_prefill_batch_with_forward_iteration_is_progress() -> None:
    line = (
        "[2026-03-02 11:00:00 TP0] Prefill batch [812], #new-seq: 1, #new-token: 7, "
        "#cached-token: 0, full token usage: 0.00, #running-req: 0, #queue-req: 0, "
    )
    d = both(["[2026-03-02 10:00:09 TP0] Load weight begin. avail mem=78.81 GB", line])
    assert d.last_progress_line == 2


def test_soft_watchdog_alone_is_not_a_crash() -> None:
    d = both([READY, DECODE_ITER.format(s=1, it=840), SOFT, DECODE_ITER.format(s=9, it=880)])
    assert d.state is State.READY and d.category is None
    assert d.warning is not None and d.warning.line == 3
    assert "soft watchdog" in d.warning.hint


def test_soft_watchdog_before_ready_is_not_a_crash() -> None:
    d = both(["[2026-03-02 10:08:13 TP0] Capture cuda graph begin.", SOFT])
    assert d.state is State.CAPTURING_GRAPHS


def test_soft_watchdog_is_the_root_cause_once_the_process_is_dead() -> None:
    """What watch does when the process group is gone: ``Diagnosis.exited``."""
    d = both([READY, SOFT]).exited(None)
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.CRASH, 2)
    assert d.root_cause and d.root_cause.startswith("Scheduler watchdog timeout")
    clean = both([READY, SOFT]).exited(0)  # a clean exit (stopped) is no crash
    assert clean.state is State.EXITED


def test_hard_watchdog_is_still_a_crash() -> None:
    d = both([READY, HARD])
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.CRASH, 2)


def test_per_line_feed_reports_the_soft_watchdog_as_no_change() -> None:
    """watch records an event per verdict change: a soft watchdog line changes nothing."""
    diag = LogDiagnoser()
    diag.feed(READY)
    assert diag.feed(SOFT) is None
    assert diag.diagnosis.state is State.READY


def _watch(tmp_path: Path, monkeypatch, log: str, alive_polls: int):  # type: ignore[no-untyped-def]
    """Watch a run whose log is ``log`` and whose process lives for ``alive_polls`` polls."""
    from glmserve.deploy import watch
    from glmserve.remote.host_config import HostConfig
    from glmserve.remote.process import Ownership
    from glmserve.remote.transport import LocalTransport
    from glmserve.store import RunRecord, RunStore

    polls = iter(range(10_000))
    monkeypatch.setattr(
        watch,
        "run_ownership",
        lambda t, run: Ownership([4242] if next(polls) < alive_polls else []),
    )
    store = RunStore.open()
    run = store.add_run(
        RunRecord(run_id="sw", host="local", profile="p", port=1, run_dir=str(tmp_path))
    )
    (tmp_path / "server.log").write_text(log)
    w = watch.Watcher(run, LocalTransport(HostConfig()), store, poll_s=0.01, health=False)
    return w.watch(), store


def test_watch_soft_watchdog_then_ready_is_ready(tmp_path: Path, monkeypatch) -> None:
    log = "\n".join(["[2026-03-02 10:08:13 TP0] Capture cuda graph begin.", SOFT, READY]) + "\n"
    result, _store = _watch(tmp_path, monkeypatch, log, alive_polls=100)
    assert result.state == "READY"


def test_watch_soft_watchdog_then_death_is_a_crash(tmp_path: Path, monkeypatch) -> None:
    log = "\n".join(["[2026-03-02 10:08:13 TP0] Capture cuda graph begin.", SOFT]) + "\n"
    result, store = _watch(tmp_path, monkeypatch, log, alive_polls=2)
    assert result.state == "CRASHED"
    assert result.diagnosis.root_cause.startswith("Scheduler watchdog timeout")
    assert store.get_run("sw").state == "CRASHED"


# -- newer failure classes, lines from the 0.5.23 sources ---------------------------------------


def test_kv_budget_valueerror_is_oom_with_the_numbers_of_the_message() -> None:
    """0.5.23 srt/mem_cache/kv_cache_configurator.py:3050-3057 (also sglang#2128 of InferenceX)."""
    d = both(
        [
            "[2026-07-09 10:00:00 TP0] Load weight end. avail mem=12.25 GB, mem usage=125.65 GB.",
            "ValueError: Loaded weights leave no GPU memory for the KV cache under "
            "--mem-fraction-static=0.88. Raise --mem-fraction-static above 0.912 (minimum viable "
            "= 1 - available/pre = 0.9113). If using speculative decoding, draft weights are now "
            "counted.",
        ]
    )
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.OOM, 2)
    assert "from 0.88 to 0.92" in (d.hint or "")


def test_hybrid_state_cache_budget_is_oom() -> None:
    """0.5.23 srt/mem_cache/kv_cache_configurator.py:3393-3400."""
    d = both(
        [
            "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
            "Computed max_mamba_cache_size=0 (total_rest_memory=1.00 GB, mamba_cache_per_req="
            "12.00 MB). Try: (1) reduce --max-running-requests, (2) increase "
            "--mem-fraction-static"
        ]
    )
    assert d.category is Category.OOM and "mamba" in (d.hint or "")


def test_an_internal_port_in_use_names_that_port() -> None:
    """0.5.23 srt/server_args.py:884-888 logs "Port is already in use. ..." and re-raises
    srt/utils/network.py:82's ValueError, which names the port: that line is the root cause."""
    d = both(
        [
            "[2026-03-02 10:00:00] server_args={'port': 30000, 'tp_size': 8}",
            "[2026-03-02 10:00:01] Port is already in use. dist_init_port=30010 port_base=30000 "
            "detokenizer_port=30001 nccl_port=30005 scheduler_input_port=30002",
            "Traceback (most recent call last):",
            '  File "/sgl/python/sglang/srt/utils/network.py", line 101, in wait_port_available',
            "    raise ValueError(error_message)",
            "ValueError: nccl_port at 30005 is not available",
        ]
    )
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.PORT_IN_USE, 6)
    assert "port 30005" in (d.hint or "") and "--port is 30000" in (d.hint or "")


def test_waiting_for_a_busy_port_is_not_a_crash() -> None:
    """network.py:95-98 logs at INFO while it waits for the port to be freed."""
    d = both(
        [
            "[2026-03-02 10:00:01] INFO network.py:96: port 30005 is in use. Waiting for 15 "
            "seconds for nccl_port to be available."
        ]
    )
    assert d.state is State.STARTING


def test_a_partition_the_quantization_block_does_not_divide_is_bad_args() -> None:
    """sglang#23602: --tp 16 with a 128-block FP4 checkpoint."""
    d = both(
        [
            "sglang_dsv4_node0  | ValueError: Weight output_partition_size = 192 is not "
            "divisible by weight quantization block_n = 128."
        ]
    )
    assert d.category is Category.BAD_ARGS and "--tp-size" in (d.hint or "")


def test_status_of_a_dead_run_after_a_soft_watchdog_is_crashed(tmp_path: Path) -> None:
    """`glmserve status` (assess_run) on a run whose processes are gone: the soft watchdog
    line is the root cause; with the server alive the same log is READY."""
    from glmserve.deploy.assess import assess_run
    from glmserve.remote.host_config import HostConfig
    from glmserve.remote.transport import LocalTransport
    from glmserve.store import RunRecord, RunStore

    (tmp_path / "server.log").write_text("\n".join([READY, SOFT]) + "\n")
    store = RunStore.open()
    run = store.add_run(
        RunRecord(run_id="sw2", host="local", profile="p", port=1, run_dir=str(tmp_path),
                  state="READY")
    )  # fmt: skip
    out = assess_run(run, store, LocalTransport(HostConfig()))  # pgid None: nothing alive
    assert out["state"] == "CRASHED"
    assert (store.get_run("sw2").root_cause or "").startswith("Scheduler watchdog timeout")
