"""SGLang's ``triton`` attention backend: MLA decode over the FP8 KV pool through glmserve's
FP8-native kernel (``kernels/mla_fp8_decode.py``).

Problem: with ``--attention-backend triton`` and an FP8 KV cache, SGLang's Triton MLA decode
kernel (``_fwd_grouped_kernel_stage1``) reads the FP8 pool directly but multiplies the
softmax weights in FP8 (``p.to(v.dtype)``, 0.5.9 and, on NVIDIA, 0.5.23) and was measured
at 18% of the H200's copy bandwidth where 100+ MB are read (issue 26).

What this patch changes (and nothing else): ``TritonAttnBackend.__init__`` runs unchanged,
then its ``self.decode_attention_fwd`` (the function ``forward_decode`` calls, set in the
release's ``__init__``) is wrapped by :class:`Dispatch`. A call goes to the FP8 kernel only
when all of these hold; otherwise the release's own function runs with the same arguments:

* the key buffer is ``float8_e4m3fn`` ``[N, 1, 576]`` and the value buffer is its first 512
  columns (MLA's latent cache, one KV head), query and output BF16 ``[B, H, 576|512]``;
* no logit soft-cap, no attention sinks, no xai temperature, no ``score_mod``, page size 1
  (0.5.23 passes ``page_size``: larger pages take page ids the kernel is not given lengths
  for), and (0.5.23) ``k_scale == v_scale``, which the kernel applies to K and V;
* the batch fits the kernel's workspace, reserved once for the backend's
  ``req_to_token_pool.size`` requests (more rows, e.g. speculative drafts, fall back).

The backend still allocates and fills its own split buffers; the kernel ignores them and
chooses its split count on the device from the lengths, with a fixed grid per batch size,
so decode CUDA graphs capture it (``num_kv_splits`` / ``--triton-attention-num-kv-splits``
then only matter for the fallback path).

Supported: the files of SGLang **0.5.9** and **0.5.23** (``triton_backend.py``, sha256 in
:data:`TESTED_SOURCES`; the wrapper relies on ``__init__`` setting
``self.decode_attention_fwd`` and on ``forward_decode``'s call signature, read in both).
Anything else is refused with the reason, never run unpatched. Requirements checked when
the backend is built: KV cache dtype ``float8_e4m3fn`` and an MLA model (``kv_lora_rank``
512 + ``qk_rope_head_dim`` 64). A refusal logs ``glmserve patch mla_fp8_decode FAILED:
<reason>`` and raises, so the worker dies rather than running unpatched.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
from types import ModuleType
from typing import Any

from .. import fail, log

PATCH = "mla_fp8_decode"
TARGET = "sglang.srt.layers.attention.triton_backend"
# the flashinfer MLA backend's decode: mla_fp8_flashinfer.py
FLASHINFER_TARGET = "sglang.srt.layers.attention.flashinfer_mla_backend"
TARGETS = (TARGET, FLASHINFER_TARGET)
# sha256 of sglang/srt/layers/attention/triton_backend.py -> releases shipping that file
# (0.5.9: the installed wheel; 0.5.23: pip download --no-deps sglang==0.5.23, 2026-12-04).
TESTED_SOURCES: dict[str, tuple[str, ...]] = {
    "e7701b1c92f51d8f63e1f2fc32d97c2987840714463e93a2d0d9b13ec5584a8a": ("0.5.9",),
    "2e095cfafcd30ad0e720fd1ecd70c92f1a83f47a86a28da0ab739ab5717100aa": ("0.5.23",),
}
SUPPORTED_VERSIONS: tuple[str, ...] = tuple(v for vs in TESTED_SOURCES.values() for v in vs)
# Arguments of decode_attention_fwd after sm_scale that 0.5.23 passes by position.
_SCALES_BY_POSITION = {"0.5.9": False, "0.5.23": True}
# Keyword arguments forward_decode passes in the tested releases: the first group changes
# what is computed and is checked by Dispatch (anything set sends the call to SGLang's own
# kernel); the second only picks SGLang's launch strategy and is irrelevant to this kernel.
# tests/integration/test_runtime_patch_mla_fp8.py reads each tested file's calls against it.
CHECKED_KWARGS = frozenset({"logit_cap", "sinks", "xai_temperature_len", "score_mod",
                            "aux_tensors", "page_size"})  # fmt: skip
IGNORED_KWARGS = frozenset({"has_mla", "use_pdl", "enable_lean", "lean_Mp", "lean_Lp",
                            "lean_Op", "lean_locks", "uneven_batch"})  # fmt: skip


def unsupported_version_reason(version: str) -> str:
    return f"unsupported sglang {version} (supported: {', '.join(SUPPORTED_VERSIONS)})"


def kv_dtype_reason(kv_dtype: str) -> str:
    return (
        f"KV cache dtype is {kv_dtype}, not torch.float8_e4m3fn: the FP8 MLA decode kernel "
        "reads an e4m3 pool (use --kv-cache-dtype fp8_e4m3 or drop the patch)"
    )


def mla_reason(rank: Any, rope: Any) -> str:
    return (
        f"not an MLA model with a 512 + 64 latent cache (kv_lora_rank {rank}, "
        f"qk_rope_head_dim {rope})"
    )


def launch_requirement_failures(
    args: dict[str, Any], version: str | None, kv_row: tuple[int, int, int] | None = None
) -> list[Any]:
    """The requirements a launch with SGLang ``args`` (dest -> value; ``kv_cache_dtype``)
    on ``version`` breaks, as ``flashinfer_mla_gather_cast.Requirement`` rows with the exact
    reason the worker would log. Pure (no torch, no sglang): validation and the simulator
    call it. ``kv_row``: (row width, kv_lora_rank, qk_rope_head_dim) when known."""
    from .flashinfer_mla_gather_cast import KV_CACHE_TORCH_DTYPES, Requirement

    out = []
    if version is not None and version not in SUPPORTED_VERSIONS:
        want = "sglang " + " or ".join(SUPPORTED_VERSIONS)
        out.append(Requirement("sglang", want, unsupported_version_reason(version), "import"))
    kv = str(args.get("kv_cache_dtype") or "auto")
    # "auto" follows the checkpoint (FP8 for GLM-5 NVFP4): only a caller that knows it can say
    kv_torch = None if kv == "auto" else KV_CACHE_TORCH_DTYPES.get(kv, kv)
    if kv_torch is not None and kv_torch != "torch.float8_e4m3fn":
        out.append(Requirement("--kv-cache-dtype", "fp8_e4m3", kv_dtype_reason(kv_torch), "init"))
    if kv_row is not None and (kv_row[1], kv_row[2]) != (512, 64):
        out.append(Requirement("--model-path", "an MLA model", mla_reason(*kv_row[1:]), "init"))
    return out


def _source_sha(module: ModuleType) -> tuple[str, str]:
    path = getattr(module, "__file__", None)
    if not path or not os.path.exists(path):
        raise fail(PATCH, f"cannot read the source of {module.__name__}")
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest(), path


def _installed_version() -> str:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class Dispatch:
    """Stands in for ``TritonAttnBackend.decode_attention_fwd`` (same call signature)."""

    def __init__(self, original: Any, scales_by_position: bool, heads: int, max_batch: int,
                 device: Any) -> None:  # fmt: skip
        import torch

        from ..kernels import mla_fp8_decode as mk

        self.mk = mk
        self.original = original
        self.scales_by_position = scales_by_position
        self.workspace = mk.Workspace()
        self.workspace.reserve(max_batch, heads, torch.device(device))
        self.fast_calls = 0
        self.fallback_calls = 0
        self._logged: set[str] = set()

    def _fallback_reason(self, q, k_buffer, v_buffer, o, rest, kwargs) -> str | None:
        import torch

        mk = self.mk
        if k_buffer.dtype != mk.FP8_DTYPE or k_buffer.dim() != 3 or k_buffer.shape[1] != 1:
            return f"KV buffer {k_buffer.dtype} {tuple(k_buffer.shape)}"
        if k_buffer.shape[2] != mk.D_KV or v_buffer.shape[-1] != mk.D_LATENT:
            return f"row widths {k_buffer.shape[-1]}/{v_buffer.shape[-1]}"
        if v_buffer.data_ptr() != k_buffer.data_ptr() or v_buffer.stride() != k_buffer.stride():
            return "the value buffer is not the key buffer's latent part"
        if q.dtype != torch.bfloat16 or o.dtype != torch.bfloat16:
            return f"q {q.dtype} / out {o.dtype}"
        if q.dim() != 3 or q.shape[2] != mk.D_KV or o.dim() != 3:
            return f"q {tuple(q.shape)}"
        if float(kwargs.get("logit_cap") or 0.0) != 0.0:
            return "logit soft-cap"
        if kwargs.get("sinks") is not None:
            return "attention sinks"
        xai = kwargs.get("xai_temperature_len")
        if xai is not None and xai > 0:
            return "xai temperature"
        unknown = set(kwargs) - CHECKED_KWARGS - IGNORED_KWARGS
        if unknown:
            return f"unknown arguments {sorted(unknown)}"
        if kwargs.get("score_mod") is not None:
            return "score_mod"
        if int(kwargs.get("page_size") or 1) != 1:
            return f"page_size {kwargs.get('page_size')}"
        if self.scales_by_position and len(rest) >= 2 and rest[0] != rest[1]:
            return "k_scale != v_scale"
        splits = self.mk.default_config(q.shape[0], q.shape[1], q.device).max_splits
        if not self.workspace.fits(q.shape[0], q.shape[1], splits):
            return f"batch {q.shape[0]} exceeds the reserved workspace"
        return None

    def __call__(self, q, k_buffer, v_buffer, o, kv_indptr, kv_indices, attn_logits, attn_lse,
                 num_kv_splits, max_kv_splits, sm_scale, *rest, **kwargs):  # fmt: skip
        reason = self._fallback_reason(q, k_buffer, v_buffer, o, rest, kwargs)
        if reason is not None:
            self.fallback_calls += 1
            if reason not in self._logged:
                self._logged.add(reason)
                log(f"glmserve patch {PATCH}: {reason}: SGLang's own Triton decode runs")
            return self.original(
                q, k_buffer, v_buffer, o, kv_indptr, kv_indices, attn_logits, attn_lse,
                num_kv_splits, max_kv_splits, sm_scale, *rest, **kwargs,
            )  # fmt: skip
        k_scale = float(rest[0]) if self.scales_by_position and rest else None
        self.fast_calls += 1
        self.mk.mla_fp8_decode(
            q, k_buffer, kv_indptr, kv_indices, float(sm_scale), out=o,
            k_scale=None if k_scale in (None, 1.0) else k_scale, workspace=self.workspace,
        )  # fmt: skip
        return o


def check_runner(model_runner: Any) -> None:
    """The kernel's requirements on the model runner, for both backend paths: an FP8 e4m3 KV
    cache and MLA of 512 latent + 64 rope dims. Raises PatchError (logged FAILED)."""
    import torch

    kv_dtype = getattr(model_runner, "kv_cache_dtype", None)
    if kv_dtype != torch.float8_e4m3fn:
        raise fail(PATCH, kv_dtype_reason(str(kv_dtype)))
    cfg = model_runner.model_config
    rank = getattr(cfg, "kv_lora_rank", None)
    rope = getattr(cfg, "qk_rope_head_dim", None)
    if rank != 512 or rope != 64:
        raise fail(PATCH, mla_reason(rank, rope))


def install(backend: Any, model_runner: Any, version: str) -> Dispatch:
    """Check the requirements and wrap ``backend.decode_attention_fwd`` (after the
    release's own ``__init__`` has set it). Raises PatchError (logged FAILED) on a miss."""
    import torch

    check_runner(model_runner)
    max_batch = int(model_runner.req_to_token_pool.size)
    dispatch = Dispatch(
        backend.decode_attention_fwd, _SCALES_BY_POSITION[version], backend.num_head,
        max_batch, backend.device,
    )  # fmt: skip
    backend._glmserve_mla_fp8 = dispatch  # counters, for tests and logs
    # as the release does for its own function: keep Triton launches out of torch.compile
    backend.decode_attention_fwd = torch.compiler.disable(dispatch)
    log(
        f"glmserve patch {PATCH}: triton MLA decode reads the FP8 KV pool in-kernel "
        f"({backend.num_head} heads, up to {max_batch} requests, pid {os.getpid()})"
    )
    return dispatch


def apply(module: ModuleType) -> str:
    """Patch the freshly imported ``module`` (``TritonAttnBackend``, or the flashinfer MLA
    backend through ``mla_fp8_flashinfer``); returns the version."""
    version = _installed_version()
    if module.__name__ == FLASHINFER_TARGET:
        from . import mla_fp8_flashinfer

        return mla_fp8_flashinfer.apply(module, version)
    sha, path = _source_sha(module)
    releases = TESTED_SOURCES.get(sha)
    if releases is None:
        if version in SUPPORTED_VERSIONS:
            raise fail(
                PATCH, f"{path} (sglang {version}) differs from the released file (sha256 {sha})"
            )
        raise fail(PATCH, unsupported_version_reason(version))
    if version not in releases:
        # The file is a tested one; report the release it was tested as.
        version = releases[0]
    cls = getattr(module, "TritonAttnBackend", None)
    if cls is None:
        raise fail(PATCH, "TritonAttnBackend not found")
    if getattr(cls, "_glmserve_patched", False):
        return version
    original_init = cls.__init__

    @functools.wraps(original_init)
    def __init__(self, model_runner, *args, **kwargs):
        original_init(self, model_runner, *args, **kwargs)
        install(self, model_runner, version)

    cls.__init__ = __init__
    cls._glmserve_patched = True
    return version
