"""Crash log templates, modelled on real SGLang failure logs (sources cited per kind).

Shape of a real SGLang crash (sglang 0.5.9, ``managers/scheduler.py`` ``run_scheduler_process``
and ``entrypoints/engine.py``): the failing scheduler logs ``Scheduler hit an exception:`` plus
the traceback and sends SIGQUIT to the launcher, which logs ``Received sigquit from a child
process. It usually means the child failed.`` and calls ``kill_process_tree(os.getpid())``:
SIGKILL to itself, so the shell sees exit status 137. After start-up the tokenizer manager's
``running_phase_sigquit_handler`` logs ``SIGQUIT received. signum=..., frame=... It usually
means one child failed.`` instead. Other ranks then fail with cascade errors (NCCL/gloo
peers gone) *after* the root cause; a log classifier must pick the first root cause.

Frame line numbers are those of sglang 0.5.9's source.
"""

from __future__ import annotations

from dataclasses import dataclass

from glmserve.config.spec import SM100_ONLY_ATTENTION_BACKENDS

SITE = "/root/venv/lib/python3.12/site-packages"
SG = f"{SITE}/sglang/srt"

# Where each kind's text comes from (public logs), for whoever maintains the templates.
SOURCES = {
    "kv_no_memory": [
        "sglang 0.5.9 srt/model_executor/model_runner_kv_cache_mixin.py:415-419 (init_memory_pool)",
    ],
    "oom": [
        "https://github.com/sgl-project/sglang/issues/8864",
        "https://github.com/QwenLM/Qwen3-Coder/issues/174",
    ],
    "flashinfer_fp8_static_assert": [
        "../shared/seeds (flashinfer mla.cuh:523 static_assert(sizeof(DType) == 2))",
        "https://github.com/flashinfer-ai/flashinfer/issues/2085",
        "https://github.com/vllm-project/vllm/issues/31843",
    ],
    "no_kernel_image": [
        "https://github.com/NVIDIA/cuda-samples/issues/170",
        "https://github.com/sgl-project/sglang/issues/3713 (CUDA error frame format)",
    ],
    "tllm_unsupported_arch": [
        "https://github.com/sgl-project/sglang/issues/40558",
        "https://github.com/sgl-project/mini-sglang/issues/129",
        "https://github.com/flashinfer-ai/flashinfer/issues/1466",
    ],
    "nccl_timeout": [
        "https://github.com/sgl-project/sglang/issues/1693",
        "https://github.com/hiyouga/LlamaFactory/issues/7396",
    ],
    "illegal_memory_access": [
        "https://github.com/sgl-project/sglang/issues/3713",
        "https://github.com/sgl-project/sglang/issues/8336",
    ],
    "port_in_use": [
        "https://github.com/sgl-project/sglang/issues/2430",
        "https://github.com/vllm-project/vllm/issues/8204 (uvicorn startup/shutdown lines)",
    ],
    "bad_args": ["python argparse (sglang 0.5.9 server_args.py add_cli_args)"],
    "trtllm_mla_not_blackwell": [
        "sglang 0.5.9 srt/server_args.py:1874-1881 (raised in ServerArgs.__post_init__)",
        "sglang 0.5.23 srt/arg_groups/overrides.py:1205-1213",
    ],
    "xqa_multi_ctas_buffer": [
        "sglang 0.5.23 srt/layers/attention/trtllm_mla_backend.py:1036-1041",
        "flashinfer 0.7.2 flashinfer/mla/_core.py:4205-4210, 4291-4295",
    ],
    "xqa_mla_bf16": ["flashinfer 0.6.3 flashinfer/mla.py:584-601"],
}
# Backend-fact crash kinds (argspec/backend_table.py) refused by ServerArgs before any process
# starts: the launcher's own traceback, exit status 1.
SERVER_ARGS_REFUSALS = frozenset({"trtllm_mla_not_blackwell"})

_CUDA_TAIL = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)

Frame = tuple[str, int, str, str]  # (path under sglang/srt, line, function, code)


def _stack(text: str) -> list[Frame]:
    """Frames written one a line as a traceback reads, ``path:line function | code``."""
    frames = []
    for row in text.strip().splitlines():
        where, _, code = row.strip().partition(" | ")
        location, _, func = where.partition(" ")
        path, _, line = location.rpartition(":")
        frames.append((path, int(line), func, code))
    return frames


# Frames shared by every scheduler-side failure (outermost first).
_INIT_FRAMES = _stack("""
    managers/scheduler.py:3130 run_scheduler_process | scheduler = Scheduler(
    managers/scheduler.py:368 __init__ | self.init_model_worker()
    managers/scheduler.py:564 init_model_worker | self.init_tp_model_worker()
    managers/scheduler.py:522 init_tp_model_worker | self.tp_worker = TpModelWorker(
    managers/tp_worker.py:247 __init__ | self._init_model_runner()
    managers/tp_worker.py:330 _init_model_runner | self._model_runner = ModelRunner(
    model_executor/model_runner.py:413 __init__ | self.initialize(min_per_gpu_memory)
""")
_PHASE_FRAMES = {
    "load": _stack("""
        model_executor/model_runner.py:493 initialize | self.load_model()
        model_executor/model_runner.py:1003 load_model | self.model = get_model(
        model_loader/__init__.py:28 get_model | return loader.load_model(
        model_loader/loader.py:664 load_model | self.load_weights_and_postprocess(
    """),
    "kv": _stack("""
        model_executor/model_runner.py:590 initialize | self.init_memory_pool(min_per_gpu_memory)
        model_executor/model_runner_kv_cache_mixin.py:612 init_memory_pool | \
self.token_to_kv_pool = NSATokenToKVPool(
        mem_cache/memory_pool.py:1405 __init__ | self._create_buffers()
        mem_cache/memory_pool.py:1429 _create_buffers | torch.zeros(
    """),
    "graphs": _stack("""
        model_executor/model_runner.py:609 initialize | self.init_device_graphs()
        model_executor/model_runner.py:2156 init_device_graphs | \
self.graph_runner = graph_runners[self.device](self)
        model_executor/cuda_graph_runner.py:373 __init__ | raise Exception(
    """),
}
_RUN_FRAMES = _stack("""
    managers/scheduler.py:3171 run_scheduler_process | scheduler.event_loop_normal()
    managers/scheduler.py:1123 event_loop_normal | result = self.run_batch(batch)
    managers/scheduler.py:2368 run_batch | \
batch_result = self.model_worker.forward_batch_generation(
    managers/tp_worker.py:456 forward_batch_generation | out = self.model_runner.forward(
    model_executor/model_runner.py:2387 forward | output = self._forward_raw(
    model_executor/model_runner.py:2488 _forward_raw | ret = self.forward_decode(
    model_executor/model_runner.py:2300 forward_decode | return self.model.forward(
""")
# How the first decode of an SM100-only attention backend (spec.SM100_ONLY_ATTENTION_BACKENDS)
# fails elsewhere:
# * trtllm_mla: flashinfer's trtllm-gen FMHA has SM100 cubins only (flashinfer#1466,
#   sglang#40558): "TllmGenFmhaRunner ... Unsupported architecture", as in the seeds.
# * cutlass_mla: sgl-kernel's cutlass_mla_decode is CUTLASS's SM100 (tcgen05) MLA kernel
#   ("cutlass_mla_decode kernel requires blackwell", sglang#5390; FlashInfer's cutlass MLA
#   builds for SM10x/11x only, flashinfer#3669; SM120 has no tcgen05, cutlass#2513). The exact
#   SM120 message was not found in public logs: modelled as CUDA's "no kernel image".
# trtllm-gen names the architecture; any other SM100-only kernel: CUDA's "no kernel image".
_SM100_ONLY_CRASH = {"trtllm_mla": "tllm_unsupported_arch"}


def sm100_only_crash(backend: str | None, gpu_arch: str) -> str | None:
    """The crash kind the first decode hits for ``backend`` on ``gpu_arch``, or None.
    Backends in the facts table (argspec/backend_table.py) are decided per role and release
    by ``options.backend_outcome`` instead (decode trtllm_mla runs on SM120 in 0.5.9):
    None here for them."""
    from glmserve.argspec.backend_table import ROWS

    if any(r.backend == backend for r in ROWS):
        return None
    if gpu_arch == "sm100" or backend not in SM100_ONLY_ATTENTION_BACKENDS:
        return None
    return _SM100_ONLY_CRASH.get(backend, "no_kernel_image")


_ATTN_FRAMES = {
    "cutlass_mla": _stack("""
        layers/attention/cutlass_mla_backend.py:274 forward_decode | o = cutlass_mla_decode(
    """),
    "trtllm_mla": _stack("""
        layers/attention/trtllm_mla_backend.py:1012 forward_decode | \
raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
    """),
    "flashinfer": _stack("""
        layers/attention/flashinfer_mla_backend.py:638 forward_decode | o = decode_wrapper.run(
    """),
}


@dataclass(frozen=True)
class CrashLog:
    """What a crash prints, split by where it goes (rank-prefixed or raw) and how it exits."""

    failing_rank: int
    traceback: str  # follows "Scheduler hit an exception: " on the failing rank's line
    pre_lines: list[str]  # raw lines printed before the scheduler exception (NCCL, JIT)
    exit_status: int = 137


def _frame(path: str, line: int, func: str, code: str) -> str:
    full = path if path.startswith("/") else f"{SG}/{path}"
    return f'  File "{full}", line {line}, in {func}\n    {code}\n'


def _traceback(frames: list[Frame], exc: str) -> str:
    body = "".join(_frame(*f) for f in frames)
    return "Traceback (most recent call last):\n" + body + exc


# No KV pool left after the weights: SGLang refuses before allocating anything (sglang 0.5.9
# srt/model_executor/model_runner_kv_cache_mixin.py:415-419, in init_memory_pool), so the log
# never shows "KV Cache is allocated".
_NO_KV_MEMORY_FRAMES = _stack("""
    model_executor/model_runner.py:590 initialize | self.init_memory_pool(min_per_gpu_memory)
    model_executor/model_runner_kv_cache_mixin.py:416 init_memory_pool | raise RuntimeError(
""")


def exception_text(
    kind: str, rank: int, gpu_arch: str, phase: str, mem_fraction: float | None = None
) -> tuple[str, list[str]]:
    """(exception lines that end the traceback, raw lines printed before it)."""
    if kind == "kv_no_memory":
        return (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            f"Current value: self.server_args.mem_fraction_static={mem_fraction}\n",
            [],
        )
    if kind == "oom":
        return (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.14 GiB. GPU "
            f"{rank} has a total capacity of 94.97 GiB of which 1.37 GiB is free. Including "
            "non-PyTorch memory, this process has 93.58 GiB memory in use. Of the allocated "
            "memory 90.86 GiB is allocated by PyTorch, and 1.21 GiB is reserved by PyTorch but "
            "unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
            "documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n",
            [],
        )
    if kind == "illegal_memory_access":
        return (
            "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
            + _CUDA_TAIL,
            [],
        )
    if kind == "no_kernel_image":
        msg = (
            "torch.AcceleratorError: CUDA error: no kernel image is available for execution "
            "on the device\n" + _CUDA_TAIL
        )
        if phase == "graphs":
            msg = "Exception: Capture cuda graph failed: " + msg + _GRAPH_HELP
        return msg, []
    if kind == "xqa_multi_ctas_buffer":
        return (
            "ValueError: multi_ctas_kv_counter_buffer is only supported by the trtllm-gen "
            "backend\n",
            [],
        )
    if kind == "xqa_mla_bf16":
        return (
            "ValueError: XQA MLA only supports fp8 operation on SM120 GPUs, got torch.bfloat16 "
            "and torch.bfloat16\n",
            [],
        )
    if kind == "tllm_unsupported_arch":
        return (
            "RuntimeError: Error in function 'TllmGenFmhaRunner' at "
            f"{SITE}/flashinfer/data/include/flashinfer/trtllm/fmha/fmhaRunner.cuh:30: "
            "Unsupported architecture\n",
            [],
        )
    if kind == "flashinfer_fp8_static_assert":
        uri = (
            "batch_mla_attention_dtype_q_bf16_dtype_kv_e4m3_dtype_o_bf16_dtype_idx_i32_"
            "head_dim_ckv_512_head_dim_kpe_64_profiler_False"
        )
        cache = f"/root/.cache/flashinfer/0.6.3/{gpu_arch[2:]}a/cached_ops/{uri}"
        return (
            "RuntimeError: Ninja build failed. Ninja output:\n"
            f"[1/3] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile "
            f"--dependency-output {uri}/batch_mla_run.cuda.o.d -DPy_LIMITED_API=0x03090000 "
            f"-gencode=arch=compute_{gpu_arch[2:]}a,code=sm_{gpu_arch[2:]}a -c "
            f"/root/.cache/flashinfer/0.6.3/{gpu_arch[2:]}a/generated/{uri}/batch_mla_run.cu "
            f"-o {cache}/batch_mla_run.cuda.o\n"
            f"FAILED: [code=1] {cache}/batch_mla_run.cuda.o\n"
            f"{SITE}/flashinfer/data/include/flashinfer/attention/mla.cuh(523): error: static "
            "assertion failed\n"
            "    static_assert(sizeof(DTypeKV) == 2);\n"
            "    ^\n"
            '          detected during instantiation of "cudaError_t '
            "flashinfer::mla::BatchMLAPagedAttention<MASK_MODE,HEAD_DIM_CKV,HEAD_DIM_KPE,Params>"
            "(Params, uint32_t, uint32_t, cudaStream_t) [with MASK_MODE=flashinfer::MaskMode::"
            'kNone, HEAD_DIM_CKV=512U, HEAD_DIM_KPE=64U, Params=Params]"\n'
            '1 error detected in the compilation of "batch_mla_run.cu".\n'
            "ninja: build stopped: subcommand failed.\n",
            [],
        )
    if kind == "nccl_timeout":
        ts = "E1130 19:40:12.418254113"
        pre = [
            f"[rank{rank}]:[{ts} ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, "
            "NumelOut=1, Timeout(ms)=600000) ran for 600014 milliseconds before timing out.",
            f"[rank{rank}]:[{ts} ProcessGroupNCCL.cpp:2271] [PG ID 2 PG GUID 3 Rank {rank}]  "
            "failure detected by watchdog at work sequence id: 2 PG status: last enqueued work: "
            "2, last completed work: 1",
        ]
        return (
            f"torch.distributed.DistBackendError: [PG ID 2 PG GUID 3 Rank {rank}] Process group "
            f"watchdog thread terminated with exception: [Rank {rank}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600014 milliseconds before timing out.\n",
            pre,
        )
    raise ValueError(f"no scheduler template for crash kind {kind!r}")


_GRAPH_HELP = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)


def scheduler_crash(
    kind: str,
    phase: str,
    gpu_arch: str,
    backend: str,
    tp_size: int,
    mem_fraction: float | None = None,
) -> CrashLog:
    """The failing rank's traceback for ``kind`` at ``phase`` (load, kv, ..., after-ready)."""
    rank = min(3, tp_size - 1) if kind in ("oom", "nccl_timeout") else 0
    exc, pre = exception_text(kind, rank, gpu_arch, phase, mem_fraction)
    if kind == "kv_no_memory":
        frames = _INIT_FRAMES + _NO_KV_MEMORY_FRAMES
    elif phase in _PHASE_FRAMES:
        frames = _INIT_FRAMES + _PHASE_FRAMES[phase]
    else:
        frames = _RUN_FRAMES + _ATTN_FRAMES.get(backend, _ATTN_FRAMES["flashinfer"])
    if kind == "tllm_unsupported_arch":
        frames = (
            _RUN_FRAMES
            + _ATTN_FRAMES["trtllm_mla"]
            + [
                (
                    f"{SITE}/flashinfer/decode.py",
                    2642,
                    "trtllm_batch_decode_with_kv_cache_mla",
                    "run_func(",
                ),
            ]
        )
    if kind in ("xqa_multi_ctas_buffer", "xqa_mla_bf16"):
        # the decode call of trtllm_mla_backend.forward_decode (0.5.23 :1041, 0.5.9 :860)
        # into FlashInfer's MLA entry point, which picks XQA on SM120 and refuses
        if kind == "xqa_multi_ctas_buffer":
            inner = [
                (
                    "layers/attention/trtllm_mla_backend.py",
                    1041,
                    "_run_decode_kernel",
                    "return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(",
                ),
                (
                    f"{SITE}/flashinfer/mla/_core.py",
                    4895,
                    "trtllm_batch_decode_with_kv_cache_mla",
                    "return _trtllm_batch_decode_with_kv_cache_mla_impl(",
                ),
                (
                    f"{SITE}/flashinfer/mla/_core.py",
                    4293,
                    "_trtllm_batch_decode_with_kv_cache_mla_impl",
                    "raise ValueError(",
                ),
            ]
        else:
            inner = [
                (
                    "layers/attention/trtllm_mla_backend.py",
                    860,
                    "forward_decode",
                    "raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(",
                ),
                (
                    f"{SITE}/flashinfer/mla.py",
                    599,
                    "trtllm_batch_decode_with_kv_cache_mla",
                    "raise ValueError(",
                ),
            ]
        frames = [*_RUN_FRAMES, *inner]
    if kind == "flashinfer_fp8_static_assert":
        frames = [
            *_RUN_FRAMES,
            (
                "layers/attention/flashinfer_mla_backend.py",
                431,
                "init_forward_metadata",
                "self.indices_updater_decode.update(",
            ),
            (
                f"{SITE}/flashinfer/mla.py",
                281,
                "plan",
                "self._cached_module = get_batch_mla_module(",
            ),
            (f"{SITE}/flashinfer/jit/core.py", 310, "build_and_load", "self.build(verbose)"),
            (
                f"{SITE}/flashinfer/jit/cpp_ext.py",
                339,
                "run_ninja",
                "raise RuntimeError(msg) from e",
            ),
        ]
    return CrashLog(failing_rank=rank, traceback=_traceback(frames, exc), pre_lines=pre)


def server_args_refusal(kind: str, version: str) -> str:
    """The launcher's traceback when ServerArgs refuses the backend before anything starts
    (sglang 0.5.9 launch_server.py:32 -> server_args.py:5592, 5078, 740, 1879); Python then
    exits with status 1. From 0.5.2x the check lives in arg_groups/overrides.py."""
    if kind != "trtllm_mla_not_blackwell":
        raise ValueError(f"no server-args template for {kind!r}")
    return (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "<frozen runpy>", line 88, in _run_code\n'
        f'  File "{SITE}/sglang/launch_server.py", line 32, in <module>\n'
        "    server_args = prepare_server_args(sys.argv[1:])\n"
        + _frame("server_args.py", 5592, "prepare_server_args",
                 "return ServerArgs.from_cli_args(raw_args)")
        + _frame("server_args.py", 5078, "from_cli_args",
                 "return cls(**{attr: getattr(args, attr) for attr in attrs})")
        + '  File "<string>", line 326, in __init__\n'
        + _frame("server_args.py", 740, "__post_init__",
                 "self._handle_attention_backend_compatibility()")
        + _frame("server_args.py", 1879, "_handle_attention_backend_compatibility",
                 "raise ValueError(")
        + "ValueError: TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x). "
        "Please use a different backend.\n"
    )  # fmt: skip


def cascade_lines(
    failing_rank: int, tp_size: int, after_ready: bool
) -> list[tuple[int | None, str]]:
    """(tp or None, message) lines that follow the root cause as the tree is torn down."""
    lines: list[tuple[int | None, str]] = []
    if after_ready:
        lines.append(
            (
                None,
                "SIGQUIT received. signum=3, frame=<frame at 0x7f2c1c3b5a40, file "
                "'/usr/lib/python3.12/selectors.py', line 468, code select>. It usually means "
                "one child failed.",
            )
        )
    else:
        lines.append(
            (None, "Received sigquit from a child process. It usually means the child failed.")
        )
    for r in range(tp_size):
        if r == failing_rank:
            continue
        lines.append(
            (
                r,
                "Scheduler hit an exception: Traceback (most recent call last):\n"
                f'  File "{SG}/distributed/parallel_state.py", line 512, in all_reduce\n'
                "    torch.distributed.all_reduce(input_, group=self.device_group)\n"
                "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
                f"Connection closed by peer [127.0.0.1]:{29500 + failing_rank}",
            )
        )
        break  # one cascade line is typical before the SIGKILL lands
    return lines


def port_in_use_lines(pid: int, host: str, port: int) -> list[str]:
    """uvicorn's bind failure as SGLang 0.5.9 prints it. Between "Waiting for application
    shutdown." and "Application shutdown complete." SGLang's lifespan joins its warmup thread
    (see ``SimServer._bind_failed``); then uvicorn exits with status 1."""
    return [
        f"INFO:     Started server process [{pid}]",
        "INFO:     Waiting for application startup.",
        "INFO:     Application startup complete.",
        f"ERROR:    [Errno 98] error while attempting to bind on address ('{host}', {port}): "
        "address already in use",
        "INFO:     Waiting for application shutdown.",
        "INFO:     Application shutdown complete.",
    ]


def nccl_abort_lines(rank: int) -> list[str]:
    """A scheduler killed by PyTorch's NCCL watchdog: C++ terminate, no Python traceback, so
    no "Scheduler hit an exception" and no SIGQUIT to the launcher (sglang#1693)."""
    ts = "E1130 19:40:12.418254113"
    what = (
        f"[PG ID 2 PG GUID 3 Rank {rank}] Process group watchdog thread terminated with "
        f"exception: [Rank {rank}] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
        "for 600014 milliseconds before timing out."
    )
    lib = f"{SITE}/torch/lib/libtorch_cuda.so"
    return [
        f"[rank{rank}]:[{ts} ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600014 milliseconds before timing out.",
        f"[rank{rank}]:[{ts} ProcessGroupNCCL.cpp:2271] [PG ID 2 PG GUID 3 Rank {rank}]  failure "
        "detected by watchdog at work sequence id: 2 PG status: last enqueued work: 2, last "
        "completed work: 1",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  {what}",
        "Exception raised from checkTimeout at "
        "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:635 (most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f3b6d41df86 in "
        f"{SITE}/torch/lib/libc10.so)",
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::"
        f"duration<long, std::ratio<1l, 1000l> > >) + 0x1d2 (0x7f3b6e71a8d2 in {lib})",
        f"frame #2: c10d::ProcessGroupNCCL::Watchdog::runLoop() + 0x969 (0x7f3b6e721313 in {lib})",
        "",
    ]


def dead_scheduler_launcher(rank: int) -> tuple[list[str], str]:
    """What the launcher logs when a scheduler dies during init without reporting
    (sglang 0.5.9 ``engine._wait_for_scheduler_ready``), then its uncaught EOFError; the
    ``finally: kill_process_tree(..., include_parent=False)`` leaves exit status 1."""
    lines = [
        f"Rank {rank} scheduler is dead. Please check if there are relevant logs.",
        "Exit code: -6",
    ]
    tb = (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "<frozen runpy>", line 88, in _run_code\n'
        f'  File "{SITE}/sglang/launch_server.py", line 35, in <module>\n'
        "    run_server(server_args)\n"
        f'  File "{SITE}/sglang/launch_server.py", line 27, in run_server\n'
        "    launch_server(server_args)\n"
        + _frame("entrypoints/http_server.py", 1905, "launch_server",
                 "tokenizer_manager, template_manager, scheduler_infos, port_args = (")
        + _frame("entrypoints/engine.py", 812, "_launch_subprocesses",
                 "scheduler_infos = _wait_for_scheduler_ready(")
        + _frame("entrypoints/engine.py", 892, "_wait_for_scheduler_ready",
                 "data = scheduler_pipe_readers[i].recv()")
        + '  File "/usr/lib/python3.12/multiprocessing/connection.py", line 250, in recv\n'
        "    buf = self._recv_bytes()\n"
        '  File "/usr/lib/python3.12/multiprocessing/connection.py", line 430, in _recv_bytes\n'
        "    buf = self._recv(4)\n"
        '  File "/usr/lib/python3.12/multiprocessing/connection.py", line 399, in _recv\n'
        "    raise EOFError\n"
        "EOFError\n"
    )  # fmt: skip
    return lines, tb


def model_info_unreachable_traceback(host: str, port: int) -> str:
    """``Initialization failed. warmup error:`` after 120 polls of ``/model_info`` got no 200
    (``_execute_server_warmup``'s wait loop; the last poll's traceback is logged)."""
    return (
        "Traceback (most recent call last):\n"
        + _frame("entrypoints/http_server.py", 1678, "_execute_server_warmup",
                 'res = requests.get(url + "/model_info", timeout=5, headers=headers)')
        + f'  File "{SITE}/requests/adapters.py", line 700, in send\n'
        "    raise ConnectionError(e, request=request)\n"
        f"requests.exceptions.ConnectionError: HTTPConnectionPool(host='{host}', port={port}): "
        "Max retries exceeded with url: /model_info (Caused by NewConnectionError('<urllib3."
        "connection.HTTPConnection object at 0x7f2c1c3b2d50>: Failed to establish a new "
        "connection: [Errno 111] Connection refused'))\n"
    )  # fmt: skip


def warmup_timeout_traceback(host: str, port: int) -> str:
    """``Initialization failed. warmup error:`` when the warmup request never returns."""
    return (
        "Traceback (most recent call last):\n"
        + _frame("entrypoints/http_server.py", 1768, "_execute_server_warmup",
                 "res = requests.post(")
        + f'  File "{SITE}/requests/adapters.py", line 713, in send\n'
        "    raise ReadTimeout(e, request=request)\n"
        f"requests.exceptions.ReadTimeout: HTTPConnectionPool(host='{host}', port={port}): "
        "Read timed out. (read timeout=600)\n"
    )  # fmt: skip
