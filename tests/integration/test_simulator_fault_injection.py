"""Fault injection: each crash kind's log and exit status, hangs, worker death, port clashes."""

from __future__ import annotations

import signal
import socket
import time

import pytest
from tests.fixtures.simulator import FAST, http_status

KILLED = -signal.SIGKILL  # Popen's view of "exit 137": the launcher SIGKILLs its own tree

# kind -> (phase it is injected at, text of the root cause that must be in the log)
CASES = {
    "oom": ("kv", "torch.OutOfMemoryError: CUDA out of memory."),
    "flashinfer_fp8_static_assert": ("warmup", "static_assert(sizeof(DTypeKV) == 2)"),
    "no_kernel_image": ("graphs", "no kernel image is available for execution on the device"),
    "tllm_unsupported_arch": ("warmup", "fmhaRunner.cuh:30: Unsupported architecture"),
    "illegal_memory_access": ("load", "an illegal memory access was encountered"),
    "kv_no_memory": ("kv", "RuntimeError: Not enough memory. Please try to increase "
                     "--mem-fraction-static. Current value: "
                     "self.server_args.mem_fraction_static="),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(CASES))
def test_crash_kind_logs_root_cause_then_cascade_and_exit_137(start_simulator, kind):
    phase, needle = CASES[kind]
    sim = start_simulator(
        "--tp-size", "4", "--sim-crash-at", phase, "--sim-crash-kind", kind, *FAST,
        wait_ready=False,
    )  # fmt: skip
    assert sim.wait_exit(30) == KILLED
    log = sim.log_text()
    assert needle in log
    root = log.index("Scheduler hit an exception: Traceback (most recent call last):")
    sigquit = log.index("Received sigquit from a child process. It usually means the child failed.")
    assert root < sigquit, "root cause first, then the launcher's sigquit"
    assert log.index(needle) < sigquit
    assert "The server is fired up and ready to roll!" not in log
    # the phase's progress lines before the crash are there, the later phases' are not
    if phase == "kv":
        assert "Load weight end." in log and "KV Cache is allocated" not in log


def test_nccl_watchdog_abort_during_init_exits_1_via_dead_scheduler(start_simulator):
    sim = start_simulator("--tp-size", "8", "--sim-crash-kind", "nccl_timeout", *FAST,
                          wait_ready=False)  # fmt: skip
    assert sim.wait_exit(20) == 1
    log = sim.log_text()
    root = log.index("Watchdog caught collective operation timeout: WorkNCCL(")
    assert root < log.index(
        "terminate called after throwing an instance of 'c10::DistBackendError'"
    )
    assert root < log.index("Rank 3 scheduler is dead. Please check if there are relevant logs.")
    assert log.rstrip().endswith("EOFError")
    assert "Scheduler hit an exception" not in log


def test_crash_after_ready_uses_running_phase_sigquit(start_simulator):
    sim = start_simulator("--sim-crash-at", "after-ready:0.3", "--disable-cuda-graph", *FAST)
    assert sim.wait_exit(20) == KILLED
    log = sim.log_text()
    ready = log.index("The server is fired up and ready to roll!")
    root = log.index("an illegal memory access was encountered")
    assert ready < root < log.index("SIGQUIT received.")
    assert "scheduler.event_loop_normal()" in log


def test_trtllm_mla_on_sm120_crashes_at_warmup_as_in_the_field(start_simulator):
    sim = start_simulator("--attention-backend", "trtllm_mla", *FAST, wait_ready=False)
    assert sim.wait_exit(20) == KILLED
    log = sim.log_text()
    assert "Error in function 'TllmGenFmhaRunner'" in log
    assert "Unsupported architecture" in log
    assert "KV Cache is allocated" in log  # it got as far as warmup
    ok = start_simulator("--attention-backend", "trtllm_mla", "--sim-gpu-arch", "sm100", *FAST)
    assert http_status(ok.url + "/health") == 200


def test_cutlass_mla_on_sm120_dies_at_the_first_decode_and_runs_on_sm100(start_simulator):
    """cutlass_mla's decode kernel is CUTLASS's SM100 (tcgen05) MLA kernel: on the default
    SM120 the warmup decode finds no kernel image, in cutlass_mla_backend.forward_decode."""
    args = ("--attention-backend", "cutlass_mla", "--page-size", "128", *FAST)
    sim = start_simulator(*args, wait_ready=False)
    assert sim.wait_exit(20) == KILLED
    log = sim.log_text()
    assert "no kernel image is available for execution on the device" in log
    assert "cutlass_mla_backend.py" in log and "o = cutlass_mla_decode(" in log
    assert "KV Cache is allocated" in log  # it got as far as warmup
    ok = start_simulator(*args, "--sim-gpu-arch", "sm100")
    assert http_status(ok.url + "/health") == 200


def test_bad_args_exit_2_with_argparse_text(start_simulator):
    sim = start_simulator("--port-number", "1", "--sim-crash-kind", "bad_args", wait_ready=False)
    assert sim.wait_exit(10) == 2
    log = sim.log_text()
    assert log.startswith("usage: launch_server.py [-h] --model-path MODEL_PATH")
    assert "launch_server.py: error: unrecognized arguments: --port-number 1" in log
    real = start_simulator("--attention-backend", "nope", wait_ready=False)
    assert real.wait_exit(10) == 2
    assert "argument --attention-backend: invalid choice: 'nope'" in real.log_text()


def test_real_port_collision_fails_like_uvicorn(start_simulator):
    """A port held by something that is not an SGLang server: uvicorn's bind error, then the
    warmup thread polls /model_info 120 times for nothing, logs "Initialization failed" and
    SIGKILLs its own tree (sglang 0.5.9 http_server.py _execute_server_warmup)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        sim = start_simulator("--port", str(port), "--sim-speed", "100", wait_ready=False)
        sim.wait_for_log("Waiting for application shutdown.")
    # the holder is gone now: each /model_info poll is refused, as from a dead holder
    assert sim.wait_exit(30) == KILLED
    log = sim.log_text()
    assert f"[Errno 98] error while attempting to bind on address ('127.0.0.1', {port})" in log
    assert "Load weight end." in log  # uvicorn binds only after the model is loaded
    assert "Initialization failed. warmup error: Traceback" in log
    assert "fired up and ready" not in log and "Application shutdown complete." not in log
    injected = start_simulator(
        "--sim-crash-kind", "port_in_use", "--sim-speed", "100", wait_ready=False
    )
    assert injected.wait_exit(30) == KILLED
    assert "address already in use" in injected.log_text()


def test_port_held_by_another_sglang_is_warmed_up_then_exit_1(start_simulator):
    """Issue 10 #4, the real 0.5.9 sequence: uvicorn runs the lifespan (which starts the
    warmup thread) before it binds; the bind fails; lifespan shutdown joins the warmup thread,
    which warms up the server that holds the port, so this process logs "The server is fired
    up and ready to roll!" and then exits 1 (uvicorn server.py startup: sys.exit(1))."""
    holder = start_simulator("--disable-cuda-graph", *FAST)
    before = holder.log_text().count('"POST /generate HTTP/1.1" 200')
    late = start_simulator("--port", str(holder.port), "--disable-cuda-graph", *FAST,
                           wait_ready=False)  # fmt: skip
    assert late.wait_exit(30) == 1
    log = late.log_text()
    order = [
        "INFO:     Started server process",
        "INFO:     Application startup complete.",
        f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', "
        f"{holder.port}): address already in use",
        "INFO:     Waiting for application shutdown.",
        "The server is fired up and ready to roll!",
        "INFO:     Application shutdown complete.",
    ]
    idx = [log.index(n) for n in order]
    assert idx == sorted(idx), log[-2000:]
    assert "Uvicorn running on" not in log
    # the warmup request went to the holder, which logged it and kept serving
    assert holder.log_text().count('"POST /generate HTTP/1.1" 200') == before + 1
    assert holder.proc.poll() is None and http_status(holder.url + "/health") == 200


@pytest.mark.parametrize("phase", ["load", "kv", "graphs", "warmup"])
def test_hang_never_reports_ready(start_simulator, phase):
    sim = start_simulator("--sim-hang-at", phase, *FAST, wait_ready=False)
    marker = {
        "load": "Loading safetensors checkpoint shards:  49%",
        "kv": "Load weight end.",
        "graphs": "Capture cuda graph begin.",
        "warmup": "Uvicorn running on",
    }[phase]
    sim.wait_for_log(marker)
    time.sleep(0.5)  # the rest of the phase's lines up to the hang point (25 ms at 20x)

    def server_lines() -> list[str]:  # uvicorn still logs our own requests: leave them out
        return [ln for ln in sim.log_text().splitlines() if "INFO:     127.0.0.1:" not in ln]

    before = server_lines()
    deadline = time.monotonic() + 1.5  # 30 s of simulated time at --sim-speed 20
    while time.monotonic() < deadline:
        assert sim.proc.poll() is None
        assert http_status(sim.url + "/health", timeout=1) in (None, 503)
        time.sleep(0.1)
    assert "fired up and ready" not in sim.log_text()
    if phase == "warmup":  # uvicorn is up, the server is still Starting: 503, not refused
        assert http_status(sim.url + "/health_generate", timeout=1) == 503
        assert http_status(sim.url + "/model_info", timeout=1) == 200
    assert server_lines() == before, "a hung server stops logging"


def test_worker_death_keeps_process_up_and_health_503(start_simulator):
    sim = start_simulator(
        "--sim-worker-death-after", "0.2", *FAST, env={"SGLANG_HEALTH_CHECK_TIMEOUT": "4"}
    )
    deadline = time.monotonic() + 10
    status = 200
    while time.monotonic() < deadline and status == 200:
        status = http_status(sim.url + "/health", timeout=5)
    assert status == 503
    assert sim.proc.poll() is None
    assert http_status(sim.url + "/model_info") == 200
    assert "Health check failed. Server couldn't get a response from detokenizer" in (
        sim.log_text()
    )


def test_patch_env_logs_activation_per_rank_and_drops_cast(start_simulator):
    import httpx

    sim = start_simulator(
        "--tp-size", "8", "--disable-cuda-graph", *FAST,
        env={"GLMSERVE_PATCHES": "flashinfer_mla_gather_cast"},
    )  # fmt: skip
    log = sim.log_text()
    lines = [
        ln for ln in log.splitlines() if "glmserve patch flashinfer_mla_gather_cast active" in ln
    ]
    assert len(lines) == 8
    assert {ln.split("] ")[0].split()[-1] for ln in lines} == {f"TP{r}" for r in range(8)}
    assert all("(sglang 0.5.9, pid " in ln for ln in lines)
    cfg = httpx.get(sim.url + "/sim/config").json()
    assert cfg["shape"]["cast_mode"] == "gather"
    plain = start_simulator(*FAST)
    cfg0 = httpx.get(plain.url + "/sim/config").json()
    assert cfg0["shape"]["cast_mode"] == "whole_pool"
    assert cfg0["single_stream_terms_s"]["cast"] > 0.05 > cfg["single_stream_terms_s"]["cast"]


# The real patch's refusals (issue 10 #3): the simulator asks the patch module's own
# requirement list, so a launch the real worker refuses dies here too, at the same point
# (init_cuda_graph_state for graphs, the backend's __init__ for dtypes), with the same line.
GTC = "glmserve patch flashinfer_mla_gather_cast"
PATCH_CASES = {
    "cuda_graphs_on": (
        (),
        "FAILED: CUDA graphs are on; the gather-then-cast patch supports only "
        "--disable-cuda-graph (the flashinfer_gtc profile sets it)",
        "KV Cache is allocated",  # the refusal comes after the pool, at graph init
    ),
    "bf16_kv": (
        ("--disable-cuda-graph", "--kv-cache-dtype", "bf16"),
        "FAILED: KV cache dtype is torch.bfloat16, not torch.float8_e4m3fn",
        "KV Cache is allocated",
    ),
    "unsupported_release": (
        ("--disable-cuda-graph", "--sim-sglang-version", "0.5.24"),
        "FAILED: unsupported sglang 0.5.24 (supported: 0.5.8 to 0.5.23",
        "Load weight end.",
    ),
}


@pytest.mark.parametrize("case", sorted(PATCH_CASES))
def test_patch_refusal_kills_workers_with_the_real_failed_line(start_simulator, case):
    from glmserve.diagnose import Category, diagnose_text

    args, needle, before = PATCH_CASES[case]
    sim = start_simulator(
        "--tp-size", "8", *args, *FAST, env={"GLMSERVE_PATCHES": "flashinfer_mla_gather_cast"},
        wait_ready=False,
    )  # fmt: skip
    assert sim.wait_exit(30) == KILLED
    log = sim.log_text()
    failed = [ln for ln in log.splitlines() if f"{GTC} {needle}" in ln]
    assert len(failed) >= 8, log[-3000:]  # every rank's worker logs it
    assert log.index(before) < log.index(f"{GTC} FAILED")
    assert "Capture cuda graph begin" not in log
    assert "The server is fired up and ready to roll!" not in log
    if case == "unsupported_release":
        assert f"{GTC} active" not in log  # refused at import: never active
    else:
        assert log.count(f"{GTC} active") == 8
    diag = diagnose_text(log)
    assert diag.category is Category.PATCH_FAILED, diag
