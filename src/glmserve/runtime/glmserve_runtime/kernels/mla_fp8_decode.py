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

import os
from typing import Any

import torch

try:  # Triton is only needed on the GPU host (and for TRITON_INTERPRET=1 tests on CPU).
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on machines without Triton
    triton = None
    tl = None

# The host side (geometry, workspace, checks, reference), re-exported here.
if __package__:
    from .mla_fp8_host import (  # noqa: F401 (re-exported)
        D_KV,
        D_LATENT,
        D_ROPE,
        FP8_DTYPE,
        Config,
        Workspace,
        _check,
        _device_facts,
        _need,
        _scale_arg,
        default_config,
        max_rel_err,
        num_sms,
        reference,
    )
else:  # loaded by file path, with no package (the CPU tests' interpreted copy)
    import importlib.util as _ilu
    import sys as _sys

    _spec = _ilu.spec_from_file_location(
        __name__ + "_host", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                         "mla_fp8_host.py"))  # fmt: skip
    _host = _ilu.module_from_spec(_spec)
    _sys.modules[_spec.name] = _host  # dataclasses look their module up there
    _spec.loader.exec_module(_host)
    globals().update({k: getattr(_host, k) for k in (
        "D_KV", "D_LATENT", "D_ROPE", "FP8_DTYPE", "Config", "Workspace", "_check",
        "_device_facts", "_need", "_scale_arg", "default_config", "max_rel_err", "num_sms",
        "reference")})  # fmt: skip
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
