#!/usr/bin/env python3
"""Compile the FP8 MLA decode kernels ahead of time for sm_90 and sm_120, no GPU needed.

Why: the kernel must run on SM120 boxes (about 100 KB of shared memory per block, no
wgmma) and is tested on an H200 (sm_90). Triton compiles for a named target without a
driver (its wheel carries ptxas), so each default launch config is built here for both
targets and its resources are read off the cubin: registers, stack and local memory
(spills), shared memory, and the instruction mix from the SASS (load widths, the matrix
instruction, the FP8 conversion). The arguments get the specialisation Triton's launcher
gives them at run time (16-byte-aligned pointers, strides divisible by 16: the pool's row
stride is 576 bytes), so the code is the code a launch would get.

    python3 benchmarks/mla_fp8_decode_compile.py > benchmarks/results/mla_fp8_decode_compile.txt
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from glmserve.runtime.glmserve_runtime.kernels import mla_fp8_decode as mk

BIN = Path(triton.__file__).parent / "backends/nvidia/bin"
STAGE1_PTRS = {"QN": "*bf16", "QR": "*bf16", "KV": "*fp8e4nv", "kv_indptr": "*i32",
               "kv_indices": "*i32", "kv_lens": "*i32", "k_scale_ptr": "*fp32",
               "MidO": "*fp32", "MidLse": "*fp32", "Out": "*bf16"}  # fmt: skip
STAGE1_DIV16 = ["stride_qnb", "stride_qnh", "stride_qrb", "stride_qrh", "stride_kv",
                "stride_mb", "stride_mh", "stride_ms", "stride_ob", "stride_oh"]  # fmt: skip
STAGE2_PTRS = {"MidO": "*fp32", "MidLse": "*fp32", "Out": "*bf16", "kv_indptr": "*i32",
               "kv_lens": "*i32"}  # fmt: skip
STAGE2_DIV16 = ["stride_mb", "stride_mh", "stride_ms", "stride_ob", "stride_oh"]
OPS = re.compile(  # longest names first: LDGSTS (cp.async) is not an LDG
    r"\b((?:LDGSTS|LDGDEPBAR|LDSM|LDG|STG|LDS|STS|LDL|STL)(?:\.[A-Z0-9]+)*|HMMA\.[A-Z0-9.]+|"
    r"HGMMA\.[A-Z0-9.]+|F2FP\.[A-Z0-9.]+)"
)


def _source(fn, ptrs, div16, scalars, const, idx_ty="*i32"):
    sig = {k: (idx_ty if k in ("kv_indptr", "kv_indices") else v) for k, v in ptrs.items()}
    sig.update({n: "i32" for n in div16})
    sig.update(scalars)
    sig.update({k: "constexpr" for k in const})
    names = fn.arg_names
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in list(ptrs) + div16}
    return ASTSource(fn, sig, constexprs=const, attrs=attrs)


def build(cap: int, cfg: mk.Config, page: int = 1, idx_ty: str = "*i32"):
    const1 = dict(PAGE_SIZE=page, HAS_LENS=page > 1, SCALE_PTR=False, BLOCK_H=cfg.block_h,
                  OP_T=tl.float16 if cfg.fp16 else tl.bfloat16,
                  BLOCK_N=cfg.block_n, DL=mk.D_LATENT, DR=mk.D_ROPE,
                  DOT_T=tl.float16 if cfg.fp16 else tl.bfloat16)  # fmt: skip
    if cfg.pipe:  # the pipelined stage 1 (what mla_fp8_decode launches for this config)
        fn1, stages = mk._mla_fp8_stage1_pipe, cfg.pipe
        const1.update(STAGES=cfg.pipe, ROWS_AHEAD=int(cfg.rows_ahead),
                      KCONV=int(cfg.asm_cvt) if cfg.fp16 else 0)  # fmt: skip
    else:
        fn1, stages = mk._mla_fp8_stage1, cfg.num_stages
        const1.update(PREFETCH=int(cfg.prefetch))
    scal1 = {"sm_scale_log2": "fp32", "k_scale_val": "fp32", "num_heads": "i32",
             "MAX_SPLITS": "i32", "MIN_CHUNK": "i32"}  # fmt: skip
    src1 = _source(fn1, STAGE1_PTRS, STAGE1_DIV16, scal1, const1, idx_ty)
    opts1 = {"num_warps": cfg.num_warps, "num_stages": stages}
    k1 = triton.compile(src1, target=GPUTarget("cuda", cap, 32), options=opts1)
    const2 = dict(HAS_LENS=False, SPLIT_BLOCK=cfg.merge_splits, BLOCK_N=cfg.block_n,
                  DL=mk.D_LATENT)  # fmt: skip
    scal2 = {"num_heads": "i32", "MAX_SPLITS": "i32", "MIN_CHUNK": "i32"}
    src2 = _source(mk._mla_fp8_stage2, STAGE2_PTRS, STAGE2_DIV16, scal2, const2, idx_ty)
    k2 = triton.compile(src2, target=GPUTarget("cuda", cap, 32),
                        options={"num_warps": cfg.merge_warps})  # fmt: skip
    return k1, k2


def inspect_cubin(kernel) -> dict:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.cubin"
        path.write_bytes(kernel.asm["cubin"])
        res = subprocess.run([BIN / "cuobjdump", "-res-usage", path], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        sass = subprocess.run([BIN / "cuobjdump", "-sass", path], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
    usage = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", res))
    ops = collections.Counter(OPS.findall(sass))
    return {
        "regs": int(usage.get("REG", -1)),
        "stack": int(usage.get("STACK", -1)),
        "local": int(usage.get("LOCAL", -1)),
        "shared_dynamic": kernel.metadata.shared,
        "ops": dict(ops.most_common()),
    }


def main() -> None:
    print(f"triton {triton.__version__}, torch {torch.__version__}, ptxas from {BIN}")
    print(f"sm_120 shared-memory limit per block: {mk.SM120_SMEM_LIMIT} B\n")
    seen: set = set()
    ok = True
    for cap in (90, 120):
        for heads in (8, 16, 32, 64, 128):
            for batch in (1, 256):
                cfg = mk.default_config(batch, heads, torch.device("cpu"), arch=cap // 10)
                key = (cap, cfg.block_h, cfg.block_n, cfg.num_warps, cfg.num_stages,
                       cfg.pipe, cfg.rows_ahead)  # fmt: skip
                if key in seen:
                    continue
                seen.add(key)
                # int32 token slots (FlashInfer backend), int64 (triton backend), page table
                for page, idx_ty in ((1, "*i32"), (1, "*i64"), (64, "*i32")):
                    k1, k2 = build(cap, cfg, page, idx_ty)
                    for stage, k in (("stage1", k1), ("stage2", k2)):
                        if stage == "stage2" and (page > 1 or idx_ty != "*i32"):
                            continue
                        info = inspect_cubin(k)
                        fits = info["shared_dynamic"] <= mk.SM120_SMEM_LIMIT
                        spills = info["local"] > 0 or any(o.startswith(("LDL", "STL"))
                                                          for o in info["ops"])  # fmt: skip
                        ok &= fits
                        top = ", ".join(f"{o} x{n}" for o, n in list(info["ops"].items())[:12])
                        print(f"sm_{cap} {stage} page={page} idx={idx_ty[1:]} heads={heads} "
                              f"block_h="
                              f"{cfg.block_h} block_n={cfg.block_n} warps={cfg.num_warps} "
                              f"stages={cfg.num_stages} pipe={cfg.pipe} "
                              f"rows_ahead={cfg.rows_ahead}: regs={info['regs']} "
                              f"stack={info['stack']} local={info['local']} "
                              f"spills={'yes' if spills else 'no'} shared="
                              f"{info['shared_dynamic']} B ({'fits' if fits else 'TOO BIG'} "
                              f"sm_120)\n    {top}")  # fmt: skip
    print("\nall default configs fit sm_120 shared memory:", ok)


if __name__ == "__main__":
    main()
