"""FP8-native MLA decode attention: reads the e4m3 KV pool once, no cast and no BF16 copy.

Why: SGLang's FlashInfer MLA backend casts the whole FP8 KV pool to BF16 in every layer
(FlashInfer's MLA kernel takes only 16-bit KV); the gather-cast patch shrinks that to the
batch's rows but still writes and re-reads a BF16 copy (5 bytes moved per element instead
of 1). SGLang's own Triton kernel reads FP8 directly but rounds the softmax weights to FP8
(``p.to(v.dtype)``) and is far from the bandwidth limit. This kernel reads each FP8 row
once, converts it in registers, and keeps the softmax and the P x V accumulation in fp32
(P is rounded to BF16 for the tensor-core product, as FlashInfer does; never to FP8).

Layout (absorbed MLA, one KV head): ``q`` ``[B, H, 576]`` BF16 (512 latent + 64 rope; or
``q`` ``[B, H, 512]`` plus ``q_rope`` ``[B, H, 64]``), pool ``[N, 1, 576]`` (or ``[N, 576]``)
float8_e4m3fn, output ``[B, H, 512]`` BF16, where V is the first 512 columns of K.
Indexing is SGLang's: ``kv_indptr`` ``[B + 1]`` and ``kv_indices``. With ``page_size == 1``
the indices are token slots (what both SGLang MLA backends pass, whatever the pool's page
size); with ``page_size > 1`` they are page ids (``slot = page * page_size + offset``) and
``kv_lens`` gives each request's token count.

Split-K: stage 1 runs a fixed grid ``(B, head_blocks, max_splits)``; each request's split
count is computed on the device from its length (at least ``MIN_CHUNK`` tokens a split), so
the launch does not depend on the lengths and can be captured in a CUDA graph. A request
that needs one split writes the output directly; the others write fp32 partials and a
log-sum-exp that stage 2 merges.

Two stage-1 kernels: ``_mla_fp8_stage1_pipe`` (the default from batch 4 up to 16 heads)
leaves the gather to Triton's software pipeliner, which issues the FP8 rows as ``cp.async``
copies into shared memory; ``_mla_fp8_stage1`` prefetches the rows into registers by hand
(batch 1-3, and above 16 heads). See ``default_config`` and docs/mla-fp8-kernel.md.

Configs use only what Triton lowers on both sm_90 and sm_120 (``tl.dot`` on BF16 tiles,
plain loads; no TMA descriptors or warp specialisation) and stay under ~100 KB of shared
memory per block (checked on the GPU by the tests through the compiled kernel's metadata).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from typing import Any

import torch

try:  # Triton is only needed on the GPU host (and for TRITON_INTERPRET=1 tests on CPU).
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on machines without Triton
    triton = None
    tl = None

FP8_DTYPE = torch.float8_e4m3fn
D_LATENT = 512
D_ROPE = 64
D_KV = D_LATENT + D_ROPE
LOG2E = 1.4426950408889634
# sm_120 (RTX PRO 6000 / 5090 class) allows 99 KB of dynamic shared memory per block.
SM120_SMEM_LIMIT = 101_376


if triton is not None:
    # The kernels call only Triton builtins and this module's own jit functions (no
    # tl.cdiv / tl.max / tl.sum / tl.zeros, which are jit functions of triton.language.standard): a
    # copy of this module loaded with TRITON_INTERPRET=1 then runs under Triton's
    # interpreter even when Triton itself was imported before the variable was set, which
    # is how the CPU tests run it. The reductions compile to the same code.

    @triton.jit
    def _cdiv(a, b):
        return (a + b - 1) // b

    @triton.jit
    def _fmax(a, b):
        return tl.maximum(a, b)

    @triton.jit
    def _fadd(a, b):
        return a + b

    # The reductions' combine functions. Triton's interpreter reduces with numpy only when
    # the combine is triton.language.standard's own (the ones tl.max / tl.sum pass) and
    # otherwise calls it element by element in Python: with ours, one 128-head CPU test took
    # 112 s. Interpreted, the kernels therefore take the standard ones (only compared by
    # identity there, never called); compiled, they keep this module's, the same
    # ``maximum`` / ``add`` (no dependence on Triton's private names on the GPU).
    _RED_MAX, _RED_ADD = _fmax, _fadd
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        _RED_MAX = getattr(tl.standard, "_elementwise_max", _fmax)
        _RED_ADD = getattr(tl.standard, "_sum_combine", _fadd)

    @triton.jit
    def _slots(kv_indices, start, toks, tmask, PAGE_SIZE: tl.constexpr):
        """Pool rows of tokens ``toks`` of a request (token slots, or page table)."""
        if PAGE_SIZE == 1:
            rows = tl.load(kv_indices + start + toks, mask=tmask, other=0)
        else:
            page = tl.load(kv_indices + start + toks // PAGE_SIZE, mask=tmask, other=0)
            rows = page * PAGE_SIZE + toks % PAGE_SIZE
        return rows

    @triton.jit
    def _load_rows(KV, rows, tmask, stride_kv, offs_l, offs_r, DL: tl.constexpr):
        """The FP8 latent [BLOCK_N, 512] and rope [BLOCK_N, 64] tiles of ``rows``."""
        row_ptr = KV + rows.to(tl.int64)[:, None] * stride_kv
        kl = tl.load(row_ptr + offs_l[None, :], mask=tmask[:, None], other=0.0)
        kr = tl.load(row_ptr + DL + offs_r[None, :], mask=tmask[:, None], other=0.0)
        return kl, kr

    @triton.jit
    def _attend(qn, qr, kl, kr, tmask, acc, m_i, l_i, qk_scale, OP_T: tl.constexpr,
                DOT_T: tl.constexpr):  # fmt: skip
        """One tile of online softmax: FP8 -> OP_T (BF16 or FP16) in registers, scores and
        P x V in fp32 (P rounded to OP_T for the tensor-core product, never to FP8).
        ``qk_scale`` is per head (``[BLOCK_H]``): softmax scale x k_scale x the power of two
        the query was scaled by (FP16 operands)."""
        kl = kl.to(DOT_T)
        kr = kr.to(DOT_T)
        qk = tl.dot(qn, tl.trans(kl))
        qk = tl.dot(qr, tl.trans(kr), acc=qk)
        qk = qk * qk_scale[:, None]
        qk = tl.where(tmask[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.reduce(qk, 1, _RED_MAX))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.reduce(p, 1, _RED_ADD)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(OP_T).to(DOT_T), kl, acc=acc)
        return acc, m_new, l_i

    @triton.jit
    def _fp8_to_f16_asm(x):
        """FP8 e4m3 -> FP16, two values per ``cvt`` (exact), as inline PTX that Triton does
        not move: with ``.to(tl.float16)`` Triton converts in the tensor-core operand
        layout, which for the P x V operand (tokens are its reduction axis, not the
        contiguous one) reads shared memory one byte at a time (``LDS.U8``), and the row
        load, used in two layouts, is not pipelined. Marked impure so that Triton leaves it
        where it stands (the pure form was not tried). ``cvt.rn.f16x2.e4m3x2`` is PTX ISA
        7.8, sm_89 and up: sm_90 and sm_120 both have it."""
        return tl.inline_asm_elementwise(
            "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.rn.f16x2.e4m3x2 $0, lo; "
            "cvt.rn.f16x2.e4m3x2 $1, hi; }",
            "=r,=r,r", [x], dtype=tl.float16, is_pure=False, pack=4)

    @triton.jit
    def _attend_pipe(qn, qr, kl, kr, tmask, acc, m_i, l_i, qk_scale, OP_T: tl.constexpr,
                     DOT_T: tl.constexpr, KCONV: tl.constexpr):  # fmt: skip
        """``_attend`` for the pipelined kernel. ``KCONV``: FP8 -> FP16 as inline PTX for K
        and V (1, shipped), for V only (2: K converted in its operand layout by Triton), or
        Triton's ``.to`` for both (0; also the BF16 and interpreted paths)."""
        if KCONV == 1:
            kl = _fp8_to_f16_asm(kl)
            kr = _fp8_to_f16_asm(kr)
            kt = kl
        elif KCONV == 2:
            kt = kl.to(DOT_T)
            kl = _fp8_to_f16_asm(kl)
            kr = kr.to(DOT_T)
        else:
            kl = kl.to(DOT_T)
            kr = kr.to(DOT_T)
            kt = kl
        qk = tl.dot(qn, tl.trans(kt))
        qk = tl.dot(qr, tl.trans(kr), acc=qk)
        qk = qk * qk_scale[:, None]
        qk = tl.where(tmask[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.reduce(qk, 1, _RED_MAX))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.reduce(p, 1, _RED_ADD)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(OP_T).to(DOT_T), kl, acc=acc)
        return acc, m_new, l_i

    @triton.jit
    def _split_geometry(seq_len, MAX_SPLITS, MIN_CHUNK, BLOCK_N: tl.constexpr):
        """(number of splits, tokens per split) for one request, from its length."""
        n_splits = tl.minimum(_cdiv(seq_len, MIN_CHUNK), MAX_SPLITS)
        n_splits = tl.maximum(n_splits, 1)
        chunk = _cdiv(_cdiv(seq_len, n_splits), BLOCK_N) * BLOCK_N
        chunk = tl.maximum(chunk, BLOCK_N)
        n_splits = tl.maximum(_cdiv(seq_len, chunk), 1)
        return n_splits, chunk

    # Sizes that vary with the batch are not specialised, so one compiled kernel serves
    # every batch size and split budget.
    @triton.jit(do_not_specialize=["num_heads", "MAX_SPLITS", "MIN_CHUNK"])
    def _mla_fp8_stage1(
        QN, QR, KV, kv_indptr, kv_indices, kv_lens, k_scale_ptr,
        MidO, MidLse, Out,
        sm_scale_log2, k_scale_val,
        stride_qnb, stride_qnh, stride_qrb, stride_qrh, stride_kv,
        stride_mb, stride_mh, stride_ms, stride_ob, stride_oh,
        num_heads, MAX_SPLITS, MIN_CHUNK,
        PAGE_SIZE: tl.constexpr,
        HAS_LENS: tl.constexpr, SCALE_PTR: tl.constexpr,
        BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
        DL: tl.constexpr, DR: tl.constexpr, OP_T: tl.constexpr, DOT_T: tl.constexpr,
        PREFETCH: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0)
        hb = tl.program_id(1)
        s = tl.program_id(2)
        start = tl.load(kv_indptr + b)
        if HAS_LENS:  # noqa: SIM108 - a constexpr branch, kept as Triton statements
            seq_len = tl.load(kv_lens + b)
        else:
            seq_len = tl.load(kv_indptr + b + 1) - start
        n_splits, chunk = _split_geometry(seq_len, MAX_SPLITS, MIN_CHUNK, BLOCK_N)
        lo = s * chunk
        hi = tl.minimum(lo + chunk, seq_len)

        heads = hb * BLOCK_H + tl.arange(0, BLOCK_H)
        hmask = heads < num_heads
        offs_l = tl.arange(0, DL)
        offs_r = tl.arange(0, DR)
        if SCALE_PTR:  # noqa: SIM108
            kscale = tl.load(k_scale_ptr).to(tl.float32)
        else:
            kscale = k_scale_val
        qk_scale = sm_scale_log2 * kscale

        if s < n_splits:
            qn = tl.load(QN + b * stride_qnb + heads[:, None] * stride_qnh + offs_l[None, :],
                         mask=hmask[:, None], other=0.0).to(tl.float32)
            qr = tl.load(QR + b * stride_qrb + heads[:, None] * stride_qrh + offs_r[None, :],
                         mask=hmask[:, None], other=0.0).to(tl.float32)
            if OP_T == tl.float16:  # noqa: SIM300 - a constexpr dtype compare
                # FP16 operands (FP8 converts to FP16 in one instruction, exactly; BF16 q is
                # exact in FP16 inside its range): each head's query is scaled by a power
                # of two so its largest entry is at most 2**15 (no overflow), and the
                # scores are scaled back. Powers of two: no rounding.
                qmax = tl.maximum(tl.reduce(tl.abs(qn), 1, _RED_MAX),
                                  tl.reduce(tl.abs(qr), 1, _RED_MAX))  # fmt: skip
                qexp = tl.maximum(tl.ceil(tl.log2(qmax)) - 15.0, 0.0)
                qn = qn * tl.exp2(-qexp)[:, None]
                qr = qr * tl.exp2(-qexp)[:, None]
                qk_scale_h = qk_scale * tl.exp2(qexp)
            else:
                qk_scale_h = qk_scale + tl.full([BLOCK_H], 0.0, tl.float32)
            qn = qn.to(OP_T).to(DOT_T)
            qr = qr.to(OP_T).to(DOT_T)
            m_i = tl.full([BLOCK_H], 0.0, tl.float32) - float("inf")
            l_i = tl.full([BLOCK_H], 0.0, tl.float32)
            acc = tl.full([BLOCK_H, DL], 0.0, tl.float32)
            ar = tl.arange(0, BLOCK_N)
            if PREFETCH == 2:
                # As below, one tile deeper: rows two tiles ahead, slots three.
                toks = lo + ar
                tmask = toks < hi
                rows = _slots(kv_indices, start, toks, tmask, PAGE_SIZE)
                toks1 = toks + BLOCK_N
                mask1 = toks1 < hi
                rows1 = _slots(kv_indices, start, toks1, mask1, PAGE_SIZE)
                ntoks = toks + 2 * BLOCK_N
                nmask = ntoks < hi
                nrows = _slots(kv_indices, start, ntoks, nmask, PAGE_SIZE)
                kl, kr = _load_rows(KV, rows, tmask, stride_kv, offs_l, offs_r, DL)
                kl1, kr1 = _load_rows(KV, rows1, mask1, stride_kv, offs_l, offs_r, DL)
                for n0 in range(lo, hi, BLOCK_N):
                    ftoks = n0 + 3 * BLOCK_N + ar
                    fmask = ftoks < hi
                    frows = _slots(kv_indices, start, ftoks, fmask, PAGE_SIZE)
                    nkl, nkr = _load_rows(KV, nrows, nmask, stride_kv, offs_l, offs_r, DL)
                    acc, m_i, l_i = _attend(qn, qr, kl, kr, tmask, acc, m_i, l_i, qk_scale_h,
                                            OP_T, DOT_T)  # fmt: skip
                    kl, kr, tmask = kl1, kr1, mask1
                    kl1, kr1, mask1 = nkl, nkr, nmask
                    nrows, nmask = frows, fmask
            elif PREFETCH == 1:
                # Software pipelining by hand: slots two tiles ahead and rows one tile ahead
                # are loaded before the current tile's math, so each program keeps a tile
                # of FP8 rows in flight while it computes (the gather's two dependent
                # loads would otherwise stall every iteration).
                toks = lo + ar
                tmask = toks < hi
                rows = _slots(kv_indices, start, toks, tmask, PAGE_SIZE)
                ntoks = toks + BLOCK_N
                nmask = ntoks < hi
                nrows = _slots(kv_indices, start, ntoks, nmask, PAGE_SIZE)
                kl, kr = _load_rows(KV, rows, tmask, stride_kv, offs_l, offs_r, DL)
                for n0 in range(lo, hi, BLOCK_N):
                    ftoks = n0 + 2 * BLOCK_N + ar
                    fmask = ftoks < hi
                    frows = _slots(kv_indices, start, ftoks, fmask, PAGE_SIZE)
                    nkl, nkr = _load_rows(KV, nrows, nmask, stride_kv, offs_l, offs_r, DL)
                    acc, m_i, l_i = _attend(qn, qr, kl, kr, tmask, acc, m_i, l_i, qk_scale_h,
                                            OP_T, DOT_T)  # fmt: skip
                    kl, kr, tmask = nkl, nkr, nmask
                    nrows, nmask = frows, fmask
            else:
                for n0 in range(lo, hi, BLOCK_N):
                    toks = n0 + ar
                    tmask = toks < hi
                    rows = _slots(kv_indices, start, toks, tmask, PAGE_SIZE)
                    kl, kr = _load_rows(KV, rows, tmask, stride_kv, offs_l, offs_r, DL)
                    acc, m_i, l_i = _attend(qn, qr, kl, kr, tmask, acc, m_i, l_i, qk_scale_h,
                                            OP_T, DOT_T)  # fmt: skip
            # an empty request (l_i == 0, acc == 0) gives zeros rather than 0/0
            acc = acc * tl.where(l_i > 0, kscale / l_i, 0.0)[:, None]
            if n_splits == 1:
                optr = Out + b * stride_ob + heads[:, None] * stride_oh + offs_l[None, :]
                tl.store(optr, acc.to(Out.dtype.element_ty), mask=hmask[:, None])
            else:
                mptr = MidO + b * stride_mb + heads[:, None] * stride_mh + s * stride_ms
                tl.store(mptr + offs_l[None, :], acc, mask=hmask[:, None])
                lse = m_i + tl.log2(l_i)
                tl.store(MidLse + (b * num_heads + heads) * MAX_SPLITS + s, lse, mask=hmask)

    @triton.jit(do_not_specialize=["num_heads", "MAX_SPLITS", "MIN_CHUNK"])
    def _mla_fp8_stage1_pipe(
        QN, QR, KV, kv_indptr, kv_indices, kv_lens, k_scale_ptr,
        MidO, MidLse, Out,
        sm_scale_log2, k_scale_val,
        stride_qnb, stride_qnh, stride_qrb, stride_qrh, stride_kv,
        stride_mb, stride_mh, stride_ms, stride_ob, stride_oh,
        num_heads, MAX_SPLITS, MIN_CHUNK,
        PAGE_SIZE: tl.constexpr,
        HAS_LENS: tl.constexpr, SCALE_PTR: tl.constexpr,
        BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
        DL: tl.constexpr, DR: tl.constexpr, OP_T: tl.constexpr, DOT_T: tl.constexpr,
        STAGES: tl.constexpr, KCONV: tl.constexpr, ROWS_AHEAD: tl.constexpr,
    ):  # fmt: skip
        """Stage 1 with the gather left to Triton's software pipeliner: the token slots and
        the FP8 rows are plain loads in a ``tl.range(..., num_stages=STAGES)`` loop (no
        hand prefetch), so the rows of the next tiles are in flight (asynchronous copies
        into shared memory where Triton emits them) while the current tile is computed.
        Same arithmetic as ``_mla_fp8_stage1``."""
        b = tl.program_id(0)
        hb = tl.program_id(1)
        s = tl.program_id(2)
        start = tl.load(kv_indptr + b)
        if HAS_LENS:  # noqa: SIM108 - a constexpr branch, kept as Triton statements
            seq_len = tl.load(kv_lens + b)
        else:
            seq_len = tl.load(kv_indptr + b + 1) - start
        n_splits, chunk = _split_geometry(seq_len, MAX_SPLITS, MIN_CHUNK, BLOCK_N)
        lo = s * chunk
        hi = tl.minimum(lo + chunk, seq_len)

        heads = hb * BLOCK_H + tl.arange(0, BLOCK_H)
        hmask = heads < num_heads
        offs_l = tl.arange(0, DL)
        offs_r = tl.arange(0, DR)
        if SCALE_PTR:  # noqa: SIM108
            kscale = tl.load(k_scale_ptr).to(tl.float32)
        else:
            kscale = k_scale_val
        qk_scale = sm_scale_log2 * kscale

        if s < n_splits:
            qn = tl.load(QN + b * stride_qnb + heads[:, None] * stride_qnh + offs_l[None, :],
                         mask=hmask[:, None], other=0.0).to(tl.float32)
            qr = tl.load(QR + b * stride_qrb + heads[:, None] * stride_qrh + offs_r[None, :],
                         mask=hmask[:, None], other=0.0).to(tl.float32)
            if OP_T == tl.float16:  # noqa: SIM300 - a constexpr dtype compare
                qmax = tl.maximum(tl.reduce(tl.abs(qn), 1, _RED_MAX),
                                  tl.reduce(tl.abs(qr), 1, _RED_MAX))  # fmt: skip
                qexp = tl.maximum(tl.ceil(tl.log2(qmax)) - 15.0, 0.0)
                qn = qn * tl.exp2(-qexp)[:, None]
                qr = qr * tl.exp2(-qexp)[:, None]
                qk_scale_h = qk_scale * tl.exp2(qexp)
            else:
                qk_scale_h = qk_scale + tl.full([BLOCK_H], 0.0, tl.float32)
            qn = qn.to(OP_T).to(DOT_T)
            qr = qr.to(OP_T).to(DOT_T)
            m_i = tl.full([BLOCK_H], 0.0, tl.float32) - float("inf")
            l_i = tl.full([BLOCK_H], 0.0, tl.float32)
            acc = tl.full([BLOCK_H, DL], 0.0, tl.float32)
            ar = tl.arange(0, BLOCK_N)
            if ROWS_AHEAD:
                # the next tile's token slots are loaded by hand a tile ahead, so the FP8
                # row load is not an indirect load in the pipeliner's eyes
                rows = _slots(kv_indices, start, lo + ar, (lo + ar) < hi, PAGE_SIZE)
            for n0 in tl.range(lo, hi, BLOCK_N, num_stages=STAGES):
                toks = n0 + ar
                tmask = toks < hi
                if ROWS_AHEAD:
                    kl, kr = _load_rows(KV, rows, tmask, stride_kv, offs_l, offs_r, DL)
                    ntoks = toks + BLOCK_N
                    rows = _slots(kv_indices, start, ntoks, ntoks < hi, PAGE_SIZE)
                else:
                    rows = _slots(kv_indices, start, toks, tmask, PAGE_SIZE)
                    kl, kr = _load_rows(KV, rows, tmask, stride_kv, offs_l, offs_r, DL)
                acc, m_i, l_i = _attend_pipe(qn, qr, kl, kr, tmask, acc, m_i, l_i, qk_scale_h,
                                             OP_T, DOT_T, KCONV)  # fmt: skip
            acc = acc * tl.where(l_i > 0, kscale / l_i, 0.0)[:, None]
            if n_splits == 1:
                optr = Out + b * stride_ob + heads[:, None] * stride_oh + offs_l[None, :]
                tl.store(optr, acc.to(Out.dtype.element_ty), mask=hmask[:, None])
            else:
                mptr = MidO + b * stride_mb + heads[:, None] * stride_mh + s * stride_ms
                tl.store(mptr + offs_l[None, :], acc, mask=hmask[:, None])
                lse = m_i + tl.log2(l_i)
                tl.store(MidLse + (b * num_heads + heads) * MAX_SPLITS + s, lse, mask=hmask)

    @triton.jit(do_not_specialize=["num_heads", "MAX_SPLITS", "MIN_CHUNK"])
    def _mla_fp8_stage2(
        MidO, MidLse, Out, kv_indptr, kv_lens,
        stride_mb, stride_mh, stride_ms, stride_ob, stride_oh,
        num_heads, MAX_SPLITS, MIN_CHUNK,
        HAS_LENS: tl.constexpr,
        SPLIT_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, DL: tl.constexpr,
    ):  # fmt: skip
        """Merge one (request, head)'s split partials by log-sum-exp, ``SPLIT_BLOCK`` splits
        a load: the partials of a short context are one round trip, not one per split (a
        serial chain that dominated small batches)."""
        b = tl.program_id(0)
        h = tl.program_id(1)
        if HAS_LENS:
            seq_len = tl.load(kv_lens + b)
        else:
            seq_len = tl.load(kv_indptr + b + 1) - tl.load(kv_indptr + b)
        n_splits, _ = _split_geometry(seq_len, MAX_SPLITS, MIN_CHUNK, BLOCK_N)
        if n_splits > 1:
            offs_l = tl.arange(0, DL)
            offs_s = tl.arange(0, SPLIT_BLOCK)
            m = tl.full([1], 0.0, tl.float32) - float("inf")
            den = tl.full([1], 0.0, tl.float32)
            acc = tl.full([DL], 0.0, tl.float32)
            base = MidO + b * stride_mb + h * stride_mh
            for s0 in range(0, n_splits, SPLIT_BLOCK):
                ss = s0 + offs_s
                smask = ss < n_splits
                lse = tl.load(MidLse + (b * num_heads + h) * MAX_SPLITS + ss, mask=smask,
                              other=float("-inf"))  # fmt: skip
                part = tl.load(base + ss[:, None] * stride_ms + offs_l[None, :],
                               mask=smask[:, None], other=0.0)  # fmt: skip
                m_new = tl.maximum(m, tl.reduce(lse, 0, _RED_MAX))
                alpha = tl.exp2(m - m_new)
                w = tl.exp2(lse - m_new)
                acc = acc * alpha + tl.reduce(part * w[:, None], 0, _RED_ADD)
                den = den * alpha + tl.reduce(w, 0, _RED_ADD)
                m = m_new
            out = acc / den
            tl.store(Out + b * stride_ob + h * stride_oh + offs_l, out.to(Out.dtype.element_ty))


def _interpreting() -> bool:
    """Under ``TRITON_INTERPRET=1`` (CI's CPU tests) the dots take fp32 operands holding the
    same BF16 values: Triton's interpreter multiplies BF16 tiles as their raw 16-bit
    integers (seen with Triton 3.9), so only the fp32 form computes the kernel's function
    there. On a GPU the operands are BF16 as documented."""
    import os

    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


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


_DEFAULT_WS = Workspace()


def mla_fp8_decode(
    q: torch.Tensor,
    kv_pool: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
    *,
    q_rope: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    kv_lens: torch.Tensor | None = None,
    page_size: int = 1,
    k_scale: float | torch.Tensor | None = None,
    config: Config | dict[str, Any] | None = None,
    workspace: Workspace | None = None,
) -> torch.Tensor:
    """Decode attention of ``q`` over the FP8 rows ``kv_indptr``/``kv_indices`` select.

    Returns ``out`` (``[B, H, 512]`` BF16, allocated if None). ``k_scale`` (float or
    one-element tensor, read on the device) dequantises K and V: ``softmax(q k^T s * scale)
    (v s)``. No host synchronisation: lengths are only read by the kernels.
    """
    if triton is None:
        raise RuntimeError("mla_fp8_decode needs Triton")
    pool2 = kv_pool[:, 0, :] if kv_pool.dim() == 3 else kv_pool
    _check(q, q_rope, pool2)
    if page_size > 1 and kv_lens is None:
        raise ValueError("mla_fp8_decode: page_size > 1 needs kv_lens (tokens per request)")
    batch, heads = q.shape[0], q.shape[1]
    if q_rope is None:
        qn, qr = q[..., :D_LATENT], q[..., D_LATENT:]
    else:
        qn, qr = q, q_rope
    if out is None:
        out = torch.empty((batch, heads, D_LATENT), dtype=torch.bfloat16, device=q.device)
    if tuple(out.shape) != (batch, heads, D_LATENT) or out.stride(2) != 1:
        raise ValueError(f"mla_fp8_decode: out must be [{batch}, {heads}, {D_LATENT}]")
    if batch == 0:
        return out
    if config is None:
        cfg = default_config(batch, heads, q.device)
    elif isinstance(config, dict):
        cfg = Config(**{**default_config(batch, heads, q.device).__dict__, **config})
    else:
        cfg = config
    ws = workspace or _DEFAULT_WS
    mid_o, mid_lse = ws.get(batch, heads, cfg.max_splits, q.device)
    scale_val, scale_ptr = _scale_arg(k_scale)
    lens = kv_lens if kv_lens is not None else kv_indptr
    head_blocks = triton.cdiv(heads, cfg.block_h)
    if cfg.pipe:
        _launch_pipe(cfg, batch, head_blocks, qn, qr, pool2, kv_indptr, kv_indices, lens,
                     scale_ptr, scale_val, mid_o, mid_lse, out, sm_scale, heads, page_size,
                     kv_lens is not None)  # fmt: skip
    else:
        _launch_stage1(cfg, batch, head_blocks, qn, qr, pool2, kv_indptr, kv_indices, lens,
                       scale_ptr, scale_val, mid_o, mid_lse, out, sm_scale, heads, page_size,
                       kv_lens is not None)  # fmt: skip
    if cfg.max_splits > 1:
        _mla_fp8_stage2[(batch, heads)](
            mid_o, mid_lse, out, kv_indptr, lens,
            mid_o.stride(0), mid_o.stride(1), mid_o.stride(2), out.stride(0), out.stride(1),
            heads, cfg.max_splits, cfg.min_chunk,
            HAS_LENS=kv_lens is not None,
            SPLIT_BLOCK=cfg.merge_splits, BLOCK_N=cfg.block_n, DL=D_LATENT,
            num_warps=cfg.merge_warps,
        )  # fmt: skip
    return out


def _stage1_args(qn, qr, pool2, kv_indptr, kv_indices, lens, scale_ptr, scale_val, mid_o,
                 mid_lse, out, sm_scale, heads, cfg):  # fmt: skip
    return (
        qn, qr, pool2, kv_indptr, kv_indices, lens,
        scale_ptr if scale_ptr is not None else kv_indptr,
        mid_o, mid_lse, out,
        sm_scale * LOG2E, scale_val,
        qn.stride(0), qn.stride(1), qr.stride(0), qr.stride(1), pool2.stride(0),
        mid_o.stride(0), mid_o.stride(1), mid_o.stride(2), out.stride(0), out.stride(1),
        heads, cfg.max_splits, cfg.min_chunk,
    )  # fmt: skip


def _stage1_consts(cfg, page_size, has_lens, scale_ptr) -> dict:
    return dict(
        PAGE_SIZE=page_size, HAS_LENS=has_lens, SCALE_PTR=scale_ptr is not None,
        BLOCK_H=cfg.block_h, BLOCK_N=cfg.block_n, DL=D_LATENT, DR=D_ROPE,
        OP_T=tl.float16 if cfg.fp16 else tl.bfloat16,
        DOT_T=tl.float32 if _interpreting() else (tl.float16 if cfg.fp16 else tl.bfloat16),
        num_warps=cfg.num_warps,
        **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}),
    )  # fmt: skip


def _launch_stage1(cfg, batch, head_blocks, qn, qr, pool2, kv_indptr, kv_indices, lens,
                   scale_ptr, scale_val, mid_o, mid_lse, out, sm_scale, heads, page_size,
                   has_lens) -> None:  # fmt: skip
    args = _stage1_args(qn, qr, pool2, kv_indptr, kv_indices, lens, scale_ptr, scale_val,
                        mid_o, mid_lse, out, sm_scale, heads, cfg)  # fmt: skip
    _mla_fp8_stage1[(batch, head_blocks, cfg.max_splits)](
        *args, PREFETCH=int(cfg.prefetch), num_stages=cfg.num_stages,
        **_stage1_consts(cfg, page_size, has_lens, scale_ptr),
    )  # fmt: skip


def _launch_pipe(cfg, batch, head_blocks, qn, qr, pool2, kv_indptr, kv_indices, lens,
                 scale_ptr, scale_val, mid_o, mid_lse, out, sm_scale, heads, page_size,
                 has_lens) -> None:  # fmt: skip
    args = _stage1_args(qn, qr, pool2, kv_indptr, kv_indices, lens, scale_ptr, scale_val,
                        mid_o, mid_lse, out, sm_scale, heads, cfg)  # fmt: skip
    _mla_fp8_stage1_pipe[(batch, head_blocks, cfg.max_splits)](
        *args, STAGES=cfg.pipe, ROWS_AHEAD=int(cfg.rows_ahead),
        KCONV=int(cfg.asm_cvt) if cfg.fp16 and not _interpreting() else 0,
        num_stages=cfg.pipe, **_stage1_consts(cfg, page_size, has_lens, scale_ptr),
    )  # fmt: skip


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
