"""The FP8 MLA decode kernel against a float64 torch reference on the same FP8 values.

On CPU (CI) the Triton kernels run under ``TRITON_INTERPRET=1``: a private copy of the
module is loaded with the variable set, since Triton decides at decoration time whether a
kernel is interpreted. That checks the indexing (page size 1 and 64, ragged, empty and
single-token requests, repeated indices, the split/merge bookkeeping, k_scale, strides).
On a CUDA GPU the same tests run the compiled kernels, and the ``gpu`` tests add accuracy
at every shape of the benchmark table against a FlashInfer-like BF16 path.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

SRC = (
    Path(__file__).resolve().parents[2]
    / "src/glmserve/runtime/glmserve_runtime/kernels/mla_fp8_decode.py"
)
CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"
SCALE = 576**-0.5
FP8 = torch.float8_e4m3fn
# bf16 P and bf16 output rounding: ~2**-8 relative per element; a wrong row or a lost
# split gives errors of order 1.
TOL = 2e-2


@pytest.fixture(scope="module")
def mk():
    """The kernel module: compiled on CUDA, a Triton-interpreted private copy on CPU."""
    if CUDA:
        from glmserve.runtime.glmserve_runtime.kernels import mla_fp8_decode

        yield mla_fp8_decode
        return
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    spec = importlib.util.spec_from_file_location("_mla_fp8_decode_interp", SRC)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    try:
        yield mod
    finally:
        sys.modules.pop(spec.name, None)
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old


def _pool(rows: int, seed: int) -> torch.Tensor:
    g = torch.Generator(device=DEV).manual_seed(seed)
    return (torch.randn((rows, 1, 576), generator=g, device=DEV) * 0.7).to(FP8)


def _q(batch: int, heads: int, seed: int) -> torch.Tensor:
    g = torch.Generator(device=DEV).manual_seed(seed)
    return torch.randn((batch, heads, 576), generator=g, device=DEV).to(torch.bfloat16)


def _token_batch(lens: list[int], rows: int, seed: int, repeat: bool = False):
    """SGLang's token-level kv_indptr / kv_indices (page size 1)."""
    g = torch.Generator().manual_seed(seed)
    chunks = []
    for n in lens:
        if repeat:
            chunks.append(torch.randint(0, rows, (n,), generator=g))
        else:
            chunks.append(torch.randperm(rows, generator=g)[:n])
    idx = torch.cat(chunks) if chunks else torch.zeros(0, dtype=torch.int64)
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32)
    indptr[1:] = torch.tensor(lens).cumsum(0)
    return indptr.to(DEV), idx.to(torch.int32).to(DEV)


def _poisoned(batch: int, heads: int) -> torch.Tensor:
    return torch.full((batch, heads, 512), float("nan"), dtype=torch.bfloat16, device=DEV)


SMALL = {"max_splits": 1, "min_chunk": 16, "block_n": 16}
SPLIT = {"max_splits": 4, "min_chunk": 16, "block_n": 16}
NO_PREFETCH = {**SPLIT, "prefetch": False}
# FP16 tensor-core operands, and FP8 rows two tiles ahead (lengths below end mid-tile and
# leave some splits a single tile, so the deeper prologue's masks are exercised)
FP16_DEEP = {**SPLIT, "fp16": True, "prefetch": 2}
# the software-pipelined stage 1 (``pipe``: the gather left to Triton's pipeliner), FP16
# operands (inline-PTX conversion on the GPU) and BF16
PIPE = {**SPLIT, "fp16": True, "pipe": 3}
PIPE_BF16 = {**SMALL, "pipe": 2}
# token slots a tile ahead by hand (the rows then get pipelined buffers of their own)
PIPE_AHEAD = {**SPLIT, "fp16": True, "pipe": 4, "rows_ahead": True, "num_warps": 4}
VARIANTS = [SMALL, SPLIT, NO_PREFETCH, FP16_DEEP, PIPE, PIPE_BF16, PIPE_AHEAD]
VARIANT_IDS = ["one-split", "split-k", "no-prefetch", "fp16-prefetch2", "pipe-fp16",
               "pipe-bf16-one-split", "pipe-rows-ahead"]  # fmt: skip


@pytest.mark.parametrize("cfg", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("heads", [8, 20])
def test_ragged_empty_single_token_page1(mk, cfg, heads):
    """Ragged lengths with an empty and a single-token request; every output written."""
    lens = [37, 0, 1, 70, 16]
    pool = _pool(400, 1)
    q = _q(len(lens), heads, 2)
    indptr, idx = _token_batch(lens, 400, 3)
    out = _poisoned(len(lens), heads)
    mk.mla_fp8_decode(q, pool, indptr, idx, SCALE, out=out, config=cfg)
    ref = mk.reference(q, pool, indptr, idx, SCALE)
    assert not torch.isnan(out).any(), "an output element was never written"
    assert torch.all(out[1] == 0), "an empty request attends to nothing: zeros"
    assert mk.max_rel_err(out, ref) < TOL
    # A single token: softmax weight 1, output is that row's latent part (bf16-exact).
    row = pool[idx[int(indptr[2])].long(), 0, :512].to(torch.bfloat16)
    assert torch.equal(out[2], row.expand(heads, 512))


@pytest.mark.parametrize("heads", [8, 128])
def test_default_config_as_shipped(mk, heads):
    """No config override: the shipped tiles (block_n 32, 16 or 32 heads a program,
    prefetch) and split budget, with lengths that end mid-tile and span several splits."""
    lens = [300, 1, 129]
    pool = _pool(500, 34)
    q = _q(3, heads, 35)
    indptr, idx = _token_batch(lens, 500, 36)
    out = _poisoned(3, heads)
    mk.mla_fp8_decode(q, pool, indptr, idx, SCALE, out=out)
    assert not torch.isnan(out).any()
    assert mk.max_rel_err(out, mk.reference(q, pool, indptr, idx, SCALE)) < TOL


def test_int64_indices_and_indptr(mk):
    """SGLang's triton backend builds int64 kv_indices (flashinfer's are int32)."""
    lens = [40, 3]
    pool = _pool(100, 31)
    q = _q(2, 8, 32)
    indptr, idx = _token_batch(lens, 100, 33)
    out = mk.mla_fp8_decode(q, pool, indptr.long(), idx.long(), SCALE, config=SPLIT)
    ref = mk.reference(q, pool, indptr, idx, SCALE)
    assert mk.max_rel_err(out, ref) < TOL


def test_repeated_indices(mk):
    """The same slot many times in one request (and across requests) counts each time."""
    lens = [50, 33]
    pool = _pool(20, 4)
    q = _q(2, 8, 5)
    indptr, idx = _token_batch(lens, 20, 6, repeat=True)
    out = mk.mla_fp8_decode(q, pool, indptr, idx, SCALE, config=SPLIT)
    assert mk.max_rel_err(out, mk.reference(q, pool, indptr, idx, SCALE)) < TOL


def test_page64_token_indices_like_sglang(mk):
    """A pool laid out in 64-token pages, indexed per token (what SGLang's MLA backends
    pass whatever the page size): page-contiguous runs with partial last pages."""
    page, lens = 64, [64, 130, 1, 0, 90]
    pool = _pool(64 * 12, 7)
    g = torch.Generator().manual_seed(8)
    pages = torch.randperm(12, generator=g)
    chunks, k = [], 0
    for n in lens:
        np_ = -(-n // page)
        toks = (pages[k : k + np_, None] * page + torch.arange(page)).reshape(-1)[:n]
        chunks.append(toks)
        k += np_
    idx = torch.cat(chunks).to(torch.int32).to(DEV)
    indptr = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    q = _q(len(lens), 16, 9)
    out = mk.mla_fp8_decode(q, pool, indptr.to(DEV), idx, SCALE, config=SPLIT)
    ref = mk.reference(q, pool, indptr.to(DEV), idx, SCALE)
    assert mk.max_rel_err(out, ref) < TOL


@pytest.mark.parametrize("cfg", VARIANTS, ids=VARIANT_IDS)
def test_page64_page_table(mk, cfg):
    """page_size 64: kv_indices are page ids (indptr counts pages), kv_lens the tokens."""
    page, lens = 64, [65, 1, 0, 200, 64]
    pool = _pool(64 * 16, 10)
    g = torch.Generator().manual_seed(11)
    perm = torch.randperm(16, generator=g)
    n_pages = [-(-n // page) for n in lens]
    idx = perm[: sum(n_pages)].to(torch.int32).to(DEV)
    indptr = torch.tensor([0, *torch.tensor(n_pages).cumsum(0).tolist()], dtype=torch.int32)
    kv_lens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    q = _q(len(lens), 8, 12)
    out = _poisoned(len(lens), 8)
    mk.mla_fp8_decode(
        q, pool, indptr.to(DEV), idx, SCALE, out=out, kv_lens=kv_lens, page_size=page, config=cfg
    )
    ref = mk.reference(q, pool, indptr.to(DEV), idx, SCALE, kv_lens=kv_lens, page_size=page)
    assert not torch.isnan(out).any()
    assert mk.max_rel_err(out, ref) < TOL
    # The page table really is honoured: a single token reads slot page * 64 + 0.
    row = pool[int(idx[int(indptr[1])]) * page, 0, :512].to(torch.bfloat16)
    assert torch.equal(out[1], row.expand(8, 512))


@pytest.mark.parametrize("as_tensor", [False, True])
def test_k_scale_dequantises_k_and_v(mk, as_tensor):
    lens = [40, 7]
    pool = _pool(100, 13)
    q = _q(2, 8, 14)
    indptr, idx = _token_batch(lens, 100, 15)
    s = 0.37
    k_scale = torch.tensor([s], device=DEV) if as_tensor else s
    out = mk.mla_fp8_decode(q, pool, indptr, idx, SCALE, k_scale=k_scale, config=SPLIT)
    ref = mk.reference(q, pool, indptr, idx, SCALE, k_scale=s)
    unscaled = mk.reference(q, pool, indptr, idx, SCALE)
    assert mk.max_rel_err(out, ref) < TOL
    assert mk.max_rel_err(out, unscaled) > 0.3  # the scale did something


def test_separate_rope_query_and_strided_output(mk):
    """q as [B, H, 512] + q_rope [B, H, 64] (the FlashInfer backend's form) and an output
    that is a strided view: same result as the fused query."""
    lens = [33, 5, 60]
    pool = _pool(200, 16)
    q = _q(3, 16, 17)
    indptr, idx = _token_batch(lens, 200, 18)
    want = mk.mla_fp8_decode(q, pool, indptr, idx, SCALE, config=SPLIT)
    big = _poisoned(3, 32)
    view = big[:, ::2, :]
    mk.mla_fp8_decode(
        q[..., :512].contiguous(), pool, indptr, idx, SCALE,
        q_rope=q[..., 512:].contiguous(), out=view, config=SPLIT,
    )  # fmt: skip
    assert torch.equal(view, want)
    assert torch.isnan(big[:, 1::2, :]).all(), "wrote outside the output view"


def test_merge_of_more_splits_than_one_merge_load(mk):
    """40 splits: stage 2 merges them 16 a load (three loads, the last one partial)."""
    lens = [700, 3, 250]
    pool = _pool(1200, 40)
    q = _q(3, 8, 41)
    indptr, idx = _token_batch(lens, 1200, 42)
    out = _poisoned(3, 8)
    mk.mla_fp8_decode(q, pool, indptr, idx, SCALE, out=out,
                      config={"max_splits": 40, "min_chunk": 16, "block_n": 16})  # fmt: skip
    assert not torch.isnan(out).any()
    assert mk.max_rel_err(out, mk.reference(q, pool, indptr, idx, SCALE)) < TOL


def test_a_register_cap_is_passed_to_the_launch(mk):
    """``maxnreg`` (a tuning knob: more programs per SM for spills) computes the same."""
    lens = [20, 30]
    pool = _pool(200, 43)
    q = _q(2, 8, 44)
    indptr, idx = _token_batch(lens, 200, 45)
    out = mk.mla_fp8_decode(q, pool, indptr, idx, SCALE, config={**SPLIT, "maxnreg": 128})
    assert mk.max_rel_err(out, mk.reference(q, pool, indptr, idx, SCALE)) < TOL


@pytest.mark.parametrize("magnitude", [1.0, 3e5])
def test_fp16_operands_scale_large_queries(mk, magnitude):
    """FP16 operands hold BF16 queries exactly only below 65504: each head's query is
    scaled by a power of two first (and the scores back), so a query of 3e5 neither
    overflows to inf nor loses accuracy. k_scale keeps the scores in a sane range."""
    lens = [40, 70]
    pool = _pool(200, 37)
    q = (_q(2, 16, 38).float() * magnitude).to(torch.bfloat16)
    indptr, idx = _token_batch(lens, 200, 39)
    ks = 1.0 / magnitude
    out = _poisoned(2, 16)
    mk.mla_fp8_decode(q, pool, indptr, idx, SCALE, out=out, k_scale=ks,
                      config={**SPLIT, "fp16": True})  # fmt: skip
    ref = mk.reference(q, pool, indptr, idx, SCALE, k_scale=ks)
    assert torch.isfinite(out).all()
    assert mk.max_rel_err(out, ref) < TOL


def test_default_config_grid_depends_only_on_batch_and_heads(mk):
    a = mk.default_config(1, 8, torch.device("cpu"))
    b = mk.default_config(256, 8, torch.device("cpu"))
    assert a.max_splits >= b.max_splits
    assert 1 <= b.max_splits <= a.max_splits <= 128
    for heads in (8, 16, 32, 64, 128):
        cfg = mk.default_config(8, heads, torch.device("cpu"))
        assert cfg.block_h in (16, 32)


def test_interpreted_reductions_take_the_numpy_path(mk):
    """Triton's interpreter reduces with numpy only for triton.language.standard's combine
    functions and runs any other element by element in Python (one 128-head test took
    112 s that way): CI's CPU time depends on the interpreted copy taking those."""
    import triton.language as tl

    if CUDA:
        assert mk._RED_MAX is mk._fmax and mk._RED_ADD is mk._fadd
    else:
        assert mk._RED_MAX is tl.standard._elementwise_max
        assert mk._RED_ADD is tl.standard._sum_combine


def test_default_split_budget_and_kernel_by_batch(mk):
    """Run 4 (H200, H100): from batch 4 on (<= 16 heads) the pipelined 4-warp kernel, two
    programs per SM; batch 1 keeps the 8-warp kernel with two per SM, batch 2-3 with one;
    above 16 heads the 8-warp BF16 kernel with one per SM (run 3)."""
    cpu = torch.device("cpu")  # 132 SMs, as the H200
    one = mk.default_config(1, 8, cpu)
    assert (one.pipe, one.num_warps, one.block_n, one.max_splits) == (0, 8, 64, 128)
    two = mk.default_config(2, 16, cpu)  # 2 x 16K: the 8-warp kernel was 9% faster
    assert (two.pipe, two.num_warps, two.block_n, two.max_splits) == (0, 8, 64, 64)
    for batch, splits in ((4, 64), (8, 32), (64, 4), (256, 1)):
        cfg = mk.default_config(batch, 16, cpu)
        assert (cfg.pipe, cfg.num_warps, cfg.block_n, cfg.max_splits) == (3, 4, 32, splits)
        assert cfg.rows_ahead
    wide = mk.default_config(8, 32, cpu)
    assert (wide.pipe, wide.fp16, wide.max_splits) == (0, False, 16)


def test_rejects_bad_inputs(mk):
    pool = _pool(10, 1)
    q = _q(1, 8, 1)
    indptr, idx = _token_batch([3], 10, 1)
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        mk.mla_fp8_decode(q, pool.to(torch.bfloat16), indptr, idx, SCALE)
    with pytest.raises(TypeError, match="bfloat16"):
        mk.mla_fp8_decode(q.float(), pool, indptr, idx, SCALE)
    with pytest.raises(ValueError, match="kv_lens"):
        mk.mla_fp8_decode(q, pool, indptr, idx, SCALE, page_size=64)


# ---------------------------------------------------------------------------------------
# GPU only: accuracy at every shape of the benchmark table, against the FlashInfer-like
# BF16 path (bf16 q and KV, fp32 scores and softmax, P rounded to bf16, fp32 P x V,
# bf16 output) computed by torch, on the same FP8 values.

TABLE = [(b, c) for b in (1, 8, 64, 256) for c in (2048, 8192, 32768) if b * c <= 495_000]
TABLE += [(64, 7680), (256, 1917)]


def _bf16_path(q, pool, indptr, idx) -> torch.Tensor:
    out = torch.empty((q.shape[0], q.shape[1], 512), dtype=torch.bfloat16, device=q.device)
    ip = indptr.tolist()
    for b in range(q.shape[0]):
        kv = pool[idx[ip[b] : ip[b + 1]].long(), 0].to(torch.bfloat16)
        s = (q[b].float() @ kv.float().T) * SCALE
        p = torch.softmax(s, -1).to(torch.bfloat16)
        out[b] = (p.float() @ kv[:, :512].float()).to(torch.bfloat16)
    return out


@pytest.mark.skipif(not CUDA, reason="GPU accuracy at full shapes needs CUDA")
@pytest.mark.parametrize("heads", [8, 16, 32, 64, 128])
@pytest.mark.parametrize("batch,ctx", TABLE)
def test_gpu_accuracy_at_table_shapes(mk, heads, batch, ctx):
    if heads >= 64 and batch * ctx > 70_000:
        pytest.skip("64/128 heads: checked at the smaller shapes (reference cost)")
    pool = _pool(batch * ctx + 1000, 21)
    q = _q(batch, heads, 22)
    idx = torch.randperm(pool.shape[0], device=DEV)[: batch * ctx].to(torch.int32)
    indptr = torch.arange(0, batch * ctx + 1, ctx, dtype=torch.int32, device=DEV)
    out = _poisoned(batch, heads)
    mk.mla_fp8_decode(q, pool, indptr, idx, SCALE, out=out)
    ref = mk.reference(q, pool, indptr, idx, SCALE)
    ours = mk.max_rel_err(out, ref)
    theirs = mk.max_rel_err(_bf16_path(q, pool, indptr, idx), ref)
    assert not torch.isnan(out).any()
    assert ours <= 1.5 * theirs + 1e-3, (ours, theirs)


@pytest.mark.skipif(not CUDA, reason="the inline-PTX conversion runs only compiled")
@pytest.mark.parametrize(
    "variant",
    [{"asm_cvt": 0}, {"asm_cvt": 1}, {"asm_cvt": 2}, {"rows_ahead": True, "num_warps": 4},
     {"rows_ahead": True, "num_warps": 4, "block_n": 16, "pipe": 5}],
    ids=["cvt0", "cvt1", "cvt2", "ahead-w4", "ahead-n16"],
)  # fmt: skip
@pytest.mark.parametrize("heads,batch,ctx", [(8, 8, 8192), (16, 64, 2048), (16, 1, 32768)])
def test_gpu_pipelined_stage1_accuracy(mk, variant, heads, batch, ctx):
    """The pipelined stage 1 with each FP8 -> FP16 conversion (inline PTX for K and V, for
    V only, or Triton's) within 1.5x the BF16 path's error, every output written."""
    pool = _pool(batch * ctx + 1000, 41)
    q = _q(batch, heads, 42)
    idx = torch.randperm(pool.shape[0], device=DEV)[: batch * ctx].to(torch.int32)
    indptr = torch.arange(0, batch * ctx + 1, ctx, dtype=torch.int32, device=DEV)
    out = _poisoned(batch, heads)
    cfg = {"fp16": True, "pipe": 3, "block_n": 32, "num_warps": 8, **variant}
    mk.mla_fp8_decode(q, pool, indptr, idx, SCALE, out=out, config=cfg)
    ref = mk.reference(q, pool, indptr, idx, SCALE)
    ours = mk.max_rel_err(out, ref)
    theirs = mk.max_rel_err(_bf16_path(q, pool, indptr, idx), ref)
    assert not torch.isnan(out).any()
    assert ours <= 1.5 * theirs + 1e-3, (ours, theirs)


@pytest.mark.skipif(not CUDA, reason="CUDA graphs need CUDA")
def test_gpu_cuda_graph_replay_with_new_lengths(mk):
    """Captured once, replayed after the lengths and indices change in place: the split
    count follows the new lengths (decided on the device), results stay right."""
    pool = _pool(50_000, 23)
    q = _q(4, 16, 24)
    indptr = torch.zeros(5, dtype=torch.int32, device=DEV)
    idx = torch.zeros(40_000, dtype=torch.int32, device=DEV)
    out = _poisoned(4, 16)
    ws = mk.Workspace()

    def set_batch(lens, seed):
        ip, ix = _token_batch(lens, 50_000, seed)
        indptr.copy_(ip)
        idx[: ix.numel()].copy_(ix)

    set_batch([100, 2000, 1, 9000], 25)
    for _ in range(2):
        mk.mla_fp8_decode(q, pool, indptr, idx, SCALE, out=out, workspace=ws)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mk.mla_fp8_decode(q, pool, indptr, idx, SCALE, out=out, workspace=ws)
    for lens, seed in (([3000, 5, 0, 30000], 26), ([64, 64, 64, 64], 27)):
        set_batch(lens, seed)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = mk.reference(q, pool, indptr, idx, SCALE)
        assert not torch.isnan(out).any()
        assert mk.max_rel_err(out, ref) < TOL


@pytest.mark.skipif(not CUDA, reason="compiled-kernel metadata needs CUDA")
def test_gpu_default_configs_fit_sm120_shared_memory(mk):
    """Every default config's stage-1 kernel uses at most sm_120's ~99 KB per block."""
    pool = _pool(5000, 28)
    for heads in (8, 16, 32, 64, 128):
        for batch in (1, 8, 64, 256):
            q = _q(batch, heads, 29)
            indptr, idx = _token_batch([16] * batch, 5000, 30, repeat=True)
            mk.mla_fp8_decode(q, pool, indptr, idx, SCALE)
    torch.cuda.synchronize()
    kernels = [
        k
        for fn in (mk._mla_fp8_stage1, mk._mla_fp8_stage1_pipe)
        for entry in fn.device_caches.values()
        for part in (entry if isinstance(entry, tuple) else (entry,))
        if isinstance(part, dict)
        for k in part.values()
        if hasattr(k, "metadata")
    ]
    assert kernels, "no compiled kernels found"
    for kernel in kernels:
        assert kernel.metadata.shared <= mk.SM120_SMEM_LIMIT, kernel.metadata.shared
