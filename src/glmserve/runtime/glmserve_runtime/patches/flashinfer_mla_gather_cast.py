"""Gather-then-cast for SGLang's FlashInfer MLA backend: cast only the batch's KV rows.

Problem (seen in the seeds' profiler trace: 69% of decode): FlashInfer's MLA kernel only takes
16-bit KV, so ``FlashInferMLAAttnBackend.forward_decode`` and the paged branch of
``forward_extend`` do ``token_to_kv_pool.get_key_buffer(layer_id).to(q.dtype)``: the whole
FP8 pool ``[N + page, 1, 576]`` becomes BF16 in every layer of every step.

What this patch changes (and nothing else):

* When a FlashInfer MLA paged wrapper is planned (the decode and prefill
  ``call_begin_forward`` of the indices updaters), it keeps ``kv_indices[:nnz]`` (``nnz =
  kv_indptr[-1]``) and plans with identity indices ``arange(nnz)`` instead. ``qo_indptr``,
  ``kv_indptr``, ``kv_len_arr``, page size 1 and the q/kv dtypes are passed unchanged.
* ``forward_decode`` and the paged branch of ``forward_extend`` then hand the wrapper a
  compact BF16 buffer ``compact[:nnz] = pool[kv_indices[:nnz]].to(bf16)`` built by one fused
  gather + cast kernel (``kernels/gather_cast.py``), bit-identical to torch's cast. Row ``i``
  of the compact buffer is the pool row the original plan pointed at with index ``i``, so the
  attention output is the same.
* The compact buffer is persistent, shared by the process's backends, grown on demand and
  capped (default: the pool's row count, i.e. never more memory than the unpatched per-layer
  temporary; ``GLMSERVE_GTC_MAX_ROWS`` overrides). A batch that needs more rows than the cap
  is planned with its real indices and takes the original whole-pool path, with one warning.
* Ragged prefill, MHA chunked prefix and everything else run the original code.

The one compact buffer is rewritten by every layer's gather; that is safe because a
process's attention kernels and gathers are ordered on its current CUDA stream (the caching
allocator also keeps a grown-away buffer alive for kernels already queued on that stream).

Supported: SGLang **0.5.8 through 0.5.12** (0.5.8, 0.5.8.post1, 0.5.9, 0.5.10, 0.5.10.post1,
0.5.11, 0.5.12, 0.5.12.post1: their ``flashinfer_mla_backend.py`` is byte-identical, checked
against the PyPI wheels on 2026-11-30; the patch checks the file's sha256 and the installed
version and refuses anything else). **Not supported: 0.5.13 and later**: 0.5.13 moved the
pool references into the backend (``self.token_to_kv_pool``) and reworked CUDA-graph
metadata, and the file changed again in almost every release up to 0.5.23 (decode-context-
parallel buffers, ``kv_loc_plan`` planning).
Requirements checked when the backend is built: KV cache dtype ``float8_e4m3fn`` (the only
case with a whole-pool cast), model dtype bfloat16, row width ``kv_lora_rank +
qk_rope_head_dim``. **CUDA graphs are refused** (``init_cuda_graph_state`` raises: the
flashinfer_gtc profile runs with ``--disable-cuda-graph``, as the seeds did), and so is any
forward inside a CUDA graph capture (e.g. piecewise CUDA graphs), because the compact buffer
length is decided on the host at plan time. Every refusal logs
``glmserve patch flashinfer_mla_gather_cast FAILED: <reason>`` and raises, so the worker dies
rather than running unpatched.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .. import fail, log

PATCH = "flashinfer_mla_gather_cast"
TARGET = "sglang.srt.layers.attention.flashinfer_mla_backend"
SUPPORTED_VERSIONS = (
    "0.5.8",
    "0.5.8.post1",
    "0.5.9",
    "0.5.10",
    "0.5.10.post1",
    "0.5.11",
    "0.5.12",
    "0.5.12.post1",
)
# sha256 of sglang/srt/layers/attention/flashinfer_mla_backend.py in the supported releases
# (identical from 0.5.8 to 0.5.12.post1; 0.5.13's is bc7bba45..., 0.5.23's 85ba5db3...). The
# replaced forward methods below are that file's bodies with the one cast line changed, so
# any other source is refused.
SUPPORTED_SOURCE_SHA256 = {
    "f24df800a605d1d349d1d11c1a78921ace252778a2a10e980492d5fb83abad2d": "0.5.8-0.5.12",
}
MAX_ROWS_ENV = "GLMSERVE_GTC_MAX_ROWS"
ALLOW_VERSION_ENV = "GLMSERVE_PATCH_ALLOW_UNTESTED_VERSION"


def sglang_version() -> str:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        from sglang.version import __version__  # type: ignore[import-not-found]

        return str(__version__)


def source_sha256(module: ModuleType) -> str:
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py") or not os.path.isfile(path):
        raise fail(PATCH, f"cannot read {TARGET} source to verify it (file: {path!r})")
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def check_supported(module: ModuleType) -> str:
    """Refuse unless this is a release and a source the patch was written against."""
    version = sglang_version()
    if version not in SUPPORTED_VERSIONS and os.environ.get(ALLOW_VERSION_ENV) != "1":
        raise fail(
            PATCH,
            f"unsupported sglang {version} (supported: {', '.join(SUPPORTED_VERSIONS)}); "
            "run a supported release (or, on SM100 GPUs, the trtllm_mla profile)",
        )
    digest = source_sha256(module)
    if digest not in SUPPORTED_SOURCE_SHA256:
        raise fail(
            PATCH,
            f"{TARGET} in sglang {version} differs from the 0.5.8-0.5.12 source the patch "
            f"replaces (sha256 {digest[:12]}); forward_decode/forward_extend or their "
            "signatures may have changed",
        )
    for cls_name, attr in (
        ("FlashInferMLAAttnBackend", "forward_decode"),
        ("FlashInferMLAAttnBackend", "forward_extend"),
        ("FlashInferMLAAttnBackend", "init_cuda_graph_state"),
        ("FlashInferMLAIndicesUpdaterDecode", "call_begin_forward"),
        ("FlashInferMLAIndicesUpdaterPrefill", "call_begin_forward"),
    ):
        if not callable(getattr(getattr(module, cls_name, None), attr, None)):
            raise fail(PATCH, f"{TARGET}.{cls_name}.{attr} not found")
    return version


# ---------------------------------------------------------------------------------------------
# Shared compact buffer and the per-plan selection


@dataclass
class Selection:
    """What one plan decided: gather ``indices`` into ``nnz`` compact rows, or whole pool."""

    compact: bool
    nnz: int
    indices: Any = None  # kv_indices[:nnz] (device tensor) when compact


class CompactBuffer:
    """Persistent ``[rows, 1, width]`` bf16 buffer + identity indices, grown on demand."""

    def __init__(self, device: Any, width: int, dtype: Any) -> None:
        self.device, self.width, self.dtype = device, width, dtype
        self.rows = 0
        self.data: Any = None
        self.identity: Any = None

    def ensure(self, nnz: int, cap: int) -> None:
        import torch

        if nnz <= self.rows and self.data is not None:
            return
        rows = max(1, min(cap, max(nnz, self.rows * 3 // 2, 4096)))
        rows = min(cap, -(-rows // 1024) * 1024) if rows < cap else cap
        self.data = None  # free the old buffer before allocating the new one
        self.data = torch.empty((rows, 1, self.width), dtype=self.dtype, device=self.device)
        self.identity = torch.arange(rows, dtype=torch.int32, device=self.device)
        self.rows = rows


_BUFFERS: dict[tuple[str, int, str], CompactBuffer] = {}


class GatherState:
    """Per-backend patch state: limits, the shared buffer, the kernel, one-time warnings."""

    def __init__(self, model_runner: Any) -> None:
        import torch

        from ..kernels.gather_cast import FP8_DTYPE, FusedGatherCast

        kv_dtype = getattr(model_runner, "kv_cache_dtype", None)
        if kv_dtype != FP8_DTYPE:
            raise fail(
                PATCH,
                f"KV cache dtype is {kv_dtype}, not torch.float8_e4m3fn: there is no "
                "whole-pool cast to avoid (drop the patch or use --kv-cache-dtype fp8_e4m3)",
            )
        if model_runner.dtype != torch.bfloat16:
            raise fail(PATCH, f"model dtype {model_runner.dtype} is not bfloat16")
        cfg = model_runner.model_config
        self.width = int(cfg.kv_lora_rank) + int(cfg.qk_rope_head_dim)
        pool = model_runner.token_to_kv_pool
        self.pool_rows = int(pool.size) + int(model_runner.page_size)
        env_cap = os.environ.get(MAX_ROWS_ENV)
        try:
            self.cap = int(env_cap) if env_cap else self.pool_rows
        except ValueError:
            raise fail(PATCH, f"{MAX_ROWS_ENV}={env_cap!r} is not an integer") from None
        key = (str(model_runner.device), self.width, str(torch.bfloat16))
        if key not in _BUFFERS:
            _BUFFERS[key] = CompactBuffer(model_runner.device, self.width, torch.bfloat16)
        self.buffer = _BUFFERS[key]
        self.kernel = FusedGatherCast(split=int(cfg.kv_lora_rank))
        self.checked_layers: set[int] = set()
        self.warned_cap = False
        log(
            f"glmserve patch {PATCH}: KV float8_e4m3fn [{self.pool_rows}, 1, {self.width}] "
            f"-> compact bf16 rows for the batch only (cap {self.cap} rows, pid {os.getpid()})"
        )

    def select(self, kv_indptr: Any, kv_indices: Any) -> Selection:
        """Decide gather vs whole pool for one plan (host-syncs on kv_indptr[-1], as
        FlashInfer's own plan does on the same tensor)."""
        nnz = int(kv_indptr[-1].item())
        if nnz > self.cap:
            if not self.warned_cap:
                self.warned_cap = True
                log(
                    f"glmserve patch {PATCH}: WARNING batch needs {nnz} KV rows > cap "
                    f"{self.cap}; such batches use the whole-pool cast ({MAX_ROWS_ENV} "
                    "raises the cap; warned once)"
                )
            return Selection(compact=False, nnz=nnz)
        self.buffer.ensure(nnz, self.cap)
        return Selection(compact=True, nnz=nnz, indices=kv_indices[:nnz])

    def key_buffer(self, wrapper: Any, pool: Any, layer_id: int, q_dtype: Any) -> Any:
        """The ``[rows, 1, width]`` bf16 buffer to hand the wrapper for this layer."""
        import torch

        sel: Selection | None = getattr(wrapper, "_glmserve_selection", None)
        if sel is None:
            raise fail(PATCH, "a FlashInfer MLA wrapper was planned outside the patched path")
        if not sel.compact:
            return pool.to(q_dtype)
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise fail(PATCH, "forward inside a CUDA graph capture is not supported")
        if layer_id not in self.checked_layers:
            if (
                pool.dtype != torch.float8_e4m3fn
                or pool.dim() != 3
                or pool.shape[1] != 1
                or pool.shape[2] != self.width
                or pool.stride(2) != 1
            ):
                raise fail(
                    PATCH,
                    f"layer {layer_id} KV buffer is {pool.dtype} {tuple(pool.shape)}, expected "
                    f"float8_e4m3fn [rows, 1, {self.width}]",
                )
            if q_dtype != torch.bfloat16:
                raise fail(PATCH, f"query dtype {q_dtype} is not bfloat16")
            self.checked_layers.add(layer_id)
        self.kernel(pool, sel.indices, self.buffer.data, sel.nnz)
        return self.buffer.data[: sel.nnz]


@contextlib.contextmanager
def intercept_plan(wrapper: Any, state: GatherState) -> Iterator[None]:
    """While the indices updater runs, make ``wrapper.plan`` plan with identity indices."""
    had_own = "plan" in vars(wrapper)
    inner = wrapper.plan

    def plan(qo_indptr, kv_indptr, kv_indices, kv_len_arr, *args, **kwargs):
        sel = state.select(kv_indptr, kv_indices)
        wrapper._glmserve_selection = sel
        plan_indices = state.buffer.identity[: sel.nnz] if sel.compact else kv_indices
        return inner(qo_indptr, kv_indptr, plan_indices, kv_len_arr, *args, **kwargs)

    wrapper.plan = plan
    try:
        yield
    finally:
        if had_own:
            wrapper.plan = inner
        else:
            del wrapper.plan


# ---------------------------------------------------------------------------------------------
# The replaced methods. forward_decode / forward_extend are sglang 0.5.9's bodies verbatim
# except the marked key-buffer line.


def _state(backend: Any) -> GatherState:
    state = getattr(backend, "_glmserve_gtc", None)
    if state is None:
        raise fail(PATCH, "backend was built before the patch applied")
    return state


def _forward_extend(
    self,
    q,
    k,
    v,
    layer,
    forward_batch,
    save_kv_cache: bool = True,
    q_rope=None,
    k_rope=None,
):
    if forward_batch.attn_attend_prefix_cache is not None and any(
        forward_batch.extend_prefix_lens_cpu
    ):  # MHA Chunk
        assert self.enable_chunk_kv
        assert q_rope is None
        assert k_rope is None
        return self.mha_chunk_kv_cache.forward(q, k, v, layer, forward_batch)

    cache_loc = forward_batch.out_cache_loc
    logits_soft_cap = layer.logit_cap
    prefill_wrapper_paged = self.forward_metadata.prefill_wrapper

    # Save kv cache
    if save_kv_cache and k is not None:
        assert v is not None
        if save_kv_cache:
            if k_rope is not None:
                forward_batch.token_to_kv_pool.set_mla_kv_buffer(layer, cache_loc, k, k_rope)
            else:
                forward_batch.token_to_kv_pool.set_kv_buffer(layer, cache_loc, k, v)
    if q_rope is not None:
        q = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_rope = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)

    if self.forward_metadata.use_ragged:
        import torch

        # ragged prefill
        if q_rope is not None:
            q = torch.cat([q, q_rope], dim=-1)
        qall = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        if k_rope is not None:
            k = torch.cat([k, k_rope], dim=-1)
        o = self.prefill_wrapper_ragged.forward(
            qall,
            k.view(-1, layer.tp_k_head_num, layer.head_dim).to(q.dtype),
            v.view(-1, layer.tp_k_head_num, layer.v_head_dim).to(q.dtype),
            causal=True,
            sm_scale=layer.scaling,
            logits_soft_cap=logits_soft_cap,
        )
    else:
        # mla paged prefill
        # glmserve: only the planned rows, gathered and cast (was: whole pool .to(q.dtype))
        k_buf = _state(self).key_buffer(
            prefill_wrapper_paged,
            forward_batch.token_to_kv_pool.get_key_buffer(layer.layer_id),
            layer.layer_id,
            q.dtype,
        )
        if q_rope is None:
            qall = q.view(-1, layer.tp_q_head_num, layer.head_dim)
            q, q_rope = (
                qall[:, :, : layer.v_head_dim],
                qall[:, :, layer.v_head_dim :],
            )
        o = q.new_empty(q.shape)
        o = prefill_wrapper_paged.run(
            q,
            q_rope,
            k_buf[:, :, : layer.v_head_dim],
            k_buf[:, :, layer.v_head_dim :],
            out=o,
        )

    return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)


def _forward_decode(
    self,
    q,
    k,
    v,
    layer,
    forward_batch,
    save_kv_cache: bool = True,
    # For multi-head latent attention
    q_rope=None,
    k_rope=None,
):
    decode_wrapper = self.forward_metadata.decode_wrapper
    cache_loc = forward_batch.out_cache_loc

    if k is not None:
        assert v is not None
        if save_kv_cache:
            if k_rope is not None:
                forward_batch.token_to_kv_pool.set_mla_kv_buffer(layer, cache_loc, k, k_rope)
            else:
                forward_batch.token_to_kv_pool.set_kv_buffer(layer, cache_loc, k, v)

    # Reshape inputs
    if q_rope is not None:
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_rope = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
    else:
        reshaped_q = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        q_nope = reshaped_q[:, :, : layer.v_head_dim]
        q_rope = reshaped_q[:, :, layer.v_head_dim :]

    # glmserve: only the planned rows, gathered and cast (was: whole pool .to(q.dtype))
    k_buffer = _state(self).key_buffer(
        decode_wrapper,
        forward_batch.token_to_kv_pool.get_key_buffer(layer.layer_id),
        layer.layer_id,
        q.dtype,
    )

    o = q_nope.new_empty(q_nope.shape)
    # Direct call to run without the wrapper
    o = decode_wrapper.run(
        q_nope,
        q_rope,
        k_buffer[:, :, : layer.v_head_dim],
        k_buffer[:, :, layer.v_head_dim :],
        out=o,
    )

    return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)


def apply(module: ModuleType) -> str:
    """Patch the freshly imported backend module in place; return the sglang version."""
    version = check_supported(module)
    backend_cls = module.FlashInferMLAAttnBackend
    decode_updater = module.FlashInferMLAIndicesUpdaterDecode
    prefill_updater = module.FlashInferMLAIndicesUpdaterPrefill
    if getattr(backend_cls, "_glmserve_patched", False):
        return version

    orig_init = backend_cls.__init__
    orig_decode_cbf = decode_updater.call_begin_forward
    orig_prefill_cbf = prefill_updater.call_begin_forward

    def __init__(self, model_runner, *args, **kwargs):
        orig_init(self, model_runner, *args, **kwargs)
        self._glmserve_gtc = GatherState(model_runner)

    def init_cuda_graph_state(self, *args, **kwargs):
        raise fail(
            PATCH,
            "CUDA graphs are on; the gather-then-cast patch supports only "
            "--disable-cuda-graph (the flashinfer_gtc profile sets it)",
        )

    def decode_call_begin_forward(self, wrapper, *args, **kwargs):
        with intercept_plan(wrapper, _state(self.attn_backend)):
            return orig_decode_cbf(self, wrapper, *args, **kwargs)

    def prefill_call_begin_forward(self, wrapper_ragged, wrapper_paged, *args, **kwargs):
        with intercept_plan(wrapper_paged, _state(self.attn_backend)):
            return orig_prefill_cbf(self, wrapper_ragged, wrapper_paged, *args, **kwargs)

    __init__.__wrapped__ = orig_init  # type: ignore[attr-defined]
    backend_cls.__init__ = __init__
    backend_cls.init_cuda_graph_state = init_cuda_graph_state
    backend_cls.forward_decode = _forward_decode
    backend_cls.forward_extend = _forward_extend
    decode_updater.call_begin_forward = decode_call_begin_forward
    prefill_updater.call_begin_forward = prefill_call_begin_forward
    backend_cls._glmserve_patched = True
    return version
