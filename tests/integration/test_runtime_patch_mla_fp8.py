"""The mla_fp8_decode patch against the real SGLang 0.5.9 Triton attention backend, on CPU.

Each scenario runs in a fresh process started the way SGLang starts its workers: a parent
Python (PYTHONPATH = the shipped runtime tree, GLMSERVE_PATCHES set or not) spawns a child
with ``multiprocessing`` *spawn*; the child imports the real ``triton_backend`` (patched by
the hook that sitecustomize armed in it), builds the real ``TritonAttnBackend`` over a real
``MLATokenToKVPool`` (FP8, on CPU) and runs its real ``forward_decode``. The FP8 kernel runs
under ``TRITON_INTERPRET=1``; its output is checked against a float64 reference on the same
FP8 values. Routing to SGLang's own kernel (the fallback) is checked by recording what the
backend's original function receives (SGLang's kernel itself multiplies BF16 tiles, which
Triton's CPU interpreter gets wrong, so its output is not compared here).

Needs sglang==0.5.9 (installed ``--no-deps`` + light deps) and triton; skipped otherwise.
``sgl_kernel`` (CUDA-only, imported by the backend module's import chain) is replaced by the
GPU proof's raising stub when it is not installed (see ``_stub_sgl_kernel_if_missing``).

This file is also the driver: ``python this_file.py MODE OUT.pt``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TARGET = "sglang.srt.layers.attention.triton_backend"
PATCH = "mla_fp8_decode"
POOL_ROWS = 600
HEADS = 16
SEQ_LENS = [5, 130, 1, 77]


def _stub_sgl_kernel_if_missing() -> None:
    """0.5.9's triton_backend imports (through spec_utils -> schedule_batch -> the host KV
    pool) ``sgl_kernel``, a CUDA-only library: when it is absent, the GPU proof's import
    stub stands in (every function raises if called; nothing on the decode path calls one,
    so a call would fail the scenario rather than change a result)."""
    try:
        import sgl_kernel  # noqa: F401
    except Exception:
        import torch

        bench = Path(__file__).resolve().parents[2] / "benchmarks"
        sys.path.insert(0, str(bench))
        from flashinfer_mla_gtc_gpu import _SglKernelStub

        for key in [k for k in sys.modules if k == "sgl_kernel" or k.startswith("sgl_kernel.")]:
            del sys.modules[key]
        sys.meta_path.insert(0, _SglKernelStub())
        real_register_fake = torch.library.register_fake

        def register_fake(op, *args, **kwargs):
            if isinstance(op, str) and op.startswith("sgl_kernel::"):
                return (lambda fn: fn) if not args else None
            return real_register_fake(op, *args, **kwargs)

        torch.library.register_fake = register_fake


def _drive(mode: str, out_path: str) -> None:
    import importlib
    from types import SimpleNamespace

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
    from sglang_stubs import stub_internvl_utils_if_needed

    stub_internvl_utils_if_needed()
    _stub_sgl_kernel_if_missing()
    mod = importlib.import_module(TARGET)
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool

    mod.get_attention_tp_size = lambda: 1
    kv_dtype = torch.bfloat16 if mode == "bf16" else torch.float8_e4m3fn
    gen = torch.Generator().manual_seed(0)
    pool = MLATokenToKVPool(
        size=POOL_ROWS, page_size=1, dtype=kv_dtype, kv_lora_rank=512, qk_rope_head_dim=64,
        layer_num=1, device="cpu", enable_memory_saver=False,
    )  # fmt: skip
    buf = pool.kv_buffer[0]
    vals = (torch.randn(buf.shape, generator=gen) * 0.7).to(kv_dtype)
    buf.copy_(vals.view(buf.dtype))
    req_to_token = torch.zeros((8, 256), dtype=torch.int32)
    server_args = SimpleNamespace(
        speculative_num_draft_tokens=None, speculative_num_steps=None,
        triton_attention_num_kv_splits=8, disable_cuda_graph=False, chunked_prefill_size=8192,
        enable_deterministic_inference=False, triton_attention_split_tile_size=None,
    )  # fmt: skip
    model_config = SimpleNamespace(
        num_attention_heads=HEADS, get_num_kv_heads=lambda tp: 1, context_len=256,
        is_encoder_decoder=False, kv_lora_rank=512, qk_rope_head_dim=64,
    )  # fmt: skip
    runner = SimpleNamespace(
        req_to_token_pool=SimpleNamespace(size=8, req_to_token=req_to_token),
        sliding_window_size=None, token_to_kv_pool_allocator=None, server_args=server_args,
        model_config=model_config, hybrid_gdn_config=None, kimi_linear_config=None,
        token_to_kv_pool=pool, device="cpu", gpu_id=0, kv_cache_dtype=kv_dtype,
    )  # fmt: skip
    result: dict = {"pid": os.getpid()}
    try:
        backend = mod.TritonAttnBackend(runner)
    except Exception as exc:  # the patch's refusal is the result of this scenario
        result["init_error"] = f"{type(exc).__name__}: {exc}"
        torch.save(result, out_path)
        return
    dispatch = getattr(backend, "_glmserve_mla_fp8", None)
    result["patched"] = dispatch is not None

    # A decode batch: SGLang's token-level kv_indptr / kv_indices (random distinct slots).
    # int64 slots, as 0.5.9's init_forward_metadata allocates them for decode
    slots = torch.randperm(POOL_ROWS - 1, generator=gen)[: sum(SEQ_LENS)].to(torch.int64) + 1
    kv_indptr = torch.zeros(len(SEQ_LENS) + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.tensor(SEQ_LENS).cumsum(0)
    splits = server_args.triton_attention_num_kv_splits
    backend.forward_metadata = SimpleNamespace(
        kv_indptr=kv_indptr, kv_indices=slots,
        attn_logits=torch.empty((len(SEQ_LENS), HEADS, splits, 512), dtype=torch.float32),
        attn_lse=torch.empty((len(SEQ_LENS), HEADS, splits), dtype=torch.float32),
        num_kv_splits=torch.full((len(SEQ_LENS),), splits, dtype=torch.int32),
    )  # fmt: skip
    layer = SimpleNamespace(
        tp_q_head_num=HEADS, qk_head_dim=576, v_head_dim=512, logit_capping_method="tanh",
        logit_cap=0.0, sliding_window_size=None, layer_id=0, scaling=576**-0.5,
        xai_temperature_len=-1,
    )  # fmt: skip
    q = torch.randn((len(SEQ_LENS), HEADS * 576), generator=gen).to(torch.bfloat16)
    fb = SimpleNamespace(token_to_kv_pool=pool, out_cache_loc=None)
    calls: list = []
    if dispatch is not None:
        real_original = dispatch.original
        dispatch.original = lambda *a, **k: calls.append((a, k))
    if dispatch is not None or mode == "unpatched":
        if dispatch is None:  # unpatched: record what SGLang's own function would get
            backend.decode_attention_fwd = lambda *a, **k: calls.append((a, k))
        out = backend.forward_decode(q, None, None, layer, fb, save_kv_cache=False)
        result["out"] = out
        from glmserve_runtime.kernels import mla_fp8_decode as mk

        ref = mk.reference(q.view(-1, HEADS, 576), pool.get_key_buffer(0), kv_indptr, slots,
                           layer.scaling)  # fmt: skip
        result["max_rel_err"] = mk.max_rel_err(out.view(-1, HEADS, 512), ref)
        result["calls_to_original_decode"] = len(calls)
    if dispatch is not None:
        result["fast_calls"] = dispatch.fast_calls
        # A soft-capped layer is not the kernel's: SGLang's own function gets the call.
        layer.logit_capping_method, layer.logit_cap = "tanh", 30.0
        backend.forward_decode(q, None, None, layer, fb, save_kv_cache=False)
        result["fallback_calls"] = dispatch.fallback_calls
        result["fallback_got_logit_cap"] = calls[-1][1].get("logit_cap") if calls else None
        result["fast_calls_after"] = dispatch.fast_calls
        dispatch.original = real_original
    torch.save(result, out_path)


def _drive_0523(out_path: str) -> None:
    """SGLang 0.5.23 (the newest release; its wheel source first on sys.path): the hook
    patches its real module; its real ``forward_decode`` runs over an FP8 pool. Its
    constructor needs SGLang's runtime context, so the backend is made with ``__new__``
    and the attributes ``forward_decode`` reads; the patch's ``install`` (what the patched
    ``__init__`` runs after the release's own) wraps it."""
    import importlib
    import importlib.util
    from types import SimpleNamespace

    import torch

    spec = importlib.util.spec_from_file_location(
        "_sg_releases", Path(__file__).resolve().parent / "test_runtime_patch_releases.py"
    )
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)  # type: ignore[union-attr]
    helper._stub_torchvision()
    helper._tolerate_duplicate_config_registration()
    _stub_sgl_kernel_if_missing()
    mod = importlib.import_module(TARGET)
    from glmserve_runtime.kernels import mla_fp8_decode as mk
    from glmserve_runtime.patches import mla_fp8_decode as patch

    cls = mod.TritonAttnBackend
    result: dict = {"pid": os.getpid(), "patched": bool(getattr(cls, "_glmserve_patched", 0))}
    gen = torch.Generator().manual_seed(5)
    raw = (torch.randn((POOL_ROWS, 1, 576), generator=gen) * 0.7).to(torch.float8_e4m3fn)
    calls: list = []
    backend = cls.__new__(cls)
    backend.num_head, backend.device = HEADS, "cpu"
    backend.decode_attention_fwd = lambda *a, **k: calls.append((a, k))
    runner = SimpleNamespace(
        kv_cache_dtype=torch.float8_e4m3fn, req_to_token_pool=SimpleNamespace(size=8),
        model_config=SimpleNamespace(kv_lora_rank=512, qk_rope_head_dim=64),
    )  # fmt: skip
    dispatch = patch.install(backend, runner, "0.5.23")
    for name, value in dict(
        use_mla=True, is_draft_runner=False, enable_deterministic=False,
        enable_lean_attention=False, dcp_size=1, max_kv_splits=8, page_size=1, use_pdl=False,
        swa_v_head_dim=None,
        token_to_kv_pool=SimpleNamespace(get_key_buffer=lambda i: raw,
                                         get_value_buffer=lambda i: raw[..., :512]),
    ).items():  # fmt: skip
        setattr(backend, name, value)
    slots = torch.randperm(POOL_ROWS, generator=gen)[: sum(SEQ_LENS)].to(torch.int64)
    kv_indptr = torch.zeros(len(SEQ_LENS) + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.tensor(SEQ_LENS).cumsum(0)
    backend.forward_metadata = SimpleNamespace(
        kv_indptr=kv_indptr, kv_indices=slots,
        attn_logits=torch.empty((len(SEQ_LENS), HEADS, 8, 512), dtype=torch.float32),
        attn_lse=torch.empty((len(SEQ_LENS), HEADS, 8), dtype=torch.float32),
        num_kv_splits=torch.full((len(SEQ_LENS),), 8, dtype=torch.int32),
        swa_attn_logits=None, swa_out_cache_loc=None, lean_Mp=None, lean_Lp=None,
        lean_Op=None, lean_locks=None, uneven_batch=None,
    )  # fmt: skip
    layer = SimpleNamespace(
        tp_q_head_num=HEADS, tp_k_head_num=1, qk_head_dim=576, v_head_dim=512,
        logit_capping_method="tanh", logit_cap=0.0, sliding_window_size=None, layer_id=0,
        scaling=576**-0.5, xai_temperature_len=-1, k_scale=None, v_scale=None,
    )  # fmt: skip
    q = torch.randn((len(SEQ_LENS), HEADS * 576), generator=gen).to(torch.bfloat16)
    fb = SimpleNamespace(token_to_kv_pool=backend.token_to_kv_pool, out_cache_loc=None)
    for tag, scale in (("", None), ("_scaled", 0.5)):
        if scale is not None:  # FP8 checkpoint scales: 0.5.23 passes them by position
            layer.k_scale = layer.v_scale = torch.tensor(scale)
            layer.k_scale_float = layer.v_scale_float = scale
        out = cls.forward_decode(backend, q, None, None, layer, fb, save_kv_cache=False)
        ref = mk.reference(q.view(-1, HEADS, 576), raw, kv_indptr, slots, layer.scaling,
                           k_scale=scale or 1.0)  # fmt: skip
        result["max_rel_err" + tag] = mk.max_rel_err(out.view(-1, HEADS, 512), ref)
    result["fast_calls"] = dispatch.fast_calls
    result["calls_to_original_decode"] = len(calls)
    torch.save(result, out_path)


def _spawned_child(mode: str, out_path: str) -> None:
    if mode == "v0523":
        _drive_0523(out_path)
    else:
        _drive(mode, out_path)


def _main(mode: str, out_path: str) -> None:
    """Parent: never imports sglang itself; the spawned child does (as SGLang's workers)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=_spawned_child, args=(mode, out_path))
    proc.start()
    proc.join(240)
    sys.exit(proc.exitcode if proc.exitcode is not None else 99)


# ------------------------------------------------------------------------------------------
# Tests


def _sglang_ready() -> str | None:
    import importlib.metadata
    import importlib.util

    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return "sglang is not installed"
    if version != "0.5.9":
        return f"needs sglang 0.5.9, found {version}"
    if importlib.util.find_spec("triton") is None:
        return "needs triton (the kernels run under TRITON_INTERPRET=1)"
    return None


pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def _run_scenario(tmp_path: Path, mode: str):
    import torch

    from glmserve.runtime import runtime_files

    reason = _sglang_ready()
    if reason:
        pytest.skip(reason)
    runtime = tmp_path / "runtime"
    for rel, data in runtime_files().items():
        (runtime / rel).parent.mkdir(parents=True, exist_ok=True)
        (runtime / rel).write_bytes(data)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GLMSERVE_PATCHES")}
    env["PYTHONPATH"] = str(runtime)
    if mode == "v0523":
        from tests.fixtures.sglang_releases import sglang_source

        env["PYTHONPATH"] += os.pathsep + str(sglang_source("0.5.23"))
    env["TRITON_INTERPRET"] = "1"
    if mode != "unpatched":
        env["GLMSERVE_PATCHES"] = PATCH
    out = tmp_path / "result.pt"
    proc = subprocess.run(
        [sys.executable, __file__, mode, str(out)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(out, weights_only=False), proc.stderr


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    return _run_scenario(tmp_path_factory.mktemp("patched"), "fp8")


@pytest.fixture(scope="module")
def unpatched(tmp_path_factory):
    return _run_scenario(tmp_path_factory.mktemp("unpatched"), "unpatched")


def test_the_hook_patches_the_real_triton_backend_in_a_spawned_worker(patched, unpatched):
    res, stderr = patched
    assert res["patched"] is True
    assert f"glmserve runtime: patches armed: {PATCH} (pid {res['pid']})" in stderr
    assert f"glmserve patch {PATCH} active (sglang 0.5.9, pid {res['pid']})" in stderr
    base, base_err = unpatched
    assert base["patched"] is False
    assert "glmserve" not in base_err


def test_patched_decode_runs_the_fp8_kernel_and_matches_the_reference(patched, unpatched):
    res, _ = patched
    assert res["fast_calls"] == 1
    assert res["calls_to_original_decode"] == 0  # SGLang's own kernel never ran
    assert res["out"].shape == (len(SEQ_LENS), HEADS * 512)
    assert res["max_rel_err"] < 2e-2
    base, _ = unpatched
    assert base["calls_to_original_decode"] == 1  # unpatched: SGLang's own function


def test_a_soft_capped_layer_falls_back_to_sglang_with_the_same_arguments(patched):
    res, stderr = patched
    assert res["fallback_calls"] == 1
    assert res["fallback_got_logit_cap"] == 30.0
    assert res["fast_calls_after"] == 1
    assert f"glmserve patch {PATCH}: logit soft-cap: SGLang's own Triton decode runs" in stderr


def test_the_newest_release_0523_decode_runs_the_fp8_kernel_with_its_scales(tmp_path):
    res, stderr = _run_scenario(tmp_path, "v0523")
    assert res["patched"] is True
    assert f"glmserve patch {PATCH} active (sglang 0.5.23, pid {res['pid']})" in stderr
    assert res["fast_calls"] == 2 and res["calls_to_original_decode"] == 0
    assert res["max_rel_err"] < 2e-2
    assert res["max_rel_err_scaled"] < 2e-2  # k_descale/v_descale reached the kernel


def test_a_bf16_kv_cache_is_refused_with_the_failed_line(tmp_path):
    res, stderr = _run_scenario(tmp_path, "bf16")
    line = f"glmserve patch {PATCH} FAILED: KV cache dtype is torch.bfloat16"
    assert res["init_error"].startswith("PatchError: " + line)
    assert line in stderr


def test_a_modified_backend_file_is_refused(tmp_path):
    """Hash check: one changed byte in the release's triton_backend.py and apply refuses."""
    import importlib.util
    import types

    from glmserve.runtime.glmserve_runtime import PatchError
    from glmserve.runtime.glmserve_runtime.patches import mla_fp8_decode as patch

    if _sglang_ready():
        pytest.skip(_sglang_ready())
    real = Path(importlib.util.find_spec(TARGET).origin)
    assert patch._source_sha(types.SimpleNamespace(__file__=str(real), __name__=TARGET))[0] in (
        patch.TESTED_SOURCES
    )
    copy = tmp_path / "triton_backend.py"
    copy.write_bytes(real.read_bytes() + b"\n# edited\n")
    fake = types.ModuleType(TARGET)
    fake.__file__ = str(copy)
    with pytest.raises(PatchError, match="differs from the released file"):
        patch.apply(fake)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_each_tested_release_file_calls_decode_as_the_dispatch_expects(version):
    """Static check of each release's own file (pip-downloaded wheel, cached): its hash is
    the table's, ``__init__`` sets ``self.decode_attention_fwd``, and every call of it in
    ``forward_decode`` passes 11 arguments by position (13 with 0.5.23's k/v scales) and
    only keywords the dispatch checks or knows to be launch-only."""
    import ast
    import hashlib

    from tests.fixtures.sglang_releases import sglang_source

    from glmserve.runtime.glmserve_runtime.patches import mla_fp8_decode as patch

    path = sglang_source(version) / "sglang/srt/layers/attention/triton_backend.py"
    assert version in patch.TESTED_SOURCES[hashlib.sha256(path.read_bytes()).hexdigest()]
    tree = ast.parse(path.read_text())
    cls = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TritonAttnBackend"
    )
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    sets = [
        n for n in ast.walk(methods["__init__"])
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "self.decode_attention_fwd"
    ]  # fmt: skip
    assert len(sets) == 1
    assert ast.unparse(sets[0].value) == "torch.compiler.disable(decode_attention_fwd)"
    calls = [
        n for n in ast.walk(methods["forward_decode"])
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "self.decode_attention_fwd"
    ]  # fmt: skip
    assert calls
    positional = 11 + (2 if patch._SCALES_BY_POSITION[version] else 0)
    for call in calls:
        assert len(call.args) == positional, ast.unparse(call)
        kws = {k.arg for k in call.keywords}
        assert kws <= patch.CHECKED_KWARGS | patch.IGNORED_KWARGS, kws


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
