#!/usr/bin/env python3
"""Record a torch-profiler trace of a small decode-like workload on a CUDA GPU (an H200 here).

Why: `glmserve profile` must find and name the whole-pool FP8 -> BF16 cast on a real GPU
trace, with real CUDA kernel names and ``ProfilerStep#N`` spans, not only on CPU traces.
Each decode step runs a few "layers" shaped like GLM-5/DeepSeek MLA decode at batch 4:
a q projection matmul, the FlashInfer MLA backend's whole-pool ``k_pool.to(bfloat16)``
(a [pool_rows, 1, 576] float8_e4m3fn tensor, one per layer), an attention-like step
(q·Kᵀ over the batch's rows, softmax, ·V, on the cast buffer) and output + MLP matmuls.
CPU and CUDA activities, ``record_shapes=True``, a wait/warmup/active schedule; the Chrome
trace is gzip-compressed.

    python3 scripts/record_h200_trace.py --out tests/data/traces/h200_decode_like.trace.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import tempfile
from pathlib import Path


def record(out: Path, steps: int = 3, layers: int = 4, pool_rows: int = 495_000) -> dict:
    """Profile ``steps`` decode-like steps on the GPU; write a gzip Chrome trace to ``out``."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.manual_seed(0)
    dev = "cuda"
    batch, heads, kv_dim, lora, hidden, ctx = 4, 16, 576, 512, 6144, 8192
    pools = [
        torch.randint(0, 120, (pool_rows, 1, kv_dim), dtype=torch.uint8, device=dev).view(
            torch.float8_e4m3fn
        )
        for _ in range(layers)
    ]
    w_q = torch.randn(hidden, heads * kv_dim, dtype=torch.bfloat16, device=dev) * 0.01
    w_o = torch.randn(heads * lora, hidden, dtype=torch.bfloat16, device=dev) * 0.01
    w_up = torch.randn(hidden, 4 * hidden, dtype=torch.bfloat16, device=dev) * 0.01
    w_down = torch.randn(4 * hidden, hidden, dtype=torch.bfloat16, device=dev) * 0.01
    # The batch's KV rows: each request owns ``ctx`` scattered slots of the pool.
    kv_idx = torch.randperm(pool_rows, device=dev)[: batch * ctx].view(batch, ctx)
    x0 = torch.randn(batch, hidden, dtype=torch.bfloat16, device=dev)

    def decode_step() -> torch.Tensor:
        x = x0
        for layer in range(layers):
            with record_function(f"layer_{layer}"):
                q = (x @ w_q).view(batch, heads, kv_dim)
                # SGLang 0.5.9 flashinfer_mla_backend.forward_decode: the whole pool, every layer.
                k_buf = pools[layer].to(torch.bfloat16)
                with record_function("attention_like"):
                    k = k_buf[kv_idx, 0]  # [batch, ctx, 576]
                    scores = torch.einsum("bhd,bcd->bhc", q, k) * kv_dim**-0.5
                    attn = torch.einsum("bhc,bcd->bhd", scores.softmax(-1), k[..., :lora])
                x = x + attn.reshape(batch, heads * lora) @ w_o
                x = x + torch.nn.functional.silu(x @ w_up) @ w_down
        return x

    for _ in range(2):
        decode_step()
    torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"

        def export(prof: profile) -> None:
            prof.export_chrome_trace(str(raw))

        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            record_shapes=True,
            schedule=schedule(wait=1, warmup=1, active=steps, repeat=1),
            on_trace_ready=export,
        ) as prof:
            for _ in range(steps + 2):
                decode_step()
                torch.cuda.synchronize()
                prof.step()
        out.parent.mkdir(parents=True, exist_ok=True)
        with raw.open("rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        raw_bytes = raw.stat().st_size
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=12)
    return {"out": out, "raw_bytes": raw_bytes, "table": table, "gpu": torch.cuda.get_device_name()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output .trace.json.gz path")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--pool-rows", type=int, default=495_000)
    args = ap.parse_args()
    res = record(args.out, args.steps, args.layers, args.pool_rows)
    print(f"gpu: {res['gpu']}")
    print(res["table"])
    size = res["out"].stat().st_size
    print(f"wrote {res['out']} ({size} bytes gz, {res['raw_bytes']} bytes raw)")


if __name__ == "__main__":
    main()
