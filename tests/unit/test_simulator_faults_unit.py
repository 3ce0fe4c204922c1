"""Crash templates: each kind's root cause, SGLang's framing, and the cascade after it."""

from __future__ import annotations

import pytest

from glmserve.simulator import faults
from glmserve.simulator.options import CRASH_KINDS

ROOT = {
    "oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate",
    "flashinfer_fp8_static_assert": "mla.cuh(523): error: static assertion failed",
    "no_kernel_image": "CUDA error: no kernel image is available for execution on the device",
    "tllm_unsupported_arch": "Error in function 'TllmGenFmhaRunner'",
    "nccl_timeout": "Watchdog caught collective operation timeout: WorkNCCL(",
    "illegal_memory_access": "CUDA error: an illegal memory access was encountered",
    "kv_no_memory": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static",
    "xqa_multi_ctas_buffer": "ValueError: multi_ctas_kv_counter_buffer is only supported by the",
    "xqa_mla_bf16": "ValueError: XQA MLA only supports fp8 operation on SM120 GPUs",
}


@pytest.mark.parametrize("kind", sorted(ROOT))
@pytest.mark.parametrize("phase", ["load", "kv", "graphs", "warmup", "after-ready"])
def test_every_kind_and_phase_has_a_traceback_with_its_root_cause(kind, phase):
    crash = faults.scheduler_crash(kind, phase, "sm120", "flashinfer", 8)
    assert crash.traceback.startswith("Traceback (most recent call last):\n  File ")
    assert ROOT[kind] in crash.traceback + "\n".join(crash.pre_lines)
    assert 0 <= crash.failing_rank < 8
    assert crash.exit_status == 137
    assert faults.SOURCES.get(kind)


def test_phase_decides_the_stack():
    load = faults.scheduler_crash("oom", "load", "sm120", "flashinfer", 8).traceback
    kv = faults.scheduler_crash("oom", "kv", "sm120", "flashinfer", 8).traceback
    run = faults.scheduler_crash("oom", "after-ready", "sm120", "flashinfer", 8).traceback
    assert "in load_model" in load and "init_memory_pool" not in load
    assert "init_memory_pool" in kv
    assert "event_loop_normal" in run and "in __init__" not in run


def test_cascade_follows_the_root_cause():
    start = faults.cascade_lines(3, 8, after_ready=False)
    assert start[0] == (
        None,
        "Received sigquit from a child process. It usually means the child failed.",
    )
    assert all(tp != 3 for tp, _ in start[1:])
    after = faults.cascade_lines(0, 8, after_ready=True)
    assert after[0][1].startswith("SIGQUIT received.")


def test_all_documented_kinds_have_templates():
    assert set(ROOT) | {"port_in_use", "bad_args"} == set(CRASH_KINDS)
    lines = faults.port_in_use_lines(42, "0.0.0.0", 8000)
    assert "[Errno 98] error while attempting to bind on address ('0.0.0.0', 8000)" in lines[3]
