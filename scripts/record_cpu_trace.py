#!/usr/bin/env python3
"""Record a small, real torch-profiler Chrome trace of a decode-like loop on the CPU.

Why: the profiler parser must be tested on traces torch itself wrote, not on hand-made JSON.
Each "decode step" runs a few "layers"; each layer casts a whole FP8 "KV pool" to BF16 (the
FlashInfer MLA pattern the seeds found), does an attention-like q·Kᵀ -> softmax -> ·V and a
weight matmul. ``record_shapes`` is on, so the trace carries the input dtypes that let the
parser name the cast. Needs torch (CPU build is enough); float8_e4m3fn casts need torch>=2.1.

    python3 scripts/record_cpu_trace.py --out tests/data/traces/cpu_decode_like.trace.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import tempfile
from pathlib import Path


def record(out: Path, steps: int = 3, layers: int = 4, pool_tokens: int = 16384) -> Path:
    """Profile ``steps`` decode-like steps and write a gzip Chrome trace to ``out``."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.manual_seed(0)
    kv_dim, batch = 576, 4
    fp8 = getattr(torch, "float8_e4m3fn", None)
    pool = torch.randn(pool_tokens, kv_dim)
    pool = pool.to(fp8) if fp8 is not None else pool.to(torch.bfloat16)
    w_o = torch.randn(kv_dim, 2048, dtype=torch.bfloat16)
    w_up = torch.randn(2048, 2048, dtype=torch.bfloat16)
    q = torch.randn(batch, kv_dim, dtype=torch.bfloat16)

    def decode_step() -> torch.Tensor:
        h = q
        for layer in range(layers):
            with record_function(f"layer_{layer}"):
                k = pool.to(torch.bfloat16)  # whole-pool FP8 -> BF16 cast, every layer
                scores = (h[:, :kv_dim] @ k.T).softmax(dim=-1)
                attn = scores @ k
                h = (attn @ w_o) @ w_up
        return h

    decode_step()  # warm up allocators outside the trace
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"

        def export(prof: profile) -> None:
            prof.export_chrome_trace(str(raw))

        with profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
            on_trace_ready=export,
        ) as prof:
            for _ in range(steps + 2):
                decode_step()
                prof.step()
        out.parent.mkdir(parents=True, exist_ok=True)
        with raw.open("rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output .trace.json.gz path")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--pool-tokens", type=int, default=16384)
    args = ap.parse_args()
    path = record(args.out, args.steps, args.layers, args.pool_tokens)
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
