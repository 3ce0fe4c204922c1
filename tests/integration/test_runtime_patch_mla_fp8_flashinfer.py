"""The mla_fp8_decode patch's flashinfer path against the real SGLang 0.5.9 (and 0.5.23)
FlashInfer MLA backend, on CPU.

Each scenario runs in a fresh process started the way SGLang starts its workers: a parent
Python (PYTHONPATH = the shipped runtime tree, GLMSERVE_PATCHES set or not) spawns a child
with ``multiprocessing`` *spawn*; the child imports the real ``flashinfer_mla_backend``
(patched by the hook sitecustomize armed in it), builds the real ``FlashInferMLAAttnBackend``
over a real FP8 ``MLATokenToKVPool`` on CPU, plans a decode batch through the real decode
indices updater and runs the real ``forward_decode``. The FP8 kernel runs under
``TRITON_INTERPRET=1`` and is checked against a float64 reference on the same FP8 values.
FlashInfer's wrapper is a stand-in that records what ``plan`` and ``run`` receive and
computes MLA attention in float32 from exactly those arguments (what the unpatched backend
and every fallback run).

Decode is planned through the updater's speculative path (its non-speculative path
allocates on ``device="cuda"`` unconditionally in 0.5.9), as in test_runtime_patch_sglang.

This file is also the driver: ``python this_file.py MODE OUT.pt``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TARGET = "sglang.srt.layers.attention.flashinfer_mla_backend"
PATCH = "mla_fp8_decode"
POOL_ROWS = 600
HEADS = 16
SEQ_LENS = [5, 130, 1, 77]


class RecordingWrapper:
    """Stand-in for flashinfer.BatchMLAPagedAttentionWrapper: records plan/run, computes
    attention in float32 torch from the arguments it is given."""

    def __init__(self, *args, **kwargs):
        self.plans: list[dict] = []
        self.runs: list[dict] = []

    def plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv,
             head_dim_kpe, page_size, causal, sm_scale, q_data_type, kv_data_type):  # fmt: skip
        self.plans.append(dict(kv_indptr=kv_indptr.clone(), kv_indices=kv_indices.clone(),
                               sm_scale=sm_scale, page_size=page_size))  # fmt: skip

    def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False):
        import torch

        plan = self.plans[-1]
        self.runs.append({"ckv_dtype": str(ckv_cache.dtype), "rows": ckv_cache.shape[0]})
        kvp, idx = plan["kv_indptr"], plan["kv_indices"].long()
        res = torch.empty(q_nope.shape, dtype=torch.float32)
        for b in range(len(kvp) - 1):
            kv = idx[int(kvp[b]) : int(kvp[b + 1])]
            keys = torch.cat([ckv_cache[kv, 0], kpe_cache[kv, 0]], dim=-1).float()
            q = torch.cat([q_nope[b], q_pe[b]], dim=-1).float()
            p = (q @ keys.T * plan["sm_scale"]).softmax(-1)
            res[b] = p @ ckv_cache[kv, 0].float()
        out.copy_(res.to(out.dtype))
        return out


def _setup_child():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
    from sglang_stubs import stub_internvl_utils_if_needed

    stub_internvl_utils_if_needed()


def _drive(mode: str, out_path: str) -> None:
    import importlib
    from types import SimpleNamespace

    import torch

    _setup_child()
    result: dict = {"pid": os.getpid()}
    try:
        mod = importlib.import_module(TARGET)
    except Exception as exc:  # a refusal at import is this scenario's result
        result["import_error"] = f"{type(exc).__name__}: {exc}"
        torch.save(result, out_path)
        return
    from glmserve_runtime.kernels import mla_fp8_decode as mk
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool

    cls = mod.FlashInferMLAAttnBackend
    result["patched"] = bool(getattr(cls, "_glmserve_mla_fp8_patched", False))
    result["rewritten"] = bool(getattr(cls.forward_decode, "_glmserve_mla_fp8", False))
    mod.BatchMLAPagedAttentionWrapper = RecordingWrapper
    mod.BatchPrefillWithRaggedKVCacheWrapper = RecordingWrapper
    mod.get_global_server_args = lambda: SimpleNamespace(
        disaggregation_mode="null", disable_chunked_prefix_cache=True,
        flashinfer_mla_disable_ragged=False,
    )  # fmt: skip
    mod.get_attention_tp_size = lambda: 1
    mod.is_sm100_supported = lambda: False
    kv_dtype = torch.bfloat16 if mode == "bf16" else torch.float8_e4m3fn
    gen = torch.Generator().manual_seed(0)
    pool = MLATokenToKVPool(
        size=POOL_ROWS, page_size=1, dtype=kv_dtype, kv_lora_rank=512, qk_rope_head_dim=64,
        layer_num=1, device="cpu", enable_memory_saver=False,
    )  # fmt: skip
    buf = pool.kv_buffer[0]
    buf.copy_((torch.randn(buf.shape, generator=gen) * 0.7).to(kv_dtype).view(buf.dtype))
    req_to_token = torch.zeros((8, 256), dtype=torch.int32)
    runner = SimpleNamespace(
        model_config=SimpleNamespace(
            context_len=256, num_attention_heads=HEADS, qk_nope_head_dim=128,
            qk_rope_head_dim=64, v_head_dim=512, kv_lora_rank=512, scaling=576**-0.5,
        ),
        device="cpu", page_size=1, req_to_token_pool=SimpleNamespace(size=8,
        req_to_token=req_to_token), dtype=torch.bfloat16, kv_cache_dtype=kv_dtype,
        token_to_kv_pool=pool,
    )  # fmt: skip
    try:
        backend = cls(runner)
    except Exception as exc:  # the patch's refusal is this scenario's result
        result["init_error"] = f"{type(exc).__name__}: {exc}"
        torch.save(result, out_path)
        return
    state = getattr(backend, "_glmserve_mla_fp8", None)
    layer = SimpleNamespace(layer_id=0, tp_q_head_num=HEADS, tp_k_head_num=1, v_head_dim=512,
                            head_dim=576, logit_cap=0.0, scaling=576**-0.5)  # fmt: skip
    slots = (torch.randperm(POOL_ROWS, generator=gen)[: sum(SEQ_LENS)] + 1).to(torch.int32)
    seq_lens = torch.tensor(SEQ_LENS, dtype=torch.int32)
    kv_indptr = torch.zeros(len(SEQ_LENS) + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(seq_lens, 0)
    spec = SimpleNamespace(kv_indptr=kv_indptr.clone(), kv_indices=slots.clone())
    backend.indices_updater_decode.update(
        torch.arange(len(SEQ_LENS)), seq_lens, int(seq_lens.sum()),
        decode_wrapper=backend.decode_wrapper, init_metadata_replay=False, spec_info=spec,
    )  # fmt: skip
    backend.forward_metadata = mod.DecodeMetadata(backend.decode_wrapper)
    q = torch.randn((len(SEQ_LENS), HEADS * 576), generator=gen).to(torch.bfloat16)
    fb = SimpleNamespace(token_to_kv_pool=pool, out_cache_loc=None)
    out = backend.forward_decode(q, None, None, layer, fb, save_kv_cache=False)
    ref = mk.reference(q.view(-1, HEADS, 576), pool.get_key_buffer(0), kv_indptr, slots,
                       layer.scaling)  # fmt: skip
    result.update(out=out, max_rel_err=mk.max_rel_err(out.view(-1, HEADS, 512), ref),
                  runs=list(backend.decode_wrapper.runs))  # fmt: skip
    if state is not None:
        result["fast_calls"] = state.fast_calls
        # A wrapper planned outside the updater (no recorded plan): the release's own path.
        other = RecordingWrapper()
        other.plan(None, kv_indptr, slots, seq_lens, HEADS, 512, 64, 1, False, layer.scaling,
                   torch.bfloat16, torch.bfloat16)  # fmt: skip
        backend.forward_metadata = mod.DecodeMetadata(other)
        out2 = backend.forward_decode(q, None, None, layer, fb, save_kv_cache=False)
        result["fallback_runs"] = other.runs
        result["fallback_calls"] = state.fallback_calls
        result["fallback_err"] = mk.max_rel_err(out2.view(-1, HEADS, 512), ref)
    torch.save(result, out_path)


def _drive_0523(out_path: str) -> None:
    """SGLang 0.5.23 (its wheel source first on sys.path): the hook patches its real module
    and its real ``forward_decode`` runs the kernel. Its constructor needs SGLang's runtime
    context, so the backend is made with ``__new__`` and the attributes forward_decode
    reads; the patch's ``install`` (what the patched ``__init__`` runs) gives it its state,
    and the plan goes through the same recording the patched updater uses."""
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
    mod = importlib.import_module(TARGET)
    from glmserve_runtime.kernels import mla_fp8_decode as mk
    from glmserve_runtime.patches import mla_fp8_flashinfer as fi

    cls = mod.FlashInferMLAAttnBackend
    result: dict = {"pid": os.getpid(),
                    "patched": bool(getattr(cls, "_glmserve_mla_fp8_patched", False))}  # fmt: skip
    gen = torch.Generator().manual_seed(5)
    raw = (torch.randn((POOL_ROWS, 1, 576), generator=gen) * 0.7).to(torch.float8_e4m3fn)
    backend = cls.__new__(cls)
    backend.indices_updater_decode = SimpleNamespace(num_local_heads=HEADS)
    backend.token_to_kv_pool = SimpleNamespace(get_key_buffer=lambda i: raw)
    runner = SimpleNamespace(
        kv_cache_dtype=torch.float8_e4m3fn, req_to_token_pool=SimpleNamespace(size=8),
        model_config=SimpleNamespace(kv_lora_rank=512, qk_rope_head_dim=64), device="cpu",
    )  # fmt: skip
    state = fi.install(backend, runner)
    wrapper = RecordingWrapper()
    slots = torch.randperm(POOL_ROWS, generator=gen)[: sum(SEQ_LENS)].to(torch.int32)
    kv_indptr = torch.zeros(len(SEQ_LENS) + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.tensor(SEQ_LENS).cumsum(0)
    with fi.record_plan(wrapper):
        wrapper.plan(None, kv_indptr, slots, None, HEADS, 512, 64, 1, False, 576**-0.5,
                     torch.bfloat16, torch.bfloat16)  # fmt: skip
    backend.forward_metadata = SimpleNamespace(decode_wrapper=wrapper)
    layer = SimpleNamespace(layer_id=0, tp_q_head_num=HEADS, v_head_dim=512, head_dim=576)
    q = torch.randn((len(SEQ_LENS), HEADS * 576), generator=gen).to(torch.bfloat16)
    fb = SimpleNamespace(forward_mode=SimpleNamespace(is_decode=lambda: False))
    out = cls.forward_decode(backend, q, None, None, layer, fb, save_kv_cache=False)
    ref = mk.reference(q.view(-1, HEADS, 576), raw, kv_indptr, slots, 576**-0.5)
    result.update(max_rel_err=mk.max_rel_err(out.view(-1, HEADS, 512), ref),
                  fast_calls=state.fast_calls, runs=wrapper.runs)  # fmt: skip
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


def _run_scenario(tmp_path: Path, mode: str, patches: str | None = PATCH):
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
    env["SGLANG_FLASHINFER_WORKSPACE_SIZE"] = str(1 << 20)
    if patches:
        env["GLMSERVE_PATCHES"] = patches
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
    return _run_scenario(tmp_path_factory.mktemp("unpatched"), "fp8", patches=None)


def test_the_hook_patches_the_real_flashinfer_backend_in_a_spawned_worker(patched, unpatched):
    res, stderr = patched
    assert res["patched"] is True and res["rewritten"] is True
    assert f"glmserve patch {PATCH} active (sglang 0.5.9, pid {res['pid']})" in stderr
    assert f"glmserve patch {PATCH}: flashinfer MLA decode reads the FP8 KV pool" in stderr
    base, base_err = unpatched
    assert base["patched"] is False and "glmserve" not in base_err


def test_patched_decode_runs_the_kernel_on_the_uncast_pool(patched, unpatched):
    res, _ = patched
    assert res["fast_calls"] == 1
    assert res["runs"] == []  # FlashInfer never ran: no BF16 copy was handed to it
    assert res["max_rel_err"] < 2e-2
    base, _ = unpatched
    # unpatched: FlashInfer got the whole pool cast to BF16 (the cost the patch removes)
    assert base["runs"] == [{"ckv_dtype": "torch.bfloat16", "rows": POOL_ROWS + 1}]
    assert base["max_rel_err"] < 2e-2


def test_a_wrapper_planned_elsewhere_falls_back_to_the_release_path(patched):
    res, stderr = patched
    assert res["fallback_calls"] == 1
    assert res["fallback_runs"] == [{"ckv_dtype": "torch.bfloat16", "rows": POOL_ROWS + 1}]
    assert res["fallback_err"] < 2e-2
    assert "planned outside the patched updater: cast + FlashInfer runs" in stderr


def test_a_bf16_kv_cache_is_refused_with_the_failed_line(tmp_path):
    res, stderr = _run_scenario(tmp_path, "bf16")
    line = f"glmserve patch {PATCH} FAILED: KV cache dtype is torch.bfloat16"
    assert res["init_error"].startswith("PatchError: " + line)
    assert line in stderr


def test_combining_with_gather_cast_is_refused(tmp_path):
    res, stderr = _run_scenario(tmp_path, "fp8", patches=f"{PATCH},flashinfer_mla_gather_cast")
    line = f"glmserve patch {PATCH} FAILED: mla_fp8_decode and flashinfer_mla_gather_cast"
    assert res["import_error"].startswith("PatchError: " + line)
    assert line in stderr


def test_the_newest_release_0523_decode_runs_the_kernel(tmp_path):
    res, stderr = _run_scenario(tmp_path, "v0523")
    assert res["patched"] is True
    assert f"glmserve patch {PATCH} active (sglang 0.5.23, pid {res['pid']})" in stderr
    assert res["fast_calls"] == 1 and res["runs"] == []
    assert res["max_rel_err"] < 2e-2


def test_a_modified_flashinfer_backend_file_is_refused(tmp_path):
    import importlib.util
    import types

    from glmserve.runtime.glmserve_runtime import PatchError
    from glmserve.runtime.glmserve_runtime.patches import mla_fp8_flashinfer as fi

    if _sglang_ready():
        pytest.skip(_sglang_ready())
    real = Path(importlib.util.find_spec(TARGET).origin)
    copy = tmp_path / "flashinfer_mla_backend.py"
    copy.write_bytes(real.read_bytes() + b"\n# edited\n")
    fake = types.ModuleType(TARGET)
    fake.__file__ = str(copy)
    with pytest.raises(PatchError, match="differs from the released file"):
        fi.apply(fake, "0.5.9")


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_each_tested_release_file_rewrites_exactly_one_cast_and_one_run(version):
    """Static check of each release's own file (pip-downloaded wheel, cached): its hash is
    the table's and forward_decode recompiles with one cast and one run call replaced."""
    import hashlib
    import types

    from tests.fixtures.sglang_releases import sglang_source

    from glmserve.runtime.glmserve_runtime.patches import mla_fp8_flashinfer as fi

    path = sglang_source(version) / "sglang/srt/layers/attention/flashinfer_mla_backend.py"
    assert fi.TESTED_SOURCES[hashlib.sha256(path.read_bytes()).hexdigest()] == (version,)
    fake = types.ModuleType(TARGET)
    fake.__file__ = str(path)
    fn = fi.rewrite_forward_decode(fake)
    names = set(fn.__code__.co_names)
    assert {fi.KEY_BUFFER_HELPER, fi.RUN_HELPER} <= names
    assert fn.__code__.co_filename == str(path)


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
