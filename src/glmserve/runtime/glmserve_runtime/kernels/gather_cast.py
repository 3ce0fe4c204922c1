"""Fused gather + FP8 e4m3 -> BF16 cast of MLA KV rows: ``out = pool[idx].to(bfloat16)``.

Why: SGLang's FlashInfer MLA backend casts the *whole* FP8 KV pool to BF16 in every layer
of every step (FlashInfer's MLA kernel only takes 16-bit KV). Gathering only the batch's
rows and casting them in one pass moves ``n x (576 + 1152)`` bytes instead of
``pool_rows x (576 + 1152)``.

Contract (checked bit for bit by tests/unit/test_gather_cast.py on CPU and on an H200):
``gather_cast(pool, idx)`` equals ``pool[idx].to(torch.bfloat16)`` bit for bit, for every
e4m3fn bit pattern (e4m3fn has no infinities: 0x7F/0xFF are NaN, and NaN comes out as the
exact bits torch's own cast produces on that device), subnormals, negative zero, repeated
indices, int32 or int64 indices, and pools shaped ``[N, D]`` or ``[N, 1, D]`` (``D`` is
576 for GLM-5/DeepSeek MLA: 512 latent + 64 rope; any ``D`` works). The output may be
given as one ``[n, 1, D]`` buffer or as the two views the FlashInfer wrapper takes
(``[n, 1, 512]`` + ``[n, 1, 64]``), each with its own row stride.

On CUDA the work is one Triton kernel; elsewhere (CI's CPU) a torch implementation of the
same bit-level conversion runs, so the CPU tests exercise the conversion rule itself rather
than comparing torch with torch.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

try:  # Triton is only needed (and only present) on the GPU host.
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on CPU-only machines
    triton = None
    tl = None

FP8_DTYPE = torch.float8_e4m3fn
# e4m3fn exponent bias is 7, bf16's is 127: a normal number's exponent field moves by 120.
_EXP_SHIFT = (127 - 7) << 7
# Smallest e4m3fn subnormal: 2**-9 (mantissa bits m encode m * 2**-9).
_SUBNORMAL_UNIT = 2.0**-9


@functools.cache
def nan_bits(device: str) -> tuple[int, int]:
    """The int16 bit patterns torch's own e4m3fn -> bf16 cast gives +NaN (0x7F), -NaN (0xFF).

    Torch canonicalises NaN differently per device (CPU gives 0x7FC0 for both); reading it
    from torch on the same device keeps the fused kernel bit-identical to torch there.
    """
    src = torch.tensor([0x7F, 0xFF], dtype=torch.uint8, device=device).view(FP8_DTYPE)
    bits = src.to(torch.bfloat16).view(torch.int16).cpu().tolist()
    return int(bits[0]), int(bits[1])


def _check_args(pool: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Validate shapes/dtypes; return the pool as a 2-D ``[N, D]`` uint8 view."""
    if pool.dtype not in (FP8_DTYPE, torch.uint8):
        raise TypeError(f"gather_cast: pool must be float8_e4m3fn or uint8, got {pool.dtype}")
    if idx.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"gather_cast: indices must be int32 or int64, got {idx.dtype}")
    if idx.dim() != 1:
        raise ValueError(f"gather_cast: indices must be 1-D, got shape {tuple(idx.shape)}")
    if pool.dim() == 3 and pool.shape[1] == 1:
        pool2 = pool[:, 0, :]
    elif pool.dim() == 2:
        pool2 = pool
    else:
        raise ValueError(f"gather_cast: pool must be [N, D] or [N, 1, D], got {tuple(pool.shape)}")
    if pool2.stride(1) != 1:
        raise ValueError("gather_cast: pool rows must be contiguous in the last dimension")
    if idx.device != pool.device:
        raise ValueError(f"gather_cast: indices on {idx.device}, pool on {pool.device}")
    return pool2.view(torch.uint8)


def _rows_view(t: torch.Tensor, n: int, width: int, name: str) -> torch.Tensor:
    """``t`` ([n, width] or [n, 1, width], bf16, last dim contiguous) as a 2-D int16 view."""
    if t.dtype != torch.bfloat16:
        raise TypeError(f"gather_cast: {name} must be bfloat16, got {t.dtype}")
    t2 = t[:, 0, :] if t.dim() == 3 and t.shape[1] == 1 else t
    if t2.dim() != 2 or t2.shape[0] != n or t2.shape[1] != width or (n and t2.stride(1) != 1):
        raise ValueError(
            f"gather_cast: {name} must be [{n}, {width}] or [{n}, 1, {width}] with a "
            f"contiguous last dimension, got {tuple(t.shape)}"
        )
    return t2.view(torch.int16)


def convert_e4m3_bits_torch(raw: torch.Tensor, nan_pos: int, nan_neg: int) -> torch.Tensor:
    """Bit-level e4m3fn -> bf16 in plain torch ops (uint8 in, int16 bits out).

    Normal numbers keep sign and mantissa and shift the exponent field by 120; subnormals
    (exponent field 0) are ``m * 2**-9``, exact in float32, whose top 16 bits are the bf16;
    NaN (magnitude 0x7F) takes the caller's device-specific bit patterns.
    """
    b = raw.to(torch.int32)
    sign = (b & 0x80) << 8
    mag = b & 0x7F
    normal = sign | ((mag << 4) + _EXP_SHIFT)
    sub = ((b & 0x07).to(torch.float32) * _SUBNORMAL_UNIT).view(torch.int32) >> 16
    out = torch.where((mag >> 3) == 0, sign | sub, normal)
    nan = torch.where(b >= 0x80, nan_neg & 0xFFFF, nan_pos & 0xFFFF)
    out = torch.where(mag == 0x7F, nan, out)
    # Reinterpret the low 16 bits as int16 (values >= 0x8000 wrap to negative).
    return (out - ((out & 0x8000) << 1)).to(torch.int16)


def _gather_cast_torch(
    pool2: torch.Tensor, idx: torch.Tensor, out_a: torch.Tensor, out_b: torch.Tensor
) -> None:
    width_a = out_a.shape[1]
    rows = pool2.index_select(0, idx.to(torch.int64))
    lo, hi = nan_bits(str(pool2.device))
    bits = convert_e4m3_bits_torch(rows, lo, hi)
    out_a.copy_(bits[:, :width_a])
    out_b.copy_(bits[:, width_a:])


if triton is not None:

    @triton.jit
    def _convert(x, nan_pos, nan_neg, INT_CONVERT: tl.constexpr, FIX_NAN: tl.constexpr):
        """8-bit e4m3fn tile -> int16 bf16 bits tile (rule: see convert_e4m3_bits_torch)."""
        x8 = x.to(tl.uint8, bitcast=True)
        if INT_CONVERT:
            b = x8.to(tl.int32)
            mag = b & 0x7F
            sign = (b & 0x80) << 8
            normal = sign | ((mag << 4) + ((127 - 7) << 7))
            sub = ((b & 7).to(tl.float32) * 0.001953125).to(tl.int32, bitcast=True) >> 16
            bits = tl.where((mag >> 3) == 0, sign | sub, normal)
            bits = tl.where(mag == 0x7F, tl.where(b >= 0x80, nan_neg, nan_pos), bits)
            return bits.to(tl.int16)
        y = x8.to(tl.float8e4nv, bitcast=True).to(tl.bfloat16).to(tl.int16, bitcast=True)
        if FIX_NAN:
            mag8 = x8 & 0x7F
            nan = tl.where(x8 >= 0x80, nan_neg, nan_pos).to(tl.int16)
            y = tl.where(mag8 == 0x7F, nan, y)
        return y

    # n_rows is not specialised (Triton would otherwise compile separate kernels for n == 1
    # and n % 16 == 0): one compiled kernel then serves every batch size, which is what lets
    # FusedGatherCast re-launch it directly.
    @triton.jit(do_not_specialize=["n_rows"])
    def _gather_cast_kernel(
        pool_ptr,
        idx_ptr,
        out_a_ptr,
        out_b_ptr,
        n_rows,
        pool_stride,
        out_a_stride,
        out_b_stride,
        nan_pos,
        nan_neg,
        WIDTH_A: tl.constexpr,
        WIDTH_B: tl.constexpr,
        B_OFFSET: tl.constexpr,
        BLOCK_ROWS: tl.constexpr,
        ITERS: tl.constexpr,
        INT_CONVERT: tl.constexpr,
        FIX_NAN: tl.constexpr,
        HINTS: tl.constexpr,
    ):
        """Each program converts ITERS x BLOCK_ROWS rows, each row as two power-of-2 tiles
        (512 + 64 for MLA). ``out_b_ptr + B_OFFSET`` is where the second tile goes: the
        same buffer at offset 512, or a separate ``[n, 64]`` view with offset 0."""
        pid = tl.program_id(0)
        cols_a = tl.arange(0, WIDTH_A)[None, :]
        cols_b = tl.arange(0, WIDTH_B)[None, :]
        for it in tl.static_range(ITERS):
            rows = (pid * ITERS + it) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
            rmask = rows < n_rows
            src = tl.load(idx_ptr + rows, mask=rmask, other=0).to(tl.int64)
            src_row = pool_ptr + src[:, None] * pool_stride
            rows64 = rows.to(tl.int64)[:, None]
            m = rmask[:, None]
            # No ``other=``: the pool may be typed fp8 or uint8, and masked rows are never
            # stored.
            if HINTS:
                xa = tl.load(src_row + cols_a, mask=m, eviction_policy="evict_first")
                xb = tl.load(src_row + WIDTH_A + cols_b, mask=m, eviction_policy="evict_first")
            else:
                xa = tl.load(src_row + cols_a, mask=m)
                xb = tl.load(src_row + WIDTH_A + cols_b, mask=m)
            ya = _convert(xa, nan_pos, nan_neg, INT_CONVERT, FIX_NAN)
            yb = _convert(xb, nan_pos, nan_neg, INT_CONVERT, FIX_NAN)
            ya = ya.to(out_a_ptr.dtype.element_ty, bitcast=True)
            yb = yb.to(out_b_ptr.dtype.element_ty, bitcast=True)
            pa = out_a_ptr + rows64 * out_a_stride + cols_a
            pb = out_b_ptr + B_OFFSET + rows64 * out_b_stride + cols_b
            if HINTS:
                tl.store(pa, ya, mask=m, cache_modifier=".cs")
                tl.store(pb, yb, mask=m, cache_modifier=".cs")
            else:
                tl.store(pa, ya, mask=m)
                tl.store(pb, yb, mask=m)


def _is_pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


# Tuned on an H200 (benchmarks/results/gather_cast_h200_run2_sweep/): one warp per row
# (4 rows, 4 warps) with streaming cache hints was at or near the top at every size from 2K
# to 486K rows; longer per-program loops (ITERS) and bigger tiles only lost.
_SMALL_BATCH_ROWS = 8192
CONFIG_SMALL: dict[str, Any] = {"BLOCK_ROWS": 4, "num_warps": 4, "ITERS": 1, "HINTS": True}
CONFIG_LARGE: dict[str, Any] = {"BLOCK_ROWS": 4, "num_warps": 4, "ITERS": 1, "HINTS": True}


def default_config(n_rows: int) -> dict[str, Any]:
    """Launch parameters by batch size (the conversion variant is chosen per device)."""
    return dict(CONFIG_SMALL if n_rows <= _SMALL_BATCH_ROWS else CONFIG_LARGE)


def _launch(
    pool: torch.Tensor,
    idx: torch.Tensor,
    out_a: torch.Tensor,
    out_b: torch.Tensor,
    n: int,
    strides: tuple[int, int, int],
    widths: tuple[int, int, int],
    cfg: dict[str, Any],
) -> Any:
    """Launch through Triton's JIT dispatcher; returns the compiled kernel it ran."""
    block_rows = cfg["BLOCK_ROWS"]
    iters = cfg.get("ITERS", 1)
    int_convert = cfg.get("INT_CONVERT", False)
    lo, hi = nan_bits(str(pool.device))
    fix_nan = cfg.get("FIX_NAN")
    if fix_nan is None:
        fix_nan = not int_convert and not native_nan_matches_torch(str(pool.device))
    return _gather_cast_kernel[(triton.cdiv(n, block_rows * iters),)](
        pool,
        idx,
        out_a,
        out_b,
        n,
        strides[0],
        strides[1],
        strides[2],
        lo,
        hi,
        WIDTH_A=widths[0],
        WIDTH_B=widths[1],
        B_OFFSET=widths[2],
        BLOCK_ROWS=block_rows,
        ITERS=iters,
        INT_CONVERT=int_convert,
        FIX_NAN=bool(fix_nan),
        HINTS=cfg.get("HINTS", False),
        num_warps=cfg["num_warps"],
    )


@functools.cache
def native_nan_matches_torch(device: str) -> bool:
    """Whether Triton's own e4m3 -> bf16 conversion already gives torch's bits for all 256
    patterns on ``device`` (then the kernel skips its NaN fix-up). Checked, not assumed."""
    raw = torch.arange(256, dtype=torch.uint8, device=device).view(2, 128)
    idx = torch.arange(2, dtype=torch.int32, device=device)
    out = torch.empty((2, 128), dtype=torch.int16, device=device)
    cfg = {"BLOCK_ROWS": 2, "num_warps": 1, "FIX_NAN": False}
    _launch(raw, idx, out, out, 2, (128, 128, 128), (64, 64, 64), cfg)
    want = raw.view(FP8_DTYPE).to(torch.bfloat16).view(torch.int16)
    return bool(torch.equal(out, want))


# Triton releases whose JIT launches a compiled kernel as ``kernel.run(grid..., stream,
# function, packed_metadata, launch_metadata, enter_hook, exit_hook, *all_bound_args)``: read
# in the 3.4, 3.5 and 3.6 sources, and run on an H200 with 3.6. Others use the dispatcher.
_DIRECT_LAUNCH_TRITON = ((3, 4), (3, 5), (3, 6))


def _direct_launch_api() -> Any:
    """Triton's ``knobs`` module when this Triton is one whose launch convention
    ``FusedGatherCast`` re-uses (``_DIRECT_LAUNCH_TRITON``), else None.

    The convention is not a public API: older Triton passed only the non-constexpr arguments,
    and a later one may change it. A misordered launch could fault before any output check
    sees it, so untested releases are not tried at all; they keep the dispatcher.
    """
    if triton is None:
        return None
    try:
        major, minor = (int(x) for x in str(triton.__version__).split(".")[:2])
        from triton import knobs
    except (ImportError, ValueError):
        return None
    if (major, minor) not in _DIRECT_LAUNCH_TRITON or not hasattr(knobs, "runtime"):
        return None
    return knobs


class _DirectLaunch:
    """One compiled kernel re-launched without Triton's JIT dispatcher.

    Why: the dispatcher binds and specialises every argument and hashes a cache key on each
    call, about 20 us of host time per launch on an H200 host; the kernel itself takes 3 us
    at 2K rows. Re-launching the compiled kernel skips all of that. Everything the
    dispatcher would have specialised on is in the caller's key, so the kernel is the one
    the dispatcher would pick.
    """

    def __init__(self, kernel: Any, knobs: Any, rows_per_program: int, tail: tuple) -> None:
        from triton.runtime.driver import driver

        self.run = kernel.run
        self.kernel = kernel
        self.function = kernel.function
        self.packed = kernel.packed_metadata
        self.knobs = knobs
        self.stream_of = driver.active.get_current_stream
        self.device = driver.active.get_current_device()
        self.rows_per_program = rows_per_program
        self.tail = tail

    def __call__(self, pool: torch.Tensor, idx: torch.Tensor, out: torch.Tensor, n: int) -> bool:
        """Launch; False (nothing launched) when a launch hook is set (a profiler is
        watching Triton launches, and only the dispatcher feeds it)."""
        rt = self.knobs.runtime
        if not (_idle(rt.launch_enter_hook) and _idle(rt.launch_exit_hook)):
            return False
        stream = self.stream_of(self.device)
        grid0 = -(-n // self.rows_per_program)
        self.run(grid0, 1, 1, stream, self.function, self.packed, None, None, None,
                 pool, idx, out, out, n, *self.tail)  # fmt: skip
        return True


def _idle(hook: Any) -> bool:
    """No launch hook: None (Triton <= 3.5) or an empty ``HookChain`` (3.6)."""
    return hook is None or getattr(hook, "calls", None) == []


class FusedGatherCast:
    """The patch's hot path: ``out[:n] = pool[idx[:n]].to(bf16)`` once per layer.

    The caller validates shapes once (the patch does, per layer); ``__call__`` only
    launches. ``pool`` is the layer's ``[N, 1, D]`` (or ``[N, D]``) 8-bit buffer as SGLang
    hands it out, ``out`` a persistent bf16 buffer with the same row width whose first ``n``
    rows are written. Without Triton or off CUDA it runs the torch implementation.

    On CUDA with a Triton in ``_DIRECT_LAUNCH_TRITON`` the first launch per key (device,
    index dtype, pointer alignments, strides, launch config) goes through Triton's
    dispatcher; later ones re-launch the compiled kernel directly (``_DirectLaunch``). The
    first direct launch per key is also checked bit for bit against the dispatcher's output;
    a mismatch or a Python-level error turns the direct path off for good with one warning.
    ``direct_launches`` counts them (tests, benchmarks).
    """

    def __init__(self, split: int = 512, direct: bool = True) -> None:
        self.split = split
        self._knobs = _direct_launch_api() if direct else None
        self._direct: dict[tuple, _DirectLaunch] = {}
        self._unverified: set[tuple] = set()
        self.direct_launches = 0

    def __call__(self, pool: torch.Tensor, idx: torch.Tensor, out: torch.Tensor, n: int) -> None:
        if n == 0:  # idle batches (e.g. DP attention) plan zero rows
            return
        if triton is not None and pool.is_cuda:
            self.launch_triton(pool, idx, out, n)
        else:
            o = out[:n]
            gather_cast_into(pool, idx[:n], o[..., : self.split], o[..., self.split :])

    def _key(self, pool: torch.Tensor, idx: torch.Tensor, out: torch.Tensor, cfg: dict) -> tuple:
        return (
            torch.cuda.current_device(),  # the dispatcher launches on the current device
            idx.dtype,
            pool.dtype,
            pool.data_ptr() % 16 == 0,
            idx.data_ptr() % 16 == 0,
            out.data_ptr() % 16 == 0,
            pool.stride(0),
            out.stride(0),
            pool.shape[-1],
            id(cfg),
        )

    def launch_triton(self, pool: torch.Tensor, idx: torch.Tensor, out: torch.Tensor, n: int):
        """The Triton launch alone (also used under ``TRITON_INTERPRET=1`` by the tests)."""
        cfg = CONFIG_SMALL if n <= _SMALL_BATCH_ROWS else CONFIG_LARGE
        key = self._key(pool, idx, out, cfg) if self._knobs is not None and pool.is_cuda else None
        direct = self._direct.get(key) if key is not None else None
        if direct is not None:
            if key in self._unverified:
                if not torch.cuda.is_current_stream_capturing() and self._verify(
                    key, direct, pool, idx, out, n
                ):
                    return
            elif direct(pool, idx, out, n):
                self.direct_launches += 1
                return
        kernel = self._dispatch(pool, idx, out, n, cfg)
        if key is not None and key not in self._direct and kernel is not None:
            self._remember(key, kernel, pool, cfg)

    def _dispatch(self, pool: torch.Tensor, idx: torch.Tensor, out: torch.Tensor, n: int, cfg):
        """One launch through Triton's dispatcher into ``out`` (one ``[n, 1, D]`` buffer)."""
        return _launch(
            pool,
            idx,
            out,
            out,
            n,
            (pool.stride(0), out.stride(0), out.stride(0)),
            (self.split, pool.shape[-1] - self.split, self.split),
            cfg,
        )

    def _remember(self, key: tuple, kernel: Any, pool: torch.Tensor, cfg: dict) -> None:
        """Keep the compiled kernel and the arguments after ``n`` that never change for
        this key, in the kernel's declaration order (constexprs included)."""
        lo, hi = nan_bits(str(pool.device))
        fix_nan = cfg.get("FIX_NAN")
        int_convert = cfg.get("INT_CONVERT", False)
        if fix_nan is None:
            fix_nan = not int_convert and not native_nan_matches_torch(str(pool.device))
        strides = (key[6], key[7], key[7])
        tail = (*strides, lo, hi, self.split, pool.shape[-1] - self.split, self.split,
                cfg["BLOCK_ROWS"], cfg.get("ITERS", 1), int_convert, bool(fix_nan),
                cfg.get("HINTS", False))  # fmt: skip
        try:
            self._direct[key] = _DirectLaunch(
                kernel, self._knobs, cfg["BLOCK_ROWS"] * cfg.get("ITERS", 1), tail
            )
            self._unverified.add(key)
        except Exception as exc:  # any surprise: stay on the dispatcher
            self._give_up(f"cannot prepare the direct launch ({type(exc).__name__}: {exc})")

    def _verify(self, key: tuple, direct: _DirectLaunch, pool, idx, out, n: int) -> bool:
        """First direct launch for ``key``: run it, then the dispatcher into a scratch
        buffer, and compare bit for bit (one sync, once per key). True when ``out[:n]``
        now holds the right rows; False when the caller must launch through the dispatcher.
        """
        try:
            if not direct(pool, idx, out, n):
                return False
            want = torch.empty_like(out[:n])
            self._dispatch(
                pool, idx, want, n, CONFIG_SMALL if n <= _SMALL_BATCH_ROWS else CONFIG_LARGE
            )
            same = torch.equal(out[:n].view(torch.int16), want.view(torch.int16))
        except Exception as exc:  # any surprise: stay on the dispatcher
            self._give_up(f"direct launch failed ({type(exc).__name__}: {exc})")
            return False
        if not same:
            out[:n].copy_(want)
            self._give_up("direct launch differs from Triton's dispatcher")
            return True
        self._unverified.discard(key)
        self.direct_launches += 1
        return True

    def _give_up(self, why: str) -> None:
        import warnings

        warnings.warn(f"glmserve gather_cast: {why}; using Triton's dispatcher", stacklevel=3)
        self._knobs = None
        self._direct.clear()
        self._unverified.clear()


def gather_cast_into(
    pool: torch.Tensor,
    idx: torch.Tensor,
    out_ckv: torch.Tensor,
    out_kpe: torch.Tensor,
    *,
    config: dict[str, Any] | None = None,
    force_torch: bool = False,
    force_triton: bool = False,
) -> None:
    """Write ``pool[idx].to(bf16)`` split at ``out_ckv``'s width into the two outputs.

    ``out_ckv``/``out_kpe`` are ``[n, w]`` or ``[n, 1, w]`` bf16 (e.g. the ``[n,1,512]`` and
    ``[n,1,64]`` views of one ``[n,1,576]`` buffer). ``config`` overrides the Triton launch
    parameters (benchmarks); ``force_torch`` runs the torch path on any device (tests);
    ``force_triton`` runs the Triton kernel on any device (CPU tensors under
    ``TRITON_INTERPRET=1``, which CI uses to check the kernel's indexing without a GPU).
    """
    pool2 = _check_args(pool, idx)
    n = idx.shape[0]
    width = pool2.shape[1]
    a_width = out_ckv.shape[-1]
    out_a = _rows_view(out_ckv, n, a_width, "out_ckv")
    out_b = _rows_view(out_kpe, n, width - a_width, "out_kpe")
    if n == 0:
        return
    tiles_ok = _is_pow2(a_width) and _is_pow2(width - a_width)
    if force_triton and (triton is None or not tiles_ok):
        raise RuntimeError("gather_cast: force_triton needs Triton and power-of-2 row tiles")
    if force_triton or (triton is not None and not force_torch and pool2.is_cuda and tiles_ok):
        cfg = default_config(n)
        cfg.update(config or {})
        strides = (pool2.stride(0), out_a.stride(0), out_b.stride(0))
        _launch(pool2, idx, out_a, out_b, n, strides, (a_width, width - a_width, 0), cfg)
    else:
        _gather_cast_torch(pool2, idx, out_a, out_b)


def gather_cast(
    pool: torch.Tensor,
    idx: torch.Tensor,
    out: torch.Tensor | None = None,
    *,
    split: int | None = None,
    config: dict[str, Any] | None = None,
    force_torch: bool = False,
    force_triton: bool = False,
) -> torch.Tensor:
    """``pool[idx].to(torch.bfloat16)`` in one pass; returns ``out`` (allocated if None).

    The result has the pool's rank (``[n, D]`` or ``[n, 1, D]``). ``split`` is where the
    row is cut into two power-of-2 tiles for the Triton kernel (default: the largest power
    of two below ``D``, i.e. 512 for MLA's 576).
    """
    pool2 = _check_args(pool, idx)
    n, width = idx.shape[0], pool2.shape[1]
    shape = (n, width) if pool.dim() == 2 else (n, 1, width)
    if out is None:
        out = torch.empty(shape, dtype=torch.bfloat16, device=pool.device)
    elif tuple(out.shape) != shape or out.dtype != torch.bfloat16:
        raise ValueError(
            f"gather_cast: out must be bfloat16 {list(shape)}, got {out.dtype} {list(out.shape)}"
        )
    cut = split if split is not None else (1 << (width.bit_length() - 1) if width > 1 else width)
    if cut == width and width > 1:
        cut //= 2
    gather_cast_into(
        pool,
        idx,
        out[..., :cut],
        out[..., cut:],
        config=config,
        force_torch=force_torch,
        force_triton=force_triton,
    )
    return out
