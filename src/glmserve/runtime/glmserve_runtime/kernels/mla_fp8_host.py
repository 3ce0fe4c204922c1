"""Host side of the FP8 MLA decode kernel (``mla_fp8_decode.py``): launch geometry
(``Config``, ``default_config``), the split-K workspace, argument checks and the float64
reference. Kept apart from the Triton kernels so that each module stays small; pure Python
and torch, no Triton (``mla_fp8_decode`` re-exports every name)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

FP8_DTYPE = torch.float8_e4m3fn
D_LATENT = 512
D_ROPE = 64
D_KV = D_LATENT + D_ROPE


@dataclass(frozen=True)
class Config:
    """Launch geometry. ``max_splits`` fixes stage 1's grid; per request the split count is
    ``min(max_splits, ceil(len / min_chunk))``, decided on the device."""

    block_h: int = 16
    block_n: int = 32
    num_warps: int = 4
    num_stages: int = 2
    max_splits: int = 32
    min_chunk: int = 128
    merge_splits: int = 16  # stage 2: split partials merged per load
    merge_warps: int = 4
    prefetch: int = 1  # FP8 row tiles loaded ahead of the math: 0, 1 or 2 (True = 1)
    fp16: bool = False  # FP16 tensor-core operands instead of BF16 (see _attend)
    maxnreg: int | None = None  # register cap per thread (more programs per SM, spills)
    # > 0: stage 1 is ``_mla_fp8_stage1_pipe`` (Triton's software pipeliner issues the
    # gather as asynchronous copies; ``num_stages`` = ``pipe``); ``prefetch`` is then unused
    pipe: int = 0
    # pipe kernel, FP16 operands: FP8 -> FP16 as inline PTX (see _fp8_to_f16_asm) for
    # nothing (0), K and V (1), or V only (2: K converts in the operand layout)
    asm_cvt: int = 1
    rows_ahead: bool = False  # pipe kernel: token slots loaded by hand one tile ahead


@functools.lru_cache(maxsize=16)
def _device_facts(device: torch.device) -> tuple[int, int]:
    """(SM count, compute-capability major) of a CUDA device; (132, 0) otherwise."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return props.multi_processor_count, props.major
    return 132, 0


def num_sms(device: torch.device) -> int:
    return _device_facts(device)[0]


@functools.lru_cache(maxsize=4096)
def default_config(
    batch: int, heads: int, device: torch.device, arch: int | None = None
) -> Config:
    """Geometry by batch size and heads (host-only inputs, so a CUDA graph captured for one
    batch size replays with any lengths; cached, as it runs on every call). ``arch``: the
    compute-capability major the config is for (default: the device's); the tiles are the
    same for sm_90 and sm_120.

    Up to 16 heads from batch 4 on (run 4, 2026-12-05): the pipelined stage 1
    (``pipe=3``: the FP8 rows are plain loads in a ``tl.range`` loop that Triton issues as
    ``cp.async`` copies into two shared-memory buffers, the token slots loaded by hand a
    tile ahead; FP8 -> FP16 by inline PTX), 32 rows, 4 warps (255 registers, no spills:
    two programs an SM on sm_90), two programs per SM of split budget. Against run 3's
    8-warp kernel in the same call (H100, call 3; graph time where measured): 8 x 8K
    42.6 against 50.5 us, 8 x 32K 118 against 150, 64 x 7.7K 200 against 262, 256 x 1917
    195 against 261 (8 heads); 8 x 2K and 4 x 4K level; slower at batch 2 (2 x 16K: 40.7
    against 37.4 us), so batch 1-3 keep the 8-warp kernel.

    Up to 16 heads at batch 1-3 (one 16-row tensor-core tile; 8 heads pad to 16): FP16
    operands, 64 KV rows a program, 8 warps, FP8 rows prefetched one tile ahead, at least
    128 tokens a split.
    Chosen on the H200 (2026-12-05, runs 1-2 in benchmarks/results/mla_fp8_decode/): in run
    2 this config (``new_cfg5``) was within 2% of the fastest of 17 at the two 283 MB shapes
    (267 us at 256 x 1917, 8 heads), the fastest at 8 x 32K (158 us) and in CUDA graphs at
    1 x 2K/8K/32K. It compiles for sm_90 and sm_120 in 92 KB of shared memory (sm_120
    allows ~99 KB) with at most a small spill (an 8-88 byte stack frame depending on index
    type and target; none for sm_120 with int32 slots; ``benchmarks/mla_fp8_decode_compile.py``),
    where run 2's 4-warp BF16 default spilled heavily (ncu: 2.3M local-memory requests).
    FP16 rather than BF16 operands: FP8 e4m3 converts to FP16 exactly in one instruction
    per two values (BF16 needs a second, quarter-rate conversion per value); the query is
    scaled by a power of two per head into FP16's range (see ``_mla_fp8_stage1``).
    Above 16 heads (two 16-row tiles a program): BF16, 32 rows, 8 warps, the run-1 default
    (not timed above 16 heads; accuracy tested at 32-128 heads).

    ``max_splits`` (8-warp kernel) aims at about one program per SM over the batch (two
    at batch 1; two for the pipelined kernel, see above),
    rounded down to a power of two (at most 128): few splits when the batch alone fills the
    GPU (the merge pass and the fp32 partials then cost nothing), many at batch 1 so that a
    long context still spreads over every SM. Per request the count shrinks on the device
    so that each split has at least ``min_chunk`` tokens. One program per SM from batch 2
    on: in run 3 (H200, 2026-12-05, ``new_cfg6``) half run 2's split budget was faster at
    every shape of batch 8 and 64 (CUDA graph 8 x 8K: 49.2 against 54.7 us; 8 x 32K: 149.5
    against 157.1 us; 64 x 2K: 82.2 against 87.3 us, 8 heads) and slower at 1 x 32K (51.3
    against 42.1 us), so batch 1 keeps two programs per SM.
    """
    sms, _major = _device_facts(device)
    if heads <= 16:
        block_h, block_n, fp16, min_chunk = 16, 64, True, 128
    else:
        block_h, block_n, fp16, min_chunk = 32, 32, False, 128
    head_blocks = -(-heads // block_h)
    pipe = heads <= 16 and batch >= 4
    # programs per SM the split budget aims at: the pipelined 4-warp kernel runs two an SM
    # (registers), the 8-warp kernel one (two at batch 1, for long single contexts)
    target = 2 * sms if (batch == 1 or pipe) else sms
    splits = max(1, min(128, target // max(1, batch * head_blocks)))
    splits = 1 << (splits.bit_length() - 1)  # power of two, rounded down
    if pipe:
        return Config(block_h=16, block_n=32, num_warps=4, max_splits=splits,
                      min_chunk=min_chunk, fp16=True, pipe=3, asm_cvt=1,
                      rows_ahead=True)  # fmt: skip
    return Config(block_h=block_h, block_n=block_n, num_warps=8, max_splits=splits,
                  min_chunk=min_chunk, fp16=fp16)  # fmt: skip


def _scale_arg(k_scale: float | torch.Tensor | None) -> tuple[float, torch.Tensor | None]:
    if k_scale is None:
        return 1.0, None
    if isinstance(k_scale, torch.Tensor):
        if k_scale.numel() != 1:
            raise ValueError("mla_fp8_decode: k_scale must be a scalar (per-tensor scale)")
        return 1.0, k_scale.reshape(1).to(torch.float32)
    return float(k_scale), None


def _check(q: torch.Tensor, q_rope: torch.Tensor | None, pool2: torch.Tensor) -> None:
    if q.dtype != torch.bfloat16:
        raise TypeError(f"mla_fp8_decode: q must be bfloat16, got {q.dtype}")
    if pool2.dtype != FP8_DTYPE:
        raise TypeError(f"mla_fp8_decode: KV pool must be float8_e4m3fn, got {pool2.dtype}")
    if pool2.shape[1] != D_KV or pool2.stride(1) != 1:
        raise ValueError(f"mla_fp8_decode: KV rows must be {D_KV} contiguous elements")
    want = D_LATENT if q_rope is not None else D_KV
    if q.dim() != 3 or q.shape[2] != want or q.stride(2) != 1:
        raise ValueError(f"mla_fp8_decode: q must be [B, H, {want}] with a contiguous last dim")
    if q_rope is not None and (
        tuple(q_rope.shape) != (q.shape[0], q.shape[1], D_ROPE) or q_rope.stride(2) != 1
    ):
        raise ValueError(f"mla_fp8_decode: q_rope must be [B, H, {D_ROPE}]")


class Workspace:
    """fp32 partial outputs and log-sum-exps for stage 2, kept across calls.

    ``reserve`` sizes it once for every batch up to a maximum (what a CUDA-graph-captured
    server needs: a buffer that moved after a graph was captured would leave the graph
    writing freed memory); after that ``fits`` says whether a call needs more and ``get``
    never reallocates.
    """

    def __init__(self) -> None:
        self.mid_o: torch.Tensor | None = None
        self.mid_lse: torch.Tensor | None = None
        self.fixed = False

    def reserve(self, max_batch: int, heads: int, device: torch.device) -> None:
        need = max(_need(b, heads, device) for b in range(1, max(1, max_batch) + 1))
        self.mid_o = torch.empty(need * D_LATENT, dtype=torch.float32, device=device)
        self.mid_lse = torch.empty(need, dtype=torch.float32, device=device)
        self.fixed = True

    def fits(self, batch: int, heads: int, splits: int) -> bool:
        return self.mid_lse is not None and self.mid_lse.numel() >= batch * heads * splits

    def get(self, batch: int, heads: int, splits: int, device: torch.device):
        need = batch * heads * splits
        mid = self.mid_o
        if mid is None or mid.numel() < need * D_LATENT or mid.device != device:
            if self.fixed:
                raise RuntimeError(
                    f"mla_fp8_decode: workspace reserved for fewer rows than {need}"
                )
            self.mid_o = torch.empty(need * D_LATENT, dtype=torch.float32, device=device)
            self.mid_lse = torch.empty(need, dtype=torch.float32, device=device)
        mid_o = self.mid_o[: need * D_LATENT].view(batch, heads, splits, D_LATENT)
        mid_lse = self.mid_lse[:need].view(batch, heads, splits)
        return mid_o, mid_lse


def _need(batch: int, heads: int, device: torch.device) -> int:
    return batch * heads * default_config(batch, heads, device).max_splits


def reference(
    q: torch.Tensor,
    kv_pool: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
    *,
    kv_lens: torch.Tensor | None = None,
    page_size: int = 1,
    k_scale: float = 1.0,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Plain torch decode attention on the same FP8 values, in ``dtype`` (for tests and
    the benchmark's accuracy column). Empty requests give zeros."""
    pool2 = kv_pool[:, 0, :] if kv_pool.dim() == 3 else kv_pool
    batch, heads = q.shape[0], q.shape[1]
    out = torch.zeros((batch, heads, D_LATENT), dtype=dtype, device=q.device)
    indptr = kv_indptr.tolist()
    lens = kv_lens.tolist() if kv_lens is not None else None
    for b in range(batch):
        sel = kv_indices[indptr[b] : indptr[b + 1]].to(torch.int64)
        if page_size > 1:
            n = int(lens[b])
            tok = torch.arange(n, device=sel.device)
            rows = sel[tok // page_size] * page_size + tok % page_size
        else:
            rows = sel if lens is None else sel[: int(lens[b])]
        if rows.numel() == 0:
            continue
        kv = pool2.index_select(0, rows).to(dtype) * k_scale
        s = (q[b].to(dtype) @ kv.T) * sm_scale
        p = torch.softmax(s, dim=-1)
        out[b] = p @ kv[:, :D_LATENT]
    return out


def max_rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Max over (request, head) of ``max|out - ref| / max|ref|`` (rows of zeros skipped)."""
    err = (out.to(ref.dtype) - ref).abs().amax(-1)
    mag = ref.abs().amax(-1)
    ok = mag > 0
    if not bool(ok.any()):
        return float(err.max()) if err.numel() else 0.0
    val = float((err[ok] / mag[ok]).max())
    return val if math.isfinite(val) else float("inf")
