"""diagnose: rules, root-cause choice, phases, patches, incremental feeding, hostile input."""

from __future__ import annotations

import json
import math
import random
import time

import pytest

from glmserve.diagnose import (
    RULES,
    Category,
    Diagnosis,
    LogDiagnoser,
    State,
    diagnose_lines,
    diagnose_text,
    phase_stall_budget,
)

ARGS = (
    "[2026-11-30 10:00:01] server_args=ServerArgs(model_path='/models/GLM-5-NVFP4', "
    "tokenizer_path='/models/GLM-5-NVFP4', host='0.0.0.0', port=30123, mem_fraction_static=0.88, "
    "max_running_requests=128, chunked_prefill_size=8192, tp_size=8, cuda_graph_max_bs=64, "
    "kv_cache_dtype='fp8_e4m3', attention_backend='flashinfer')"
)
TB = "[2026-11-30 10:01:00 TP3] Scheduler hit an exception: Traceback (most recent call last):"
FRAME = '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2009, in run_scheduler_process'
SRC = "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)"
SIGQUIT = (
    "[2026-11-30 10:01:00] Received sigquit from a child "
    "process. It usually means the child failed."
)


def crash(*lines: str) -> Diagnosis:
    return diagnose_lines([ARGS, TB, FRAME, SRC, *lines, SIGQUIT])


# --- one test per rule family, with the line shapes SGLang and its libraries print ----------


@pytest.mark.parametrize(
    ("error_line", "category"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", Category.OOM),
        (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
            Category.OOM,
        ),
        ("RuntimeError: Prefill out of memory. Try to lower your batch size.", Category.OOM),
        ("OSError: [Errno 12] Cannot allocate memory", Category.OOM),
        (
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            Category.ILLEGAL_MEMORY_ACCESS,
        ),
        ("RuntimeError: CUDA error: unspecified launch failure", Category.ILLEGAL_MEMORY_ACCESS),
        (
            "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO)",
            Category.NCCL,
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970",
            Category.NCCL,
        ),
        (
            "RuntimeError: CUDA error: peer access is not supported between these two devices",
            Category.NCCL,
        ),
        (
            "OSError: /models/x does not appear to have a file named config.json. Checkout ...",
            Category.WEIGHT_LOADING,
        ),
        (
            "safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge",
            Category.WEIGHT_LOADING,
        ),
        (
            "ValueError: Model architectures ['GlmMoeDsaForCausalLM'] are not supported for now.",
            Category.WEIGHT_LOADING,
        ),
        (
            "OSError: Error no file named pytorch_model.bin, model.safetensors found in "
            "directory /models/x.",
            Category.WEIGHT_LOADING,
        ),
        ("OSError: [Errno 98] Address already in use", Category.PORT_IN_USE),
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
            "local network address. port: 29500, code: -98, name: EADDRINUSE, message: address "
            "already in use",
            Category.PORT_IN_USE,
        ),
        (
            "ValueError: Total number of attention heads (64) must be divisible by tensor "
            "parallel size (6).",
            Category.BAD_ARGS,
        ),
        (
            "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:30124')",
            Category.PORT_IN_USE,
        ),
        ("RuntimeError: Ninja build failed. Ninja output:", Category.COMPILE_ERROR),
        ("triton.compiler.errors.CompilationError: at 12:8:", Category.COMPILE_ERROR),
        (
            "triton.runtime.errors.OutOfResources: out of "
            "resource: shared memory, Required: 232448",
            Category.COMPILE_ERROR,
        ),
        (
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            Category.UNSUPPORTED_ARCH,
        ),
        (
            "RuntimeError: Error in function 'TllmGenFmhaRunner' at "
            "fmhaRunner.cuh:37: Unsupported architecture",
            Category.UNSUPPORTED_ARCH,
        ),
        ("mla.cuh(523): here: static_assert(sizeof(DType) == 2);", Category.UNSUPPORTED_KV_DTYPE),
        (
            "ValueError: FP8 KV cache is not supported by the flashmla backend here",
            Category.UNSUPPORTED_KV_DTYPE,
        ),
        (
            "glmserve patch flashinfer_mla_gather_cast FAILED: sglang 0.5.23 is not supported",
            Category.PATCH_FAILED,
        ),
        ("ZeroDivisionError: division by zero", Category.CRASH),
    ],
)
def test_each_rule_family(error_line: str, category: Category) -> None:
    d = crash(error_line)
    assert d.state is State.CRASHED
    assert d.category is category
    assert d.line == 5  # the error line, not the traceback header nor the sigquit after it
    assert d.root_cause == error_line
    assert d.hint


def test_argparse_error_names_the_flag() -> None:
    d = diagnose_text(
        "usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]\n"
        "launch_server.py: error: unrecognized arguments: --nsa-decode-backend trtllm\n"
    )
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.BAD_ARGS, 2)
    assert "--nsa-decode-backend" in (d.hint or "")


def test_ambiguous_and_invalid_choice_hints() -> None:
    amb = diagnose_text(
        "sglang serve: error: ambiguous option: --nsa could match --nsa-x, --nsa-y\n"
    )
    assert amb.category is Category.BAD_ARGS and "--nsa" in (amb.hint or "")
    bad = diagnose_text(
        "launch_server.py: error: argument --attention-backend: invalid choice: 'cutlass_mla' "
        "(choose from 'flashinfer', 'trtllm_mla')\n"
    )
    assert "--attention-backend" in (bad.hint or "") and "trtllm_mla" in (bad.hint or "")


def test_server_args_validation_error_is_bad_args() -> None:
    d = diagnose_lines(
        [
            "Traceback (most recent call last):",
            '  File "/sgl/python/sglang/srt/server_args.py", line 612, in __post_init__',
            "    assert self.tp_size % self.pp_size == 0",
            "AssertionError",
        ]
    )
    assert (d.category, d.line) == (Category.BAD_ARGS, 4)


def test_oom_hint_uses_the_numbers_from_the_log() -> None:
    d = diagnose_lines(
        [
            ARGS,
            "[2026-11-30 10:00:30 TP0] Capture cuda graph begin. "
            "This can take up to several minutes.",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a "
            "total capacity of 94.97 GiB of which 812.00 MiB is free.",
        ]
    )
    assert d.category is Category.OOM and d.phase is State.CAPTURING_GRAPHS
    hint = d.hint or ""
    assert "1.50 GiB" in hint and "812.00 MiB" in hint
    assert "0.88" in hint and "0.83" in hint  # current and a lower mem-fraction-static
    assert "128" in hint and "64" in hint  # max-running-requests, halved
    assert "--cuda-graph-max-bs" in hint


def test_not_enough_memory_hint_raises_the_fraction() -> None:
    d = diagnose_lines(
        [ARGS, "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."]
    )
    assert "raise --mem-fraction-static from 0.88 to 0.91" in (d.hint or "")
    low = diagnose_lines(
        [ARGS.replace("mem_fraction_static=0.88", "mem_fraction_static=0.5"),
         "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."]
    )  # fmt: skip
    assert "raise --mem-fraction-static from 0.5 to 0.88" in (low.hint or "")


def test_port_hint_names_the_port() -> None:
    uvicorn = diagnose_text(
        "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30123): "
        "address already in use\n"
    )
    assert "port 30123" in (uvicorn.hint or "")
    bare = diagnose_lines([ARGS, "OSError: [Errno 98] Address already in use"])
    assert "port 30123" in (bare.hint or "")  # from the server_args line


def test_specific_hints() -> None:
    kv = crash("mla.cuh(523): here: static_assert(sizeof(DType) == 2);")
    assert "FlashInfer MLA needs 16-bit KV; use profile flashinfer_gtc or trtllm_mla" in (
        kv.hint or ""
    )
    tllm = crash(
        "tvm.error.InternalError: Error in function 'TllmGenFmhaRunner': Unsupported architecture"
    )
    assert "SM100" in (tllm.hint or "") and "flashinfer_gtc" in (tllm.hint or "")
    image = crash(
        "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    )
    assert "TORCH_CUDA_ARCH_LIST" in (image.hint or "")
    nccl = crash("RuntimeError: NCCL error: unhandled system error")
    for knob in ("NCCL_P2P_LEVEL", "NCCL_IB_DISABLE", "NCCL_DEBUG=INFO", "NCCL_MIN_NCHANNELS"):
        assert knob in (nccl.hint or "")
    ima = crash("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert "CUDA_LAUNCH_BLOCKING=1" in (ima.hint or "")


def test_rule_table_is_data_driven() -> None:
    """Every category has at least one rule row (CRASH only for SGLang's watchdog kill)."""
    assert {r.category for r in RULES} == set(Category)


# --- choosing the root cause, not the cascade ------------------------------------------------


def test_sigquit_before_the_traceback_is_not_the_root_cause() -> None:
    d = diagnose_lines(
        [
            SIGQUIT,  # the launcher often logs this before the child's traceback is flushed
            TB,
            FRAME,
            SRC,
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "[2026-11-30 10:01:01] Rank 0 scheduler is dead. "
            "Please check if there are relevant logs.",
            "Killed",
        ]
    )
    assert (d.category, d.line) == (Category.ILLEGAL_MEMORY_ACCESS, 5)


def test_chained_exception_keeps_the_first_cause() -> None:
    d = diagnose_lines(
        [
            TB,
            FRAME,
            SRC,
            "ValueError: bad quantization config: group_size=0",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            FRAME,
            SRC,
            "RuntimeError: Initialization failed. Please see the error messages above.",
        ]
    )
    assert (d.category, d.line) == (Category.CRASH, 4)


def test_only_cascade_lines_still_mean_crashed() -> None:
    d = diagnose_text("[2026-11-30 10:00:05 TP0] Load weight begin. avail mem=94.1 GB\nKilled\n")
    assert d.state is State.CRASHED and d.category is Category.CRASH and d.line == 2
    assert "dmesg" in (d.hint or "")


def test_frame_source_lines_are_not_errors() -> None:
    """`raise RuntimeError(f"NCCL error: ...")` is code printed under a frame, not the error."""
    d = diagnose_lines(
        [
            TB,
            '  File "/sgl/srt/distributed/device_communicators/pynccl_wrapper.py", '
            "line 329, in NCCL_CHECK",
            '    raise RuntimeError(f"NCCL error: {error_str}")',
            "RuntimeError: NCCL error: remote process exited or there was a network error",
        ]
    )
    assert (d.category, d.line) == (Category.NCCL, 4)


def test_nccl_timeout_after_another_error_is_cascade() -> None:
    d = diagnose_lines(
        [
            TB,
            FRAME,
            SRC,
            "KeyError: 'model.layers.3.mlp.experts.w13_weight_scale_2'",
            "[rank1]:[E1130 10:11:00.1 ProcessGroupNCCL.cpp:616] "
            "[Rank 1] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600013 milliseconds",
        ]
    )
    # a KeyError on a parameter name is a checkpoint/loader mismatch, wherever it is raised
    assert (d.category, d.line) == (Category.WEIGHT_LOADING, 4)


def test_multi_rank_interleaving_picks_first_error_and_ranks() -> None:
    lines = [ARGS]
    for r in range(8):
        lines.append(f"[2026-11-30 10:00:0{r} TP{r}] Load weight begin. avail mem=94.50 GB")
    for r in (5, 2):
        lines.append(
            f"[2026-11-30 10:02:00 TP{r}] Scheduler hit an "
            f"exception: Traceback (most recent call last):"
        )
    lines += [
        FRAME,
        FRAME,
        SRC,
        SRC,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB.",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB.",
        SIGQUIT,
    ]
    d = diagnose_lines(lines)
    assert d.state is State.CRASHED and d.category is Category.OOM
    assert d.line == 16 and d.phase is State.LOADING_WEIGHTS and d.tp_size == 8
    assert "weights do not fit" in (d.hint or "")


def test_warning_lines_never_crash() -> None:
    d = diagnose_text(
        "[2026-03-03 23:22:54] WARNING server_args.py:1974: cuda graph capture may run out of "
        "memory with this --cuda-graph-max-bs\n"
        "[2026-03-03 23:22:55] Ignore import error when loading sglang.srt.models.glmasr: "
        "cannot import name 'GlmAsrConfig'\n"
        "The following error message 'operation scheduled before its operands' can be ignored.\n"
        "[2026-03-03 23:22:56] Load weight begin. avail mem=78.81 GB\n"
    )
    assert d.state is State.LOADING_WEIGHTS and d.category is None


def test_sglang_watchdog_kill_is_the_root_cause() -> None:
    d = diagnose_lines(
        [
            "[2026-11-30 10:30:00 TP0] Decode batch. #running-req: 3",
            "[2026-11-30 10:35:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, "
            "self.soft=False)",
            SIGQUIT,
        ]
    )
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.CRASH, 2)
    assert "py-spy" in (d.hint or "")


def test_decode_retraction_is_not_a_crash() -> None:
    """SGLang logs "Decode out of memory happened" when it retracts requests and carries on."""
    lines = [
        f"[2025-03-07 21:49:{s:02d} TP{r}] Decode out of memory happened. #retracted_reqs: 1, "
        "#new_token_ratio: 0.1474 -> 0.1845"
        for s, r in ((33, 13), (33, 12), (45, 9))
    ]
    assert diagnose_lines(lines).state is State.STARTING
    fatal = diagnose_lines(
        [*lines, "RuntimeError: Decode out of memory. Try to lower your batch size."]
    )
    assert (fatal.state, fatal.category, fatal.line) == (State.CRASHED, Category.OOM, 4)


def test_warning_explains_a_crash_proven_elsewhere() -> None:
    d = diagnose_text(
        "host:1:2 [0] NCCL WARN socketStartConnect: Connect to 10.0.0.2<1234> failed\n"
        "[2026-11-30 10:02:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    )
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.NCCL, 1)


def test_ready_after_a_non_fatal_traceback_is_ready() -> None:
    d = diagnose_text(
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/dist-packages/x.py", line 3, in probe\n'
        "    import foo\n"
        "ModuleNotFoundError: No module named 'foo'\n"
        "[2026-11-30 10:05:00] The server is fired up and ready to roll!\n"
    )
    assert d.state is State.READY and d.category is None and d.ready_line == 5


def test_request_error_after_ready_keeps_ready_but_a_dead_scheduler_crashes() -> None:
    ready = "[2026-11-30 10:05:00] The server is fired up and ready to roll!"
    request_error = [
        "[2026-11-30 10:06:00] ERROR:    Exception in ASGI application",
        "Traceback (most recent call last):",
        '  File "/sgl/srt/entrypoints/http_server.py", line 400, in generate_request',
        "    raise ValueError(msg)",
        "ValueError: The input (200000 tokens) is longer than the model's context length",
    ]
    assert diagnose_lines([ready, *request_error]).state is State.READY
    died = diagnose_lines(
        [
            ready,
            *request_error,
            "[2026-11-30 10:09:00 TP0] Scheduler hit an exception: "
            "Traceback (most recent call last):",
            FRAME,
            SRC,
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ]
    )
    assert (died.state, died.category, died.line) == (
        State.CRASHED,
        Category.ILLEGAL_MEMORY_ACCESS,
        10,
    )


def test_old_survived_request_error_is_not_the_root_of_a_later_crash() -> None:
    lines = [
        "[2026-11-30 10:05:00] The server is fired up and ready to roll!",
        "ValueError: The input (200000 tokens) is longer than the model's context length",
    ]
    lines += [f"[2026-11-30 10:06:00 TP0] Decode batch. #running-req: {i}" for i in range(300)]
    lines += ["AssertionError: bad batch state", SIGQUIT]
    d = diagnose_lines(lines)
    assert (d.state, d.line) == (State.CRASHED, 303)


# --- phases ----------------------------------------------------------------------------------


def test_phases_in_order_and_0_5_23_capture_line() -> None:
    steps = [
        (ARGS, State.STARTING),
        ("[2026-11-30 10:00:02 TP0] Load weight begin. avail mem=94.50 GB", State.LOADING_WEIGHTS),
        (
            "[2026-11-30 10:09:02 TP0] Load weight end. type=GlmMoeDsaForCausalLM",
            State.LOADING_WEIGHTS,
        ),
        ("[2026-11-30 10:09:03 TP0] KV Cache is allocated. #tokens: 495000", State.KV_ALLOCATED),
        (
            "[2026-11-30 10:09:04 TP0] Capture target decode cuda graph begin. bs=[1, 2, 4]",
            State.CAPTURING_GRAPHS,
        ),
        (
            "[2026-11-30 10:12:04 TP0] max_total_num_tokens=495000, max_running_requests=128",
            State.CAPTURING_GRAPHS,
        ),
        ("[2026-11-30 10:12:05] INFO:     Uvicorn running on http://0.0.0.0:30123", State.WARMUP),
        (
            '[2026-11-30 10:12:06] INFO:     127.0.0.1:1 - "POST /generate HTTP/1.1" 200 OK',
            State.WARMUP,
        ),
        ("[2026-11-30 10:12:07] The server is fired up and ready to roll!", State.READY),
    ]
    diag = LogDiagnoser()
    for line, state in steps:
        diag.feed(line)
        assert diag.diagnosis.state is state, line
    d = diag.diagnosis
    assert d.ready_line == 9 and d.last_progress_line == 9 and d.category is None


def test_a_lagging_rank_does_not_move_the_phase_back() -> None:
    d = diagnose_text(
        "[t TP0] x\n"
        "[2026-11-30 10:09:03 TP0] KV Cache is allocated. #tokens: 1\n"
        "[2026-11-30 10:09:04 TP7] Load weight begin. avail mem=94.50 GB\n"
    )
    assert d.phase is State.KV_ALLOCATED and d.last_progress_line == 3


# --- patches (issue 7: "patch active on k/N ranks") -----------------------------------------


def test_patch_active_counts_distinct_ranks() -> None:
    lines = [ARGS]
    for r in (0, 1, 2, 2, 5):  # rank 2 logs twice (re-import): counted once
        lines.append(
            f"[2026-11-30 10:00:09 TP{r}] glmserve patch flashinfer_mla_gather_cast active "
            f"(sglang 0.5.9, pid {4100 + r})"
        )
    d = diagnose_lines(lines)
    assert d.patch_ranks_active == {0, 1, 2, 5}
    assert d.patches == ["flashinfer_mla_gather_cast"]
    assert d.patch_active == "4/8" and d.to_dict()["patch_active"] == "4/8"
    assert d.state is State.STARTING


def test_armed_patches_show_zero_active_until_workers_report() -> None:
    armed = "glmserve runtime: patches armed: flashinfer_mla_gather_cast (pid 4000)"
    d = diagnose_lines([ARGS, armed])
    assert d.patches == ["flashinfer_mla_gather_cast"] and d.patch_active == "0/8"
    d = diagnose_lines(
        [ARGS, armed, "glmserve patch flashinfer_mla_gather_cast active (sglang 0.5.9, pid 4001)"]
    )
    assert d.patch_active == "1/8"


def test_patch_lines_without_prefix_count_pids() -> None:
    d = diagnose_text(
        "glmserve patch p1 active (sglang 0.5.8, pid 11)\n"
        "glmserve patch p1 active (sglang 0.5.8, pid 12)\n"
        "glmserve patch p1 active (sglang 0.5.8, pid 12)\n"
    )
    assert d.patch_active == "2/?"
    assert diagnose_text("plain\n").patch_active is None


# --- watcher helpers -------------------------------------------------------------------------


def test_stalled_and_exited_helpers() -> None:
    d = diagnose_text("[2026-11-30 10:00:02 TP0] Capture cuda graph begin.\n")
    s = d.stalled(1234)
    assert s.state is State.STALLED and s.phase is State.CAPTURING_GRAPHS and s.category is None
    assert "1234" in (s.hint or "") and d.state is State.CAPTURING_GRAPHS  # d unchanged
    e = d.exited(137)
    assert e.state is State.EXITED and e.exit_code == 137 and "SIGKILL" in (e.hint or "")
    crashed = crash("RuntimeError: NCCL error: unhandled system error")
    assert crashed.exited(1).state is State.CRASHED and crashed.exited(1).exit_code == 1
    assert crashed.stalled(10).state is State.CRASHED


def test_phase_stall_budget_is_phase_aware() -> None:
    assert phase_stall_budget(State.LOADING_WEIGHTS) > phase_stall_budget(State.WARMUP)
    assert phase_stall_budget(State.CAPTURING_GRAPHS) >= 600
    assert phase_stall_budget("WARMUP") == phase_stall_budget(State.WARMUP)
    assert math.isinf(phase_stall_budget(State.READY))


def test_to_dict_is_json_with_the_contract_keys() -> None:
    d = crash("RuntimeError: NCCL error: unhandled system error")
    data = json.loads(json.dumps(d.to_dict()))
    for key in ("state", "category", "line", "root_cause", "hint", "patch_active"):
        assert key in data
    assert data["state"] == "CRASHED" and data["category"] == "NCCL" and data["line"] == 5
    ready = diagnose_text("[2026-11-30 10:12:07] The server is fired up and ready to roll!\n")
    assert ready.to_dict()["category"] is None


# --- incremental feeding ---------------------------------------------------------------------


def _mixed_log() -> list[str]:
    return [
        ARGS,
        "[2026-11-30 10:00:02 TP0] Load weight begin. avail mem=94.50 GB",
        "\rLoading safetensors checkpoint shards:  50% Completed | 1/2\rLoading safetensors "
        "checkpoint shards: 100% Completed | 2/2",
        "[2026-11-30 10:00:09 TP1] glmserve patch "
        "flashinfer_mla_gather_cast active (sglang 0.5.9, pid 9)",
        SIGQUIT,
        TB,
        FRAME,
        SRC,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB.",
        "Killed",
    ]


def test_incremental_feed_equals_whole_text() -> None:
    lines = _mixed_log()
    whole = diagnose_text("\n".join(lines) + "\n")
    inc = LogDiagnoser()
    changes = [d for d in (inc.feed(line + "\n") for line in lines) if d is not None]
    assert inc.diagnosis == whole
    assert inc.lines_seen == len(lines)
    # the sigquit makes it CRASHED at once; the scheduler's own report ("hit an exception")
    # then outranks the launcher's sigquit, and the OOM line finally names the root cause
    assert [(c.state, c.category, c.line) for c in changes] == [
        (State.LOADING_WEIGHTS, None, None),
        (State.CRASHED, Category.CRASH, 5),
        (State.CRASHED, Category.CRASH, 6),
        (State.CRASHED, Category.OOM, 9),
    ]
    # a chunk with embedded newlines counts as several lines
    chunked = LogDiagnoser()
    chunked.feed("\n".join(lines[:4]))
    chunked.feed("\n".join(lines[4:]))
    assert chunked.diagnosis == whole and chunked.lines_seen == len(lines)


def test_feed_returns_none_when_nothing_changes() -> None:
    diag = LogDiagnoser()
    assert diag.feed("[2026-11-30 10:00:02 TP0] Load weight begin.") is not None
    assert diag.feed("[2026-11-30 10:00:03 TP1] Load weight begin.") is None
    assert diag.feed("random chatter") is None


# --- hostile input ---------------------------------------------------------------------------


def test_hostile_input_never_raises() -> None:
    rng = random.Random(1234)
    garbage = bytes(rng.randrange(256) for _ in range(20000))
    diag = LogDiagnoser()
    diag.feed(garbage)  # bytes are decoded with replacement
    diag.feed(garbage.decode("latin-1"))
    diag.feed("\x00\x01\x02" * 1000)
    diag.feed("\x1b[31mRuntimeError: CUDA error: an illegal memory access\x1b[0m\r\n")
    assert diag.diagnosis.category is Category.ILLEGAL_MEMORY_ACCESS
    for _ in range(50):
        diag.feed("".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(200))))
    assert diagnose_text("") == LogDiagnoser().diagnosis
    assert diagnose_text("\r\r\n\n\r").state is State.STARTING


def test_ansi_crlf_and_tqdm_redraws() -> None:
    text = (
        "\x1b[32m[2026-11-30 10:00:02 TP0] Load weight begin. avail mem=94.50 GB\x1b[0m\r\n"
        "Capturing batches (bs=4 avail_mem=7.10 GB):   0%|    | 0/3\rCapturing batches "
        "(bs=1 avail_mem=7.04 GB): 100%|####| 3/3\r\n"
        "\x1b[1;31m[2026-11-30 10:03:00 TP0] Scheduler hit an exception: Traceback (most recent "
        "call last):\x1b[0m\r\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\r\n"
    )
    d = diagnose_text(text)
    assert (d.state, d.category, d.line, d.phase) == (
        State.CRASHED,
        Category.OOM,
        4,
        State.CAPTURING_GRAPHS,
    )
    assert "\x1b" not in (d.root_cause or "") and not (d.root_cause or "").endswith("\r")


@pytest.mark.slow
def test_huge_lines_and_long_logs_stay_fast() -> None:
    huge = "x" * 5_000_000 + " RuntimeError: CUDA error: an illegal memory access"
    diag = LogDiagnoser()
    t0 = time.perf_counter()
    diag.feed(huge)
    assert time.perf_counter() - t0 < 2.0
    assert len(diag.diagnosis.root_cause or "") <= 600 or diag.diagnosis.root_cause is None
    lines = [
        f"[2026-11-30 10:00:{i % 60:02d} TP{i % 8}] Decode batch. #running-req: 1"
        for i in range(100_000)
    ]
    t0 = time.perf_counter()
    d = diagnose_lines(lines)
    elapsed = time.perf_counter() - t0
    # ~30 us/line on a dev box; the bound only catches a regression to regex-per-rule scans.
    # Decode statistics with requests running only come from a serving server: READY.
    assert d.state is State.READY and elapsed < 20.0, elapsed


# --- error families and log formats seen in real SGLang issues (corpus round 2) ---------------


def test_usage_banner_alone_is_bad_args_but_the_error_line_wins() -> None:
    banner = (
        "usage: launch_server.py [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH]"
    )
    d = diagnose_lines(
        ["INFO 03-06 10:05:08 __init__.py:190] Automatically detected platform cuda.", banner]
    )
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.BAD_ARGS, 2)
    d = diagnose_lines(
        [banner, "launch_server.py: error: unrecognized arguments: --enable_metrics"]
    )
    assert (d.category, d.line) == (Category.BAD_ARGS, 2)
    assert d.hint and "--enable_metrics" in d.hint


def test_keyerror_on_a_parameter_name_is_weight_loading_without_frames() -> None:
    d = diagnose_lines(["KeyError: 'model.layers.55.mlp.gate_up_proj.input_scale'"])
    assert (d.category, d.line) == (Category.WEIGHT_LOADING, 1)
    # an ordinary KeyError stays a generic crash
    d = diagnose_lines(["KeyError: 'messages'"])
    assert d.category is Category.CRASH


def test_failed_compiler_subprocess_explains_a_later_scheduler_death() -> None:
    gcc = (
        "[2025-03-10 14:17:52 TP6] Ignore import error when loading sglang.srt.models.deepseek_v2. "
        "Command '['/usr/bin/gcc', '/tmp/x/main.c', '-O3', '-shared']' returned non-zero exit "
        "status 1."
    )
    d = diagnose_lines([gcc])
    assert d.state is not State.CRASHED  # a skipped import alone is not a crash
    d = diagnose_lines([gcc, TB])
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.COMPILE_ERROR, 1)


def test_cuda_kernel_assertion_is_the_first_error() -> None:
    d = diagnose_lines(
        [
            "../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: "
            '[4,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` '
            "failed.",
            "Exception in ModelRpcClient:",
            "Traceback (most recent call last):",
            "RuntimeError: CUDA error: device-side assert triggered",
        ]
    )
    assert (d.category, d.line) == (Category.CRASH, 1)
    assert d.hint and "device-side assert" in d.hint


def test_gloo_peer_loss_is_nccl_family_but_weak() -> None:
    gloo = (
        "Exception: Capture cuda graph failed: "
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"
    )
    assert diagnose_lines([gloo]).category is Category.NCCL
    d = diagnose_lines(["torch.OutOfMemoryError: CUDA out of memory.", gloo])
    assert (d.category, d.line) == (Category.OOM, 1)


@pytest.mark.parametrize(
    ("line", "rank_free_start"),
    [
        (
            "[2026-04-13 10:35:45 PP1 ATTN_CP7 TP7] Scheduler hit an exception: Traceback",
            "Scheduler",
        ),
        ("[17:25:03 TP0] Scheduler hit an exception: Traceback", "Scheduler"),
        ("2025-08-15 14:25:48] DetokenizerManager hit an exception: Traceback", "Detokenizer"),
        (
            "ERROR 2025-04-07T19:13:52.3178Z [2025-04-07 19:13:52] Received sigquit from a child",
            "Received",
        ),
        ("2025-03-07 23:50:27,531 - __main__ - INFO - [2025-03-07 23:50:27 TP0] Killed", "Killed"),
        ("[rank0]: RuntimeError: CUDA error: out of memory", "RuntimeError"),
    ],
)
def test_prefix_variants_are_stripped(line: str, rank_free_start: str) -> None:
    d = diagnose_lines([line])
    assert d.state is State.CRASHED and d.root_cause and d.root_cause.startswith(rank_free_start)


def test_self_report_outranks_the_launchers_sigquit() -> None:
    d = diagnose_lines([SIGQUIT, TB, FRAME, SRC])
    assert (d.category, d.line) == (Category.CRASH, 2)
    assert d.hint and "exception line is not in the log" in d.hint


def test_logged_traceback_before_ready_is_a_crash_but_not_after() -> None:
    tb = "[2024-10-22 06:31:49 TP0] Traceback (most recent call last):"
    d = diagnose_lines(["[2024-10-22 06:31:49 TP0] Capture cuda graph begin.", tb, FRAME])
    assert (d.state, d.line) == (State.CRASHED, 2)
    d = diagnose_lines(
        ["[2024-10-22 06:31:49] The server is fired up and ready to roll!", tb, FRAME]
    )
    assert d.state is State.READY


def test_decode_statistics_mean_ready_and_kernel_warmup_is_not_warmup() -> None:
    d = diagnose_lines(["[2025-12-12 08:43:59 TP0] Decode batch, #running-req: 6, #token: 1920"])
    assert d.state is State.READY
    d = diagnose_lines(
        [
            "DeepGEMM warmup: 100%|█████| 128/128 [00:00<00:00, 3853.51it/s]",
            "[2025-12-26 08:58:40 DP0 TP0 EP0] Entering DeepGEMM JIT Pre-Compile session.",
        ]
    )
    assert d.state is State.STARTING and d.last_progress_line == 1


def test_escaped_quote_frames_hide_their_source_lines() -> None:
    d = diagnose_lines(
        [
            'File \\"/usr/local/lib/python3.12/dist-packages/torch/cuda/graphs.py\\", line 117',
            '    raise RuntimeError(f"NCCL error: {msg}")',
            "torch.AcceleratorError: CUDA error: an illegal instruction was encountered",
        ]
    )
    assert (d.category, d.line) == (Category.ILLEGAL_MEMORY_ACCESS, 3)


@pytest.mark.parametrize(
    "line",
    [
        "usage: a [-h]" + " [--x X]" * 150_000,
        "KeyError: '" + "a." * 500_000 + "'",
        "KeyError: '" + "weight" * 170_000,
        "Command '['/usr/bin/gcc'" + ", '-O3'" * 120_000,
        "block: [0,0,0], thread: [1,0,0] Assertion " + "x" * 1_000_000,
        "[2025-01-01 00:00:00" + " TP1" * 250_000,
        "../third_party/gloo/gloo/transport/tcp/" * 25_000,
        "DeepGEMM warmup" + " 1%|" * 250_000,
    ],
)
def test_one_megabyte_pathological_lines_stay_linear(line: str) -> None:
    diag = LogDiagnoser()
    t0 = time.perf_counter()
    for _ in range(3):
        diag.feed(line)
    assert time.perf_counter() - t0 < 1.5


@pytest.mark.parametrize(
    "backend, sm100_only", [("cutlass_mla", True), ("trtllm_mla", True), ("flashinfer", False)]
)
def test_no_kernel_image_under_an_sm100_only_backend_says_switch_not_rebuild(
    backend: str, sm100_only: bool
) -> None:
    """A missing kernel image is usually a packaging problem (rebuild for the arch), but under
    an attention backend whose decode kernel exists only for SM100 no rebuild helps."""
    d = diagnose_lines(
        [
            ARGS.replace("attention_backend='flashinfer'", f"attention_backend='{backend}'"),
            TB,
            FRAME,
            SRC,
            "torch.AcceleratorError: CUDA error: no kernel image is available for execution on "
            "the device",
            SIGQUIT,
        ]
    )
    assert d.category is Category.UNSUPPORTED_ARCH
    hint = d.hint or ""
    assert ("SM100-class" in hint and backend in hint and "flashinfer_gtc" in hint) is sm100_only
    assert ("TORCH_CUDA_ARCH_LIST" in hint) is not sm100_only
