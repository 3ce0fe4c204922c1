#!/usr/bin/env python3
"""Record real 2-rank (TP=2) torch-profiler traces of an SGLang-shaped decode loop on CUDA GPUs.

Why: SGLang's ``/start_profile`` does not use a torch.profiler schedule, so its traces carry no
``ProfilerStep#N`` spans; it calls ``profiler.start()``/``stop()`` with ``with_stack=True`` and
``record_shapes=False`` (its defaults) and writes one file per rank named
``{profile_id}-TP-{rank}[-DECODE].trace.json.gz``. Decode steps then show up only as the
python frames ``model_runner.py(...): forward_decode`` (eager) or ``cuda_graph_runner.py(...):
replay`` (CUDA graphs, one ``cudaGraphLaunch`` per step). This script reproduces exactly that
shape on real GPUs with real NCCL all-reduce kernels, so glmserve's parser is tested on it:

* ``eager``: per step ``forward_decode`` -> per layer q-proj GEMM, the whole-pool FP8 -> BF16
  KV cast (``pool.to(bfloat16)``), attention-like einsums, o-proj, NCCL all-reduce, MLP,
  all-reduce; files ``<ts>-TP-<r>.trace.json.gz``.
* ``graph``: the same step captured once in a CUDA graph and replayed by a ``replay`` frame;
  files ``<ts>-TP-<r>-DECODE.trace.json.gz`` (SGLang's profile_by_stage naming).

    torchrun --nproc-per-node 2 record_tp2_decode_trace.py --mode eager --out DIR
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def forward_decode(x, layers, w, pools, kv_idx):  # named as SGLang's ModelRunner.forward_decode
    import torch
    import torch.distributed as dist

    b, heads, kv_dim, lora = x.shape[0], 8, 576, 512
    for layer in range(layers):
        q = (x @ w["q"]).view(b, heads, kv_dim)
        k_buf = pools[layer].to(torch.bfloat16)  # flashinfer MLA: the whole pool, every layer
        k = k_buf[kv_idx, 0]
        scores = torch.einsum("bhd,bcd->bhc", q, k) * kv_dim**-0.5
        attn = torch.einsum("bhc,bcd->bhd", scores.softmax(-1), k[..., :lora])
        o = attn.reshape(b, heads * lora) @ w["o"]
        dist.all_reduce(o)
        x = x + o
        m = torch.nn.functional.silu(x @ w["up"]) @ w["down"]
        dist.all_reduce(m)
        x = x + m
    return x


def replay(graph):  # named as SGLang's CudaGraphRunner.replay
    graph.replay()


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["eager", "graph"], default="eager")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--pool-rows", type=int, default=400_000)
    a = ap.parse_args()
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    torch.manual_seed(rank)
    dev, hidden, b, ctx = "cuda", 4096, 4, 4096
    w = {
        "q": torch.randn(hidden, 8 * 576, dtype=torch.bfloat16, device=dev) * 0.01,
        "o": torch.randn(8 * 512, hidden, dtype=torch.bfloat16, device=dev) * 0.01,
        "up": torch.randn(hidden, 2 * hidden, dtype=torch.bfloat16, device=dev) * 0.01,
        "down": torch.randn(2 * hidden, hidden, dtype=torch.bfloat16, device=dev) * 0.01,
    }
    pools = [
        torch.randint(0, 120, (a.pool_rows, 1, 576), dtype=torch.uint8, device=dev).view(
            torch.float8_e4m3fn
        )
        for _ in range(a.layers)
    ]
    kv_idx = torch.randperm(a.pool_rows, device=dev)[: b * ctx].view(b, ctx)
    x0 = torch.randn(b, hidden, dtype=torch.bfloat16, device=dev)
    for _ in range(2):  # warm up NCCL and the kernels
        forward_decode(x0, a.layers, w, pools, kv_idx)
    graph = None
    if a.mode == "graph":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            forward_decode(x0, a.layers, w, pools, kv_idx)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward_decode(x0, a.layers, w, pools, kv_idx)
    torch.cuda.synchronize()
    dist.barrier()
    prof = profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        with_stack=True,
        record_shapes=False,
    )
    prof.start()
    for _ in range(a.steps):
        if graph is not None:
            replay(graph)
        else:
            forward_decode(x0, a.layers, w, pools, kv_idx)
        torch.cuda.synchronize()
    prof.stop()
    a.out.mkdir(parents=True, exist_ok=True)
    suffix = "-DECODE" if a.mode == "graph" else ""
    name = f"{int(time.time())}-TP-{rank}{suffix}.trace.json.gz"
    prof.export_chrome_trace(str(a.out / name))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
