"""Bit-exactness of the fused gather + e4m3fn -> bf16 cast against torch's own cast.

Runs on CPU in CI (torch implementation of the bit-level conversion) and, unchanged, on a
CUDA GPU where it also checks the Triton kernel (both conversion variants). The reference is
always ``pool[idx].to(torch.bfloat16)`` on the same device, compared as int16 bit patterns
so that NaN payloads, the sign of zero and subnormals all count.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from glmserve.runtime.glmserve_runtime.kernels import gather_cast as gc  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# On CUDA: the Triton kernel with each conversion variant, plus the torch path.
VARIANTS = [("torch", None)]
if torch.cuda.is_available() and gc.triton is not None:
    VARIANTS += [("triton", {"INT_CONVERT": False}), ("triton", {"INT_CONVERT": True})]

ROW = 576  # GLM-5 / DeepSeek MLA: 512 latent + 64 rope


def _special_bytes() -> torch.Tensor:
    """Every e4m3fn bit pattern, plus what torch makes of inf/-inf/nan/out-of-range floats."""
    every = torch.arange(256, dtype=torch.uint8)
    floats = torch.tensor(
        [float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 2.0**-9, -(2.0**-9), 448.0, 1e4],
        dtype=torch.float32,
    )
    return torch.cat([every, floats.to(gc.FP8_DTYPE).view(torch.uint8)])


def _make_pool(rows: int, width: int, device: str, seed: int) -> torch.Tensor:
    """Random bytes (so NaN, subnormal, +-0 patterns all occur) with the specials planted."""
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (rows, width), dtype=torch.uint8, generator=g)
    special = _special_bytes()
    flat = raw.view(-1)  # first and last rows (or more, for narrow rows)
    flat[: special.numel()] = special
    flat[-special.numel() :] = special.flip(0)
    return raw.to(device).view(gc.FP8_DTYPE)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16).cpu()


def _run(variant: tuple[str, dict | None], pool, idx, **kw):
    kind, cfg = variant
    return gc.gather_cast(pool, idx, force_torch=kind == "torch", config=cfg, **kw)


def test_every_fp8_bit_pattern_converts_like_torch():
    """The conversion rule alone, exhaustively: all 256 e4m3fn patterns."""
    raw = torch.arange(256, dtype=torch.uint8)
    lo, hi = gc.nan_bits("cpu")
    got = gc.convert_e4m3_bits_torch(raw, lo, hi)
    want = raw.view(gc.FP8_DTYPE).to(torch.bfloat16).view(torch.int16)
    mismatches = (got != want).nonzero().flatten().tolist()
    assert mismatches == [], [(hex(i), int(got[i]), int(want[i])) for i in mismatches]


def test_the_pool_holds_the_special_cases():
    """Guard the fixture: NaN, subnormals, negative zero and inf-derived bytes are present."""
    pool = _make_pool(64, ROW, "cpu", seed=0).view(torch.uint8)
    values = set(pool.flatten().tolist())
    assert {0x7F, 0xFF, 0x80, 0x00, 0x01, 0x87, 0x7E} <= values
    assert float("inf") not in pool.view(gc.FP8_DTYPE).float().tolist()  # e4m3fn has no inf


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v[0]}-{v[1]}")
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("shape3", [False, True], ids=["N,D", "N,1,D"])
def test_gather_cast_is_bit_exact(device, variant, idx_dtype, shape3):
    if device == "cpu" and variant[0] != "torch":
        pytest.skip("Triton runs on CUDA only")
    rows, n = 3000, 2500
    pool = _make_pool(rows, ROW, device, seed=1)
    if shape3:
        pool = pool.view(rows, 1, ROW)
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, rows, (n,), generator=g)
    idx[:4] = torch.tensor([0, rows - 1, 0, rows - 1])  # specials, and repeated indices
    idx = idx.to(device=device, dtype=idx_dtype)

    got = _run(variant, pool, idx)
    want = pool[idx.long()].to(torch.bfloat16)
    assert got.shape == want.shape
    assert torch.equal(_bits(got), _bits(want))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v[0]}-{v[1]}")
def test_split_views_with_their_own_strides(device, variant):
    """The two views the FlashInfer wrapper takes, cut from one [n,1,576] buffer, and also
    two separate buffers; every element is written (poisoned beforehand)."""
    if device == "cpu" and variant[0] != "torch":
        pytest.skip("Triton runs on CUDA only")
    rows, n = 1024, 777
    pool = _make_pool(rows, ROW, device, seed=3).view(rows, 1, ROW)
    idx = torch.randperm(rows, generator=torch.Generator().manual_seed(4))[:n].to(device)
    want = _bits(pool[idx].to(torch.bfloat16))
    poison = torch.tensor(0x7FA1, dtype=torch.int16).view(torch.bfloat16).item()

    whole = torch.full((n, 1, ROW), poison, dtype=torch.bfloat16, device=device)
    gc.gather_cast_into(
        pool,
        idx,
        whole[:, :, :512],
        whole[:, :, 512:],
        force_torch=variant[0] == "torch",
        config=variant[1],
    )
    assert torch.equal(_bits(whole), want)

    ckv = torch.full((n, 1, 512), poison, dtype=torch.bfloat16, device=device)
    kpe = torch.full((n, 1, 64), poison, dtype=torch.bfloat16, device=device)
    gc.gather_cast_into(pool, idx, ckv, kpe, force_torch=variant[0] == "torch", config=variant[1])
    assert torch.equal(_bits(torch.cat([ckv, kpe], dim=-1)), want)


@pytest.mark.parametrize("device", DEVICES)
def test_into_a_prefix_of_a_larger_persistent_buffer(device):
    """The patch writes into ``buf[:nnz]`` of a bigger persistent buffer: rows past nnz
    must stay untouched."""
    rows, cap, n = 512, 300, 200
    pool = _make_pool(rows, ROW, device, seed=5).view(rows, 1, ROW)
    idx = torch.randint(0, rows, (n,), generator=torch.Generator().manual_seed(6)).to(device)
    buf = torch.zeros((cap, 1, ROW), dtype=torch.bfloat16, device=device)
    out = gc.gather_cast(pool, idx, out=buf[:n])
    assert out.data_ptr() == buf.data_ptr()
    assert torch.equal(_bits(buf[:n]), _bits(pool[idx].to(torch.bfloat16)))
    assert not buf[n:].any()


@pytest.mark.parametrize("device", DEVICES)
def test_empty_batch_and_non_pow2_width(device):
    pool = _make_pool(16, 100, device, seed=7)
    empty = gc.gather_cast(pool, torch.empty(0, dtype=torch.int64, device=device))
    assert empty.shape == (0, 100)
    idx = torch.tensor([3, 3, 15], device=device)
    assert torch.equal(_bits(gc.gather_cast(pool, idx)), _bits(pool[idx].to(torch.bfloat16)))


def test_bad_arguments_are_refused_with_a_reason():
    pool = _make_pool(8, ROW, "cpu", seed=8)
    with pytest.raises(TypeError, match="int32 or int64"):
        gc.gather_cast(pool, torch.tensor([1.0]))
    with pytest.raises(TypeError, match="float8_e4m3fn or uint8"):
        gc.gather_cast(pool.to(torch.bfloat16), torch.tensor([1]))
    with pytest.raises(ValueError, match=r"\[N, D\] or \[N, 1, D\]"):
        gc.gather_cast(pool.view(2, 4, ROW), torch.tensor([1]))
    with pytest.raises(ValueError, match="out must be bfloat16"):
        gc.gather_cast(pool, torch.tensor([1]), out=torch.empty(1, ROW))


_INTERPRETED_CHECK = """
import torch
from glmserve.runtime.glmserve_runtime.kernels import gather_cast as gc
rows, n = 300, 97
gen = torch.Generator().manual_seed(9)
raw = torch.randint(0, 256, (rows, 1, 576), dtype=torch.uint8, generator=gen)
raw.view(-1)[:256] = torch.arange(256, dtype=torch.uint8)
pool = raw.view(gc.FP8_DTYPE)
for idx_dtype in (torch.int32, torch.int64):
    idx = torch.randint(0, rows, (n,), generator=torch.Generator().manual_seed(10)).to(idx_dtype)
    idx[:3] = torch.tensor([0, 0, rows - 1])
    ref = pool[idx.long()].to(torch.bfloat16).view(torch.int16)
    for conv in (False, True):
        cfg = {"INT_CONVERT": conv, "BLOCK_ROWS": 8}
        out = gc.gather_cast(pool, idx, force_triton=True, config=cfg)
        assert torch.equal(out.view(torch.int16), ref), (idx_dtype, conv)
    # The patch's launcher: fp8-typed [N,1,576] pool, prefix of a larger persistent buffer.
    buf = torch.zeros((n + 5, 1, 576), dtype=torch.bfloat16)
    gc.FusedGatherCast().launch_triton(pool, idx, buf, n)
    assert torch.equal(buf[:n].view(torch.int16), ref), idx_dtype
    assert not buf[n:].any()
print("interpreted kernel bit-exact")
"""


@pytest.mark.slow
def test_triton_kernel_indexing_under_the_interpreter(tmp_path):
    """The Triton kernel itself (masks, strides, both conversion variants) run by Triton's
    CPU interpreter; the same kernel runs compiled on the GPU in the H200 run."""
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, TRITON_INTERPRET="1")
    src = Path(gc.__file__).resolve().parents[4]  # .../src
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", _INTERPRETED_CHECK],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "interpreted kernel bit-exact" in proc.stdout


@pytest.mark.parametrize("device", DEVICES)
def test_fused_launcher_over_changing_batches_and_layers(device):
    """The patch's launcher, called as a decode step calls it: one persistent buffer, layers
    with their own pools, a batch size that changes every step (1, odd, multiples of 16,
    above the small-batch config), int32 and int64 indices. Every call must be exact and
    leave rows past ``n`` untouched. On CUDA, after the first launch per key the compiled
    kernel is re-launched directly, and those launches must be exact too."""
    rows, cap = 4096, 9000
    layers = [_make_pool(rows, ROW, device, seed=20 + i).view(rows, 1, ROW) for i in range(3)]
    buf = torch.empty((cap, 1, ROW), dtype=torch.bfloat16, device=device)
    fused = gc.FusedGatherCast()
    g = torch.Generator().manual_seed(21)
    for step, n in enumerate([1, 17, 2000, 2048, 33, 8193, 1, 4096, 8999]):
        dtype = torch.int32 if step % 2 else torch.int64
        idx = torch.randint(0, rows, (cap,), generator=g, dtype=dtype).to(device)
        for pool in layers:
            buf.fill_(7.0)
            fused(pool, idx, buf, n)
            got = _bits(buf[:n])
            assert torch.equal(got, _bits(pool[idx[:n].long()].to(torch.bfloat16))), (step, n)
            assert torch.equal(_bits(buf[n:]), _bits(torch.full_like(buf[n:], 7.0)))
    if device == "cuda" and gc._direct_launch_api() is not None:
        # 9 steps x 3 layers = 27 launches over 4 keys (2 index dtypes x 2 configs)
        assert fused.direct_launches >= 27 - 4
    else:
        assert fused.direct_launches == 0


@pytest.mark.parametrize(
    "version, direct", [("3.4.0", True), ("3.5.1", True), ("3.6.0", True), ("3.3.1", False),
                        ("3.7.0", False), ("4.0.0", False), ("3.6.0+git1234", True), ("dev", False)]
)  # fmt: skip
def test_direct_launch_only_on_triton_releases_with_a_known_launch_convention(
    monkeypatch, version, direct
):
    """The direct re-launch relies on a private Triton convention read in 3.4-3.6: any other
    release (older, newer, unparsable) must keep Triton's dispatcher."""
    import sys
    import types

    fake = types.ModuleType("triton")
    fake.__version__ = version
    fake.knobs = types.SimpleNamespace(runtime=types.SimpleNamespace())
    monkeypatch.setitem(sys.modules, "triton", fake)
    monkeypatch.setattr(gc, "triton", fake)
    assert (gc._direct_launch_api() is fake.knobs) is direct
