"""The gather-then-cast patch against the real SGLang 0.5.9 FlashInfer MLA backend, on CPU.

Each scenario runs in a fresh process started the way SGLang starts its workers: a parent
Python (PYTHONPATH = the shipped runtime tree, GLMSERVE_PATCHES set or not) spawns a child with
``multiprocessing`` *spawn*; the child imports the real ``flashinfer_mla_backend`` (patched by
the hook that sitecustomize armed in it), builds the real ``FlashInferMLAAttnBackend`` over a
real ``MLATokenToKVPool`` (FP8, on CPU) and runs its real ``forward_decode`` and paged
``forward_extend``. Only FlashInfer's wrapper is a stand-in: it records what ``plan`` and
``run`` receive and computes MLA attention in float32 torch from exactly those arguments, so
patched and unpatched outputs can be compared bit for bit.

Decode is planned through the updater's speculative path (its non-speculative path allocates
on ``device="cuda"`` unconditionally in 0.5.9); extend goes through the real non-speculative
path, whose Triton index kernel runs under ``TRITON_INTERPRET=1``.

Needs sglang==0.5.9 (installed ``--no-deps`` + light deps) and triton; skipped otherwise. If
torchvision cannot be imported (PyPI's Linux torchvision wheels are CUDA builds that do not
load on torch+cpu), the driver pre-registers ``sglang.srt.multimodal.internvl_utils`` (two
image-normalisation constants, the only thing imported from it on this path) so that
sglang's config package imports; nothing on the attention path is stubbed.

This file is also the driver: ``python this_file.py MODE OUT.pt``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TARGET = "sglang.srt.layers.attention.flashinfer_mla_backend"
PATCH = "flashinfer_mla_gather_cast"
POOL_ROWS = 1000
HEADS = 4
SEQ_LENS = [5, 40, 17]
EXTEND_LENS = [2, 3, 1]  # new tokens per request in the extend scenario


# ------------------------------------------------------------------------------------------
# Driver (runs in the spawned child). Imports only torch and sglang.


def _stub_internvl_utils_if_needed() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
    from sglang_stubs import stub_internvl_utils_if_needed

    stub_internvl_utils_if_needed()


def _reference_mla(q_nope, q_pe, ckv, kpe, plan):
    """MLA attention in float32 from the wrapper's own inputs (what FlashInfer computes,
    without the causal mask: both runs compare the same function)."""
    import torch

    qo, kvp, idx = plan["qo_indptr"], plan["kv_indptr"], plan["kv_indices"].long()
    out = torch.empty(q_nope.shape, dtype=torch.float32)
    for b in range(len(qo) - 1):
        rows = slice(int(qo[b]), int(qo[b + 1]))
        kv = idx[int(kvp[b]) : int(kvp[b + 1])]
        keys = torch.cat([ckv[kv, 0], kpe[kv, 0]], dim=-1).float()
        q = torch.cat([q_nope[rows], q_pe[rows]], dim=-1).float()
        p = (torch.einsum("qhd,kd->qhk", q, keys) * plan["sm_scale"]).softmax(-1)
        out[rows] = torch.einsum("qhk,kd->qhd", p, ckv[kv, 0].float())
    return out.to(q_nope.dtype)


class RecordingWrapper:
    """Stand-in for flashinfer.BatchMLAPagedAttentionWrapper (plan/run) and the ragged one."""

    def __init__(self, *args, **kwargs):
        self.plans: list[dict] = []
        self.runs: list[dict] = []

    def plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv,
             head_dim_kpe, page_size, causal, sm_scale, q_data_type, kv_data_type):  # fmt: skip
        self.plans.append(
            {
                "qo_indptr": qo_indptr.clone(),
                "kv_indptr": kv_indptr.clone(),
                "kv_indices": kv_indices.clone(),
                "kv_len_arr": kv_len_arr.clone(),
                "num_heads": num_heads,
                "dims": (head_dim_ckv, head_dim_kpe),
                "page_size": page_size,
                "causal": causal,
                "sm_scale": sm_scale,
                "dtypes": (str(q_data_type), str(kv_data_type)),
            }
        )

    def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False):
        plan = self.plans[-1]
        self.runs.append(
            {
                "ckv": ckv_cache.clone(),
                "kpe": kpe_cache.clone(),
                "same_storage": ckv_cache.data_ptr() + 512 * 2 == kpe_cache.data_ptr(),
            }
        )
        out.copy_(_reference_mla(q_nope, q_pe, ckv_cache, kpe_cache, plan))
        return out

    def begin_forward(self, *args, **kwargs):
        raise AssertionError("ragged prefill is not part of this test")


def _drive(out_path: str) -> None:
    import importlib
    from types import SimpleNamespace

    import torch

    _stub_internvl_utils_if_needed()
    mod = importlib.import_module(TARGET)
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool

    result: dict = {
        "pid": os.getpid(),
        "patched_class": bool(getattr(mod.FlashInferMLAAttnBackend, "_glmserve_patched", False)),
        "forward_decode_rewritten": bool(
            getattr(mod.FlashInferMLAAttnBackend.forward_decode, "_glmserve_rewritten", False)
        ),
        "forward_decode_file": mod.FlashInferMLAAttnBackend.forward_decode.__code__.co_filename,
    }
    mod.BatchMLAPagedAttentionWrapper = RecordingWrapper
    mod.BatchPrefillWithRaggedKVCacheWrapper = RecordingWrapper
    mod.get_global_server_args = lambda: SimpleNamespace(
        disaggregation_mode="null",
        disable_chunked_prefix_cache=True,
        flashinfer_mla_disable_ragged=False,
    )
    mod.get_attention_tp_size = lambda: 1
    mod.is_sm100_supported = lambda: False

    gen = torch.Generator().manual_seed(0)
    pool = MLATokenToKVPool(
        size=POOL_ROWS,
        page_size=1,
        dtype=torch.float8_e4m3fn,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        layer_num=2,
        device="cpu",
        enable_memory_saver=False,
    )
    for buf in pool.kv_buffer:  # finite random FP8 values (NaN would defeat output equality)
        vals = torch.randn(buf.shape, generator=gen) * 0.7
        buf.copy_(vals.to(torch.float8_e4m3fn).view(torch.uint8))
    max_ctx = 64
    req_to_token = torch.zeros((8, max_ctx), dtype=torch.int32)
    model_runner = SimpleNamespace(
        model_config=SimpleNamespace(
            context_len=max_ctx,
            num_attention_heads=HEADS,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=512,
            kv_lora_rank=512,
            scaling=576**-0.5,
        ),
        device="cpu",
        page_size=1,
        req_to_token_pool=SimpleNamespace(size=8, req_to_token=req_to_token),
        dtype=torch.bfloat16,
        kv_cache_dtype=torch.float8_e4m3fn,
        token_to_kv_pool=pool,
    )
    backend = mod.FlashInferMLAAttnBackend(model_runner)
    layer = SimpleNamespace(
        layer_id=1,
        tp_q_head_num=HEADS,
        tp_k_head_num=1,
        v_head_dim=512,
        head_dim=576,
        logit_cap=0.0,
        scaling=576**-0.5,
    )

    # Scattered slots per request (slot 0 is SGLang's padding slot), written to req_to_token.
    slots = (torch.randperm(POOL_ROWS, generator=gen)[: sum(SEQ_LENS)] + 1).to(torch.int32)
    seq_lens = torch.tensor(SEQ_LENS, dtype=torch.int32)
    kv_indptr = torch.zeros(len(SEQ_LENS) + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(seq_lens, 0)
    for r, n in enumerate(SEQ_LENS):
        req_to_token[r, :n] = slots[int(kv_indptr[r]) : int(kv_indptr[r]) + n]
    req_pool_indices = torch.arange(len(SEQ_LENS), dtype=torch.int64)

    # Decode, planned through the updater's spec_info path.
    spec = SimpleNamespace(kv_indptr=kv_indptr.clone(), kv_indices=slots.clone())
    backend.indices_updater_decode.update(
        req_pool_indices,
        seq_lens,
        int(seq_lens.sum()),
        decode_wrapper=backend.decode_wrapper,
        init_metadata_replay=False,
        spec_info=spec,
    )
    backend.forward_metadata = mod.DecodeMetadata(backend.decode_wrapper)
    q = torch.randn((len(SEQ_LENS), HEADS * 576), generator=gen).to(torch.bfloat16)
    fb = SimpleNamespace(token_to_kv_pool=pool, out_cache_loc=None)
    result["decode_out"] = backend.forward_decode(q, None, None, layer, fb, save_kv_cache=False)
    result["decode_plan"] = backend.decode_wrapper.plans[-1]
    result["decode_run"] = backend.decode_wrapper.runs[-1]
    result["slots"] = slots
    result["kv_indptr"] = kv_indptr
    result["layer_pool_bf16"] = pool.get_key_buffer(1).to(torch.bfloat16)

    # Paged extend through the real non-speculative updater path.
    ext = torch.tensor(EXTEND_LENS, dtype=torch.int32)
    prefix_lens = seq_lens - ext
    backend.indices_updater_prefill.update(
        req_pool_indices,
        seq_lens,
        int(seq_lens.sum()),
        prefix_lens,
        prefill_wrapper_paged=backend.prefill_wrapper_paged,
        use_ragged=False,
    )
    backend.forward_metadata = mod.PrefillMetadata(backend.prefill_wrapper_paged, False)
    q_ext = torch.randn((int(ext.sum()), HEADS * 576), generator=gen).to(torch.bfloat16)
    fb_ext = SimpleNamespace(
        token_to_kv_pool=pool,
        out_cache_loc=None,
        attn_attend_prefix_cache=None,
        extend_prefix_lens_cpu=prefix_lens.tolist(),
    )
    result["extend_out"] = backend.forward_extend(q_ext, None, None, layer, fb_ext, False)
    result["extend_plan"] = backend.prefill_wrapper_paged.plans[-1]
    result["extend_run"] = backend.prefill_wrapper_paged.runs[-1]

    # Target verify (speculative decoding): the prefill updater's spec_info path plans the
    # draft tokens (here 2 per request) over the same KV rows; forward_extend's paged branch.
    from sglang.srt.speculative.spec_info import SpecInput, SpecInputType

    draft = 2
    qo_verify = torch.arange(0, (len(SEQ_LENS) + 1) * draft, draft, dtype=torch.int32)

    class VerifyInput(SpecInput):
        def get_spec_adjust_token_coefficient(self):
            return draft, draft

        def generate_attn_arg_prefill(self, req_pool_indices, lens, lens_sum, req_to_token):
            return slots.clone(), kv_indptr.clone(), qo_verify.clone(), None

    backend.indices_updater_prefill.update(
        req_pool_indices,
        seq_lens,
        int(seq_lens.sum()),
        prefix_lens=None,
        prefill_wrapper_paged=backend.prefill_wrapper_paged,
        use_ragged=False,
        spec_info=VerifyInput(SpecInputType.EAGLE_VERIFY),
    )
    backend.forward_metadata = mod.PrefillMetadata(backend.prefill_wrapper_paged, False)
    q_ver = torch.randn((len(SEQ_LENS) * draft, HEADS * 576), generator=gen).to(torch.bfloat16)
    fb_ver = SimpleNamespace(
        token_to_kv_pool=pool,
        out_cache_loc=None,
        attn_attend_prefix_cache=None,
        extend_prefix_lens_cpu=[0] * len(SEQ_LENS),
    )
    result["verify_out"] = backend.forward_extend(q_ver, None, None, layer, fb_ver, False)
    result["verify_plan"] = backend.prefill_wrapper_paged.plans[-1]
    result["verify_run"] = backend.prefill_wrapper_paged.runs[-1]

    if result["patched_class"]:
        try:
            backend.init_cuda_graph_state(8, 8)
            result["cuda_graph_refusal"] = None
        except Exception as exc:
            result["cuda_graph_refusal"] = f"{type(exc).__name__}: {exc}"
    torch.save(result, out_path)


def _spawned_child(out_path: str) -> None:
    _drive(out_path)


def _main(out_path: str) -> None:
    """Parent: never imports sglang itself; the spawned child does (as SGLang's workers)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=_spawned_child, args=(out_path,))
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
        return "needs triton (sglang's index kernel runs under TRITON_INTERPRET=1)"
    return None


pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def _run_scenario(tmp_path: Path, patched: bool, extra_env: dict[str, str] | None = None):
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
    env["TRITON_INTERPRET"] = "1"
    env["SGLANG_FLASHINFER_WORKSPACE_SIZE"] = str(1 << 20)
    if patched:
        env["GLMSERVE_PATCHES"] = PATCH
    env.update(extra_env or {})
    out = tmp_path / "result.pt"
    proc = subprocess.run(
        [sys.executable, __file__, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(out, weights_only=False), proc.stderr


@pytest.fixture(scope="module")
def unpatched(tmp_path_factory):
    return _run_scenario(tmp_path_factory.mktemp("unpatched"), patched=False)


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    return _run_scenario(tmp_path_factory.mktemp("patched"), patched=True)


def _bits(t):
    import torch

    return t.contiguous().view(torch.int16)


def test_the_hook_patches_the_real_backend_class_in_a_spawned_worker(patched, unpatched):
    res, stderr = patched
    assert res["patched_class"] is True
    # forward_decode is the release's own method, recompiled from its own file with the one
    # cast rewritten (no copy of the body lives in glmserve).
    assert res["forward_decode_rewritten"] is True
    assert res["forward_decode_file"].endswith("flashinfer_mla_backend.py")
    # sitecustomize armed the spawned child, and the child logged the activation line.
    assert f"glmserve runtime: patches armed: {PATCH} (pid {res['pid']})" in stderr
    assert f"glmserve patch {PATCH} active (sglang 0.5.9, pid {res['pid']})" in stderr
    base, base_err = unpatched
    assert base["patched_class"] is False
    assert "glmserve" not in base_err


def test_patched_decode_plans_identity_and_runs_on_the_compact_buffer(patched, unpatched):
    import torch

    res, _ = patched
    base, _ = unpatched
    nnz = sum(SEQ_LENS)
    plan, run = res["decode_plan"], res["decode_run"]
    assert torch.equal(plan["kv_indices"], torch.arange(nnz, dtype=torch.int32))
    for key in ("qo_indptr", "kv_indptr", "kv_len_arr"):  # unchanged by the patch
        assert torch.equal(plan[key], base["decode_plan"][key]), key
    assert plan["dtypes"] == base["decode_plan"]["dtypes"] == ("torch.bfloat16",) * 2
    assert plan["page_size"] == 1
    assert run["ckv"].shape == (nnz, 1, 512) and run["kpe"].shape == (nnz, 1, 64)
    assert run["same_storage"]  # the two views of one [nnz, 1, 576] buffer
    compact = torch.cat([run["ckv"], run["kpe"]], dim=-1)
    want = res["layer_pool_bf16"][res["slots"].long()]  # pool[kv_indices].to(bf16)
    assert torch.equal(_bits(compact), _bits(want))
    # Same attention output as the unpatched backend, bit for bit.
    assert torch.equal(_bits(res["decode_out"]), _bits(base["decode_out"]))


def test_unpatched_decode_hands_the_wrapper_the_whole_pool(unpatched):
    import torch

    base, _ = unpatched
    plan, run = base["decode_plan"], base["decode_run"]
    assert torch.equal(plan["kv_indices"], base["slots"])
    whole = torch.cat([run["ckv"], run["kpe"]], dim=-1)
    assert whole.shape == (POOL_ROWS + 1, 1, 576)
    assert torch.equal(_bits(whole), _bits(base["layer_pool_bf16"]))


def test_patched_paged_extend_matches_unpatched(patched, unpatched):
    import torch

    res, _ = patched
    base, _ = unpatched
    nnz = sum(SEQ_LENS)
    # The real updater built the per-token indices (Triton kernel, interpreted on CPU).
    assert torch.equal(base["extend_plan"]["kv_indices"], base["slots"])
    assert torch.equal(res["extend_plan"]["kv_indices"], torch.arange(nnz, dtype=torch.int32))
    for key in ("qo_indptr", "kv_indptr", "kv_len_arr"):
        assert torch.equal(res["extend_plan"][key], base["extend_plan"][key]), key
    assert res["extend_plan"]["causal"] is True
    compact = torch.cat([res["extend_run"]["ckv"], res["extend_run"]["kpe"]], dim=-1)
    want = res["layer_pool_bf16"][res["slots"].long()]
    assert torch.equal(_bits(compact), _bits(want))
    assert torch.equal(_bits(res["extend_out"]), _bits(base["extend_out"]))


def test_target_verify_plans_through_the_same_updater_and_matches_unpatched(patched, unpatched):
    import torch

    res, _ = patched
    base, _ = unpatched
    nnz = sum(SEQ_LENS)
    assert torch.equal(base["verify_plan"]["kv_indices"], base["slots"])
    assert torch.equal(res["verify_plan"]["kv_indices"], torch.arange(nnz, dtype=torch.int32))
    assert torch.equal(res["verify_plan"]["qo_indptr"], base["verify_plan"]["qo_indptr"])
    compact = torch.cat([res["verify_run"]["ckv"], res["verify_run"]["kpe"]], dim=-1)
    assert torch.equal(_bits(compact), _bits(res["layer_pool_bf16"][res["slots"].long()]))
    whole = torch.cat([base["verify_run"]["ckv"], base["verify_run"]["kpe"]], dim=-1)
    assert whole.shape == (POOL_ROWS + 1, 1, 576)
    assert torch.equal(_bits(res["verify_out"]), _bits(base["verify_out"]))


def test_over_the_cap_falls_back_to_the_whole_pool_with_one_warning(tmp_path, unpatched):
    import torch

    res, stderr = _run_scenario(tmp_path, patched=True, extra_env={"GLMSERVE_GTC_MAX_ROWS": "10"})
    base, _ = unpatched
    assert torch.equal(res["decode_plan"]["kv_indices"], res["slots"])
    assert res["decode_run"]["ckv"].shape == (POOL_ROWS + 1, 1, 512)
    assert torch.equal(_bits(res["decode_out"]), _bits(base["decode_out"]))
    assert torch.equal(_bits(res["extend_out"]), _bits(base["extend_out"]))
    warnings = [ln for ln in stderr.splitlines() if "WARNING batch needs" in ln]
    assert len(warnings) == 1 and "> cap 10" in warnings[0]


def test_cuda_graphs_are_refused_with_the_failed_line(patched):
    res, stderr = patched
    line = f"glmserve patch {PATCH} FAILED: CUDA graphs are on"
    assert res["cuda_graph_refusal"].startswith("PatchError: " + line)
    assert line in stderr


if __name__ == "__main__":
    _main(sys.argv[1])
