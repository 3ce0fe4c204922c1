"""SGLang 0.5.9's start-up, phase by phase, as the simulated processes log it.

Each phase (``load`` weights, ``kv`` pool, cuda ``graphs``, ``warmup``) takes its configured
seconds (scaled by ``--sim-speed``) and logs what each TP rank's scheduler logs there
(``model_runner.py``, ``memory_pool.py``, ``cuda_graph_runner.py``, ``scheduler.py``,
``http_server.py``); a fault asked for at a phase fires midway through it
(``fault_injection``). The server (``server.SimServer``) runs the phases in order.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from typing import TYPE_CHECKING

from glmserve.simulator import costmodel, fault_injection, faults
from glmserve.simulator.engine import Request
from glmserve.simulator.handlers.generation import CollectSink, RequestGroup
from glmserve.simulator.logs import progress_bar

if TYPE_CHECKING:
    from glmserve.simulator.server import SimServer

ARCHITECTURE = "GlmMoeDsaForCausalLM"  # the model the simulator serves (GLM-5)
MODEL_TYPE = "glm_moe_dsa"
PATCH_LINE = "glmserve patch {name} active (sglang {version}, pid {pid})"
WORKER_PID_BASE = 1000  # fake scheduler PIDs: launcher pid + base + rank
AVAIL_MEM_GIB = 93.42  # free memory SGLang reports on an idle RTX PRO 6000 (96 GB) at start


def log_backend_choice(server: SimServer) -> None:
    """What ServerArgs logs about the attention backend it picked (``__post_init__``, in the
    launcher; before its backend refusals, server_args.py:1879 and on)."""
    srv = server.opts.server
    for line in costmodel.backend_log_lines(
        srv.attention_backend,
        srv.prefill_attention_backend,
        srv.decode_attention_backend,
        server.opts.gpu_arch,
    ):
        server.log.line(line)


def log_server_args(server: SimServer) -> None:
    """The line with every ServerArgs field as the dataclass repr prints it."""
    parts = []
    for k, v in server.opts.server_args().items():
        parts.append(f"{k}={v!r}")
    server.log.line("server_args=ServerArgs(" + ", ".join(parts) + ")")


async def run_phase(server: SimServer, phase: str) -> None:
    """Log one start-up phase over its configured duration; crash/hang if asked."""
    o = server.opts
    dur = server.scaled(o.phase_seconds.get(phase, 0.0))
    if phase == "load":
        await load_weights(server, dur)
    elif phase == "kv":
        await asyncio.sleep(dur)
        await fault_injection.maybe_fault(server, "kv")
        log_kv(server)
        # the attention backend is built after the pool: the patch may refuse it here
        fault_injection.maybe_patch_fails(server, "init")
    elif phase == "graphs":
        fault_injection.maybe_patch_fails(server, "cuda_graph")
        await capture_graphs(server, dur)
    elif phase == "warmup":
        await warmup(server, dur)


async def load_weights(server: SimServer, dur: float) -> None:
    """Torch distributed init, then the checkpoint shards' progress bar over ``dur``; each
    rank's "Load weight end" line (and the gather-cast patch's activation line)."""
    o = server.opts
    pids = [server.pid + WORKER_PID_BASE + r for r in server.ranks]
    for r in server.ranks:
        server.log.line("Init torch distributed begin.", r)
    for r in server.ranks:
        server.log.line("Init torch distributed ends. elapsed=0.84 s, mem usage=0.78 GB", r)
    if o.crash_at == "load" and o.crash_kind == "nccl_timeout":
        fault_injection.crash_now(server, "load")
    for r in server.ranks:
        server.log.line(f"Load weight begin. avail mem={AVAIL_MEM_GIB:.2f} GB", r)
    shards = 83
    t0 = time.perf_counter()
    steps = 6
    for i in range(steps + 1):
        done = shards * i // steps
        server.log.raw(
            progress_bar(
                "Loading safetensors checkpoint shards",
                done,
                shards,
                time.perf_counter() - t0 + 1e-3,
            )
        )
        if i == steps // 2:
            await fault_injection.maybe_fault(server, "load")
        if i < steps:
            await asyncio.sleep(dur / steps)
    server.weight_load_s = time.perf_counter() - t0
    for r, pid in zip(server.ranks, pids, strict=True):
        server.log.line(
            f"Load weight end. elapsed={server.weight_load_s:.2f} s, type={ARCHITECTURE}, "
            f"dtype=torch.bfloat16, avail mem={AVAIL_MEM_GIB - o.model.weight_mem_gib:.2f} GB, "
            f"mem usage={o.model.weight_mem_gib:.2f} GB.",
            r,
        )
        if costmodel.GATHER_CAST_PATCH in o.patches and not fault_injection.patch_refusal(
            server, "import"
        ):
            server.log.line(
                PATCH_LINE.format(
                    name=costmodel.GATHER_CAST_PATCH, version=o.sglang_version, pid=pid
                ),
                r,
            )
        if costmodel.MLA_FP8_PATCH in o.patches and not fault_injection.patch_refusal(
            server, "import"
        ):
            server.log.line(
                PATCH_LINE.format(name=costmodel.MLA_FP8_PATCH, version=o.sglang_version, pid=pid),
                r,
            )
    fault_injection.maybe_patch_fails(server, "import")


def log_kv(server: SimServer) -> None:
    """The KV pool each rank allocates (``--max-total-tokens`` or the cost model's pool)."""
    o = server.opts
    tokens = o.pool_tokens
    size = (
        costmodel.kv_pool_gib(o.model, o.shape)
        if not o.server.max_total_tokens
        else (
            tokens
            * costmodel.KV_ROW_ELEMS
            * costmodel.kv_bytes_per_elem(o.shape.kv_cache_dtype)
            * o.model.layers
            / costmodel.GIB
        )
    )
    avail = AVAIL_MEM_GIB - o.model.weight_mem_gib
    for r in server.ranks:
        server.log.line(f"KV Cache is allocated. #tokens: {tokens}, KV size: {size:.2f} GB", r)
    for r in server.ranks:
        server.log.line(f"Memory pool end. avail mem={avail - size:.2f} GB", r)


async def capture_graphs(server: SimServer, dur: float) -> None:
    """CUDA graph capture over ``dur``, with its progress bar (skipped when graphs are off)."""
    o = server.opts
    avail = AVAIL_MEM_GIB - o.model.weight_mem_gib - costmodel.kv_pool_gib(o.model, o.shape)
    for r in server.ranks:
        server.log.line(
            "Capture cuda graph begin. This can take up to several minutes. "
            f"avail mem={avail:.2f} GB",
            r,
        )
    server.log.line(
        "Capture cuda graph bs [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]", server.ranks[0]
    )
    n = 12
    t0 = time.perf_counter()
    for i in range(n + 1):
        server.log.raw(
            progress_bar(
                f"Capturing batches (bs={64 - 5 * i if i < n else 1} "
                f"avail_mem={avail - 0.05 * i:.2f} GB)",
                i,
                n,
                time.perf_counter() - t0 + 1e-3,
            )
        )
        if i == n // 2:
            await fault_injection.maybe_fault(server, "graphs")
        if i < n:
            await asyncio.sleep(dur / n)
    el = time.perf_counter() - t0
    for r in server.ranks:
        server.log.line(
            f"Capture cuda graph end. Time elapsed: {el:.2f} s. mem usage=0.61 GB. "
            f"avail mem={avail - 0.61:.2f} GB.",
            r,
        )


def log_scheduler_ready(server: SimServer) -> None:
    """Rank 0's summary line once every scheduler is ready (before uvicorn starts)."""
    o = server.opts
    avail = AVAIL_MEM_GIB - o.model.weight_mem_gib - costmodel.kv_pool_gib(o.model, o.shape) - 0.61
    chunked = o.server.chunked_prefill_size or 8192
    server.log.line(
        f"max_total_num_tokens={o.pool_tokens}, chunked_prefill_size={chunked}, "
        f"max_prefill_tokens={o.server.max_prefill_tokens}, "
        f"max_running_requests={o.max_running_requests}, "
        f"context_len={o.server.context_length or o.model.context_len}, "
        f"available_gpu_mem={avail:.2f} GB",
        0,
    )


async def warmup(server: SimServer, dur: float) -> None:
    """``_wait_and_warmup``: GET /model_info, then one short /generate through the engine;
    SIGKILL after the (scaled) 600 s timeout when no scheduler answers."""
    o = server.opts
    server.log.line('INFO:     127.0.0.1:51234 - "GET /model_info HTTP/1.1" 200 OK')
    if o.server.skip_server_warmup:
        return
    await asyncio.sleep(dur / 2)
    await fault_injection.maybe_fault(server, "warmup")
    if (kind := faults.sm100_only_crash(o.shape.attention_backend, o.gpu_arch)) is not None:
        # the first decode at warmup runs the backend's SM100-only kernel: it fails as the
        # seeds' trtllm_mla launch did on SM120 (see spec.SM100_ONLY_ATTENTION_BACKENDS)
        fault_injection.crash_now(server, "warmup", kind=kind)
    assert server.engine is not None
    # _execute_server_warmup's POST /generate (8 new tokens), submitted to the engine directly
    group = RequestGroup(1)
    req = Request("warmup-" + uuid.uuid4().hex[:8], 4, 8, CollectSink(group))
    server.engine.submit(req, traced=False)
    timeout = server.scaled(600.0)  # requests.post(..., timeout=600) in _execute_server_warmup
    try:
        await asyncio.wait_for(group.fut, timeout)
    except asyncio.TimeoutError:
        tb = faults.warmup_timeout_traceback(o.server.host, o.server.port)
        server.log.line("Initialization failed. warmup error: " + tb.rstrip("\n"))
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    await asyncio.sleep(dur / 2)
    server.log.line('INFO:     127.0.0.1:51236 - "POST /generate HTTP/1.1" 200 OK')
