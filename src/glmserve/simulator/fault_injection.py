"""Injected faults: when the simulated processes hang or die, and how.

``faults`` holds the text of each failure; this module fires them, at a start-up phase
(``maybe_fault``), after ready (``crash_now`` on a timer) or when the gather-cast patch
refuses the launch, and ends the process the way SGLang's launcher does: SIGKILL to itself
(status 137) after a scheduler crash, ``os._exit(1)`` when a scheduler dies silently during
init, ``sys.exit`` with uvicorn's or argparse's status for a port clash or bad arguments.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import TYPE_CHECKING

from glmserve.simulator import costmodel, faults

if TYPE_CHECKING:
    from glmserve.simulator.server import SimServer


async def maybe_fault(server: SimServer, phase: str) -> None:
    """Hang or crash here if ``--sim-hang-at``/``--sim-crash-at`` names ``phase``."""
    if server.opts.hang_at == phase:
        await asyncio.Event().wait()  # stop logging, never become ready
    if server.opts.crash_at == phase:
        crash_now(server, phase)


def patch_refusal(server: SimServer, phase: str) -> str | None:
    """The FAILED line a real runtime patch (gather-cast, mla_fp8_decode) refuses this launch
    with at ``phase`` (import, init, cuda_graph), from the patch module's own requirement
    list, or None."""
    refused = _refusing_patch(server, phase)
    return None if refused is None else refused[1]


def _refusing_patch(server: SimServer, phase: str) -> tuple[str, str] | None:
    """(patch module file stem, FAILED line) of the first patch refusing at ``phase``."""
    from glmserve.runtime.glmserve_runtime.patches import flashinfer_mla_gather_cast as gtc
    from glmserve.runtime.glmserve_runtime.patches import mla_fp8_decode as mla

    o = server.opts
    args = {
        "disable_cuda_graph": not o.shape.cuda_graph,
        "kv_cache_dtype": o.shape.kv_cache_dtype,
        "dtype": getattr(o.server, "dtype", None) or "auto",
    }
    row = (costmodel.KV_ROW_ELEMS, 512, 64)
    for name, module in ((costmodel.GATHER_CAST_PATCH, gtc), (costmodel.MLA_FP8_PATCH, mla)):
        if name not in o.patches:
            continue
        for req in module.launch_requirement_failures(args, o.sglang_version, kv_row=row):
            if req.phase == phase:
                stem = module.__name__.rsplit(".", 1)[1]
                return stem, f"glmserve patch {name} FAILED: {req.reason}"
    return None


def maybe_patch_fails(server: SimServer, phase: str) -> None:
    """Die as a worker whose patch refused does: every rank logs the FAILED line
    (``glmserve_runtime.fail``), rank 0's scheduler reports the PatchError, the launcher
    tears the tree down (see patches/flashinfer_mla_gather_cast.py for where each
    refusal is raised: import, backend __init__, init_cuda_graph_state)."""
    refused = _refusing_patch(server, phase)
    if refused is None:
        return
    stem, line = refused
    for r in server.ranks:
        server.log.line(line, r)
    triton = server.opts.shape.decode_attention == "triton"
    backend = "TritonAttnBackend" if triton else "FlashInferMLAAttnBackend"
    where = {
        "import": "_PatchingLoader.exec_module",
        "init": f"{backend}.__init__",
        "cuda_graph": "init_cuda_graph_state",
    }[phase]
    server.log.line(
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        f'  File "glmserve_runtime/patches/{stem}.py", in {where}\n'
        f"glmserve_runtime.PatchError: {line}",
        server.ranks[0],
    )
    for tp, msg in faults.cascade_lines(0, len(server.ranks), False):
        server.log.line(msg, None if tp is None else server.ranks[0] + tp)
    sys.stderr.flush()
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # kill_process_tree, as for any scheduler crash


def crash_now(server: SimServer, phase: str, kind: str | None = None) -> None:
    """Write the crash log for ``kind`` at ``phase`` and die as SGLang's launcher does."""
    o = server.opts
    kind = kind or o.crash_kind or "illegal_memory_access"
    if kind == "port_in_use":
        sys.exit(port_in_use(server))
    if kind == "bad_args":
        sys.exit(bad_args(server))
    if kind == "nccl_timeout":
        nccl_abort(server, phase)
        return
    base, per_node = server.ranks[0], len(server.ranks)
    crash = faults.scheduler_crash(
        kind, phase, o.gpu_arch, o.shape.attention_backend, per_node, o.shape.mem_fraction_static
    )
    for ln in crash.pre_lines:
        server.log.raw(ln)
    server.log.line(
        "Scheduler hit an exception: " + crash.traceback.rstrip("\n"),
        base + crash.failing_rank,
    )
    for tp, msg in faults.cascade_lines(crash.failing_rank, per_node, phase == "after-ready"):
        server.log.line(msg, None if tp is None else base + tp)
    sys.stderr.flush()
    sys.stdout.flush()
    # kill_process_tree(os.getpid()): SIGKILL to ourselves -> exit status 137
    os.kill(os.getpid(), signal.SIGKILL)


def nccl_abort(server: SimServer, phase: str) -> None:
    """A scheduler aborted by the NCCL watchdog. During init the launcher sees its pipe
    close and exits 1; once the schedulers reported ready nobody notices: the worker is
    just gone (warmup then times out; after start-up /health turns 503)."""
    rank = server.ranks[0] + min(3, len(server.ranks) - 1)
    for ln in faults.nccl_abort_lines(rank):
        server.log.raw(ln)
    if phase in ("load", "kv", "graphs"):
        lines, tb = faults.dead_scheduler_launcher(rank)
        for ln in lines:
            server.log.line(ln)
        server.log.raw(tb)
        sys.stderr.flush()
        os._exit(1)
    worker_dies(server)


def port_in_use(server: SimServer) -> int:
    """uvicorn's bind error, before anything else binds: exit status 1."""
    for ln in faults.port_in_use_lines(
        server.pid, server.opts.server.host, server.opts.server.port
    ):
        server.log.line(ln)
    return 1


def bad_args(server: SimServer) -> int:
    """argparse's usage and error for a flag the launcher rejects: exit status 2."""
    from glmserve.simulator.options import sglang_parser

    bad = " ".join(server.opts.unknown) or "--dsa-decode-backend trtllm"
    parser = sglang_parser()
    sys.stderr.write(parser.format_usage())
    sys.stderr.write(f"{parser.prog}: error: unrecognized arguments: {bad}\n")
    sys.stderr.flush()
    return 2


def worker_dies(server: SimServer) -> None:
    """A scheduler died after start-up: SGLang does not notice; /health turns 503."""
    if server.engine is not None:
        server.engine.dead = True
