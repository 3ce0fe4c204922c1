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

How it is applied (no copy of any release's method bodies): the real module's source is
parsed (``ast``) and, in ``FlashInferMLAAttnBackend.forward_decode`` and
``forward_extend``, the one expression ``<pool>.get_key_buffer(layer.layer_id).to(q.dtype)``
is replaced by ``_glmserve_gtc_key_buffer(self, <wrapper>, <pool>.get_key_buffer(...),
layer.layer_id, q.dtype)``, where ``<wrapper>`` is the ``self.forward_metadata.decode_wrapper``
/ ``.prefill_wrapper`` that the same method runs. Only those two functions are recompiled
(same file name and line numbers, the module's own globals) and set on the class. The
rewrite refuses loudly unless it finds that cast exactly once in each method, that wrapper
read exactly once in each, and, in each indices updater's ``call_begin_forward``, the
``wrapper.plan(...)`` / ``wrapper_paged.plan(...)`` calls with their four index arguments
passed by position (what the plan interception relies on).

Supported: every SGLang release from **0.5.8 to 0.5.23** (post releases included), each
gated by the sha256 of its ``flashinfer_mla_backend.py`` in :data:`TESTED_SOURCES` (ten
distinct files, hashed from the PyPI wheels on 2026-12-01). An unknown release or an unknown
file is refused with the reason, never run unpatched. Decode context parallelism (0.5.15+:
``dcp_enabled()`` / ``get_parallel().dcp_enabled``) plans over a DCP-local KV buffer, so
the patch refuses a backend built with DCP on.
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

import ast
import contextlib
import copy
import hashlib
import importlib.metadata
import inspect
import os
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .. import fail, log
from . import flashinfer_mla_source as src

PATCH = "flashinfer_mla_gather_cast"
TARGET = "sglang.srt.layers.attention.flashinfer_mla_backend"
# sha256 of sglang/srt/layers/attention/flashinfer_mla_backend.py -> the releases that ship
# that exact file (pip download --no-deps sglang==X; every release 0.5.8..0.5.23 on PyPI on
# 2026-12-01). The AST rewrite below was checked against each of these ten sources
# (tests/integration/test_runtime_patch_releases.py).
TESTED_SOURCES: dict[str, tuple[str, ...]] = {
    "f24df800a605d1d349d1d11c1a78921ace252778a2a10e980492d5fb83abad2d": (
        "0.5.8",
        "0.5.8.post1",
        "0.5.9",
        "0.5.10",
        "0.5.10.post1",
        "0.5.11",
        "0.5.12",
        "0.5.12.post1",
    ),
    "bc7bba45c3f52d28d1dcd4092c4c56e0a66a78df7ba5ae95b232e3c8477855d5": ("0.5.13", "0.5.13.post1"),
    "5856afa2d5c469c915e73ca5410ce0e651e38f7210a744e8055e020266cf98d7": ("0.5.14",),
    "bb5bdaefee29ad454566626d37ece86715d6e3fec4f5b1fc761389cbcd970ce9": ("0.5.15", "0.5.15.post1"),
    "169458ac0a038c04f6cda2d4b7013409521afacd8955ad49f4f07817fa04d118": ("0.5.16",),
    "dd71acbe3bb6ba6778ec24700bb613b2e1ce87d96b8b2aa979cdd4259d59cc82": ("0.5.17",),
    "ec61e3e093e66a9e79ff6a866c0d81d8b4eaed9b3bad74e8e40e4f3491dd401e": ("0.5.18",),
    "fca5d82360749254ceee5cf1f085393be47e6eccf64841efc67715c0900567e7": ("0.5.19",),
    "180ee48ab4c27979a9a066e8a7bc2bcd365d10824ea100609e591793b175a410": ("0.5.20", "0.5.21"),
    "85ba5db394df47f12e8edc69282954b9f000b37c519194f56418424ee718bf2e": ("0.5.22", "0.5.23"),
}
SUPPORTED_VERSIONS: tuple[str, ...] = tuple(v for vs in TESTED_SOURCES.values() for v in vs)
MAX_ROWS_ENV = "GLMSERVE_GTC_MAX_ROWS"
ALLOW_VERSION_ENV = "GLMSERVE_PATCH_ALLOW_UNTESTED_VERSION"


# ---------------------------------------------------------------------------------------------
# The patch's requirements: one source for the worker (which refuses with these exact reasons)
# and for glmserve's render/check validation and simulator (which predict the refusal).

CUDA_GRAPH_REASON = (
    "CUDA graphs are on; the gather-then-cast patch supports only "
    "--disable-cuda-graph (the flashinfer_gtc profile sets it)"
)
# --kv-cache-dtype value -> the torch dtype the pool gets ("auto" = the model dtype)
KV_CACHE_TORCH_DTYPES = {
    "fp8_e4m3": "torch.float8_e4m3fn",
    "fp8_e5m2": "torch.float8_e5m2",
    "fp4_e2m1": "torch.float4_e2m1fn_x2",
    "bf16": "torch.bfloat16",
    "bfloat16": "torch.bfloat16",
}
# --dtype value -> torch dtype ("auto": GLM-5 / DeepSeek checkpoints are bfloat16)
MODEL_TORCH_DTYPES = {
    "auto": "torch.bfloat16",
    "bfloat16": "torch.bfloat16",
    "half": "torch.float16",
    "float16": "torch.float16",
    "float": "torch.float32",
    "float32": "torch.float32",
}


def unsupported_version_reason(version: str) -> str:
    return (
        f"unsupported sglang {version} (supported: {SUPPORTED_VERSIONS[0]} to "
        f"{SUPPORTED_VERSIONS[-1]}, {len(SUPPORTED_VERSIONS)} releases); "
        "run a supported release (or, on SM100 GPUs, the trtllm_mla profile)"
    )


def kv_dtype_reason(kv_dtype: str) -> str:
    return (
        f"KV cache dtype is {kv_dtype}, not torch.float8_e4m3fn: there is no "
        "whole-pool cast to avoid (drop the patch or use --kv-cache-dtype fp8_e4m3)"
    )


def model_dtype_reason(dtype: str) -> str:
    return f"model dtype {dtype} is not bfloat16"


def row_width_reason(width: int, kv_lora_rank: int, rope: int) -> str:
    return (
        f"KV row width {width} is not kv_lora_rank {kv_lora_rank} + qk_rope_head_dim {rope}: "
        "not an MLA latent cache"
    )


@dataclass(frozen=True)
class Requirement:
    """One requirement a launch breaks: the SGLang flag to change, the worker's exact
    refusal reason, and when the worker refuses (import, backend init, CUDA-graph init)."""

    flag: str
    want: str
    reason: str
    phase: str  # "import" | "init" | "cuda_graph"


def launch_requirement_failures(
    args: dict[str, Any],
    version: str | None,
    kv_row: tuple[int, int, int] | None = None,
) -> list[Requirement]:
    """The requirements a launch with SGLang ``args`` (dest -> value: disable_cuda_graph,
    cuda_graph_max_bs, cuda_graph_backend_decode, kv_cache_dtype, dtype) on ``version`` breaks.

    ``kv_row`` is ``(row width, kv_lora_rank, qk_rope_head_dim)`` when the model is known.
    Pure: no torch, no sglang, so validation and the simulator can call it.
    """
    out: list[Requirement] = []
    if version is not None and version not in SUPPORTED_VERSIONS:
        want = f"sglang {SUPPORTED_VERSIONS[0]}..{SUPPORTED_VERSIONS[-1]}"
        out.append(Requirement("sglang", want, unsupported_version_reason(version), "import"))
    kv = str(args.get("kv_cache_dtype") or "auto")
    model = MODEL_TORCH_DTYPES.get(str(args.get("dtype") or "auto"), str(args.get("dtype")))
    # "auto" follows the checkpoint (FP8 for GLM-5 NVFP4): only a caller that knows the
    # checkpoint (the simulator) passes the resolved value; an argv alone cannot tell.
    kv_torch = None if kv == "auto" else KV_CACHE_TORCH_DTYPES.get(kv, kv)
    if kv_torch is not None and kv_torch != "torch.float8_e4m3fn":
        out.append(Requirement("--kv-cache-dtype", "fp8_e4m3", kv_dtype_reason(kv_torch), "init"))
    elif model != "torch.bfloat16":
        out.append(Requirement("--dtype", "bfloat16", model_dtype_reason(model), "init"))
    if kv_row is not None and kv_row[0] != kv_row[1] + kv_row[2]:
        out.append(Requirement("--model-path", "an MLA model", row_width_reason(*kv_row), "init"))
    graphs_off = (
        bool(args.get("disable_cuda_graph"))
        or args.get("cuda_graph_max_bs") == 0
        or str(args.get("cuda_graph_backend_decode") or "").lower() in ("disabled", "none")
    )
    if not graphs_off:
        out.append(Requirement("--disable-cuda-graph", "true", CUDA_GRAPH_REASON, "cuda_graph"))
    return out


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
    """Refuse unless this is a tested release shipping a tested backend source."""
    version = sglang_version()
    if version not in SUPPORTED_VERSIONS and os.environ.get(ALLOW_VERSION_ENV) != "1":
        raise fail(PATCH, unsupported_version_reason(version))
    digest = source_sha256(module)
    releases = TESTED_SOURCES.get(digest)
    if releases is None:
        raise fail(
            PATCH,
            f"{TARGET} in sglang {version} is not a tested source (sha256 {digest[:12]} is "
            "not the file of any release 0.5.8-0.5.23): modified or unknown backend file",
        )
    if version not in releases and os.environ.get(ALLOW_VERSION_ENV) != "1":
        raise fail(
            PATCH,
            f"{TARGET} in sglang {version} is the file of sglang {', '.join(releases)} "
            f"(sha256 {digest[:12]}), not of {version}: mixed installation",
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


def dcp_enabled(module: ModuleType) -> bool:
    """Whether decode context parallelism is on, asked the way the release itself asks
    (0.5.15: ``dcp_enabled()``; 0.5.16+: ``get_parallel().dcp_enabled``)."""
    probe = getattr(module, "dcp_enabled", None)
    if callable(probe):
        return bool(probe())
    get_parallel = getattr(module, "get_parallel", None)
    if callable(get_parallel):
        return bool(getattr(get_parallel(), "dcp_enabled", False))
    return False


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
            raise fail(PATCH, kv_dtype_reason(str(kv_dtype)))
        if model_runner.dtype != torch.bfloat16:
            raise fail(PATCH, model_dtype_reason(str(model_runner.dtype)))
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
# The AST rewrite of the real module's two forward methods

KEY_BUFFER_HELPER = "_glmserve_gtc_key_buffer"
# method -> the forward_metadata attribute holding the wrapper that method runs
FORWARD_WRAPPERS = {"forward_decode": "decode_wrapper", "forward_extend": "prefill_wrapper"}


class _CastRewriter(ast.NodeTransformer):
    """Replace the whole-pool cast by the helper call, counting the replacements."""

    def __init__(self, wrapper_attr: str) -> None:
        self.wrapper_attr = wrapper_attr
        self.count = 0

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if not src.is_whole_pool_cast(node):
            return node
        self.count += 1
        wrapper = ast.Attribute(
            value=ast.Attribute(
                value=ast.Name(id="self", ctx=ast.Load()), attr="forward_metadata", ctx=ast.Load()
            ),
            attr=self.wrapper_attr,
            ctx=ast.Load(),
        )
        pool_read = node.func.value  # type: ignore[attr-defined]
        call = ast.Call(
            func=ast.Name(id=KEY_BUFFER_HELPER, ctx=ast.Load()),
            args=[
                ast.Name(id="self", ctx=ast.Load()),
                wrapper,
                pool_read,
                *pool_read.args,
                node.args[0],
            ],
            keywords=[],
        )
        return ast.copy_location(call, node)


def rewrite_forwards(module: ModuleType) -> dict[str, Any]:
    """Compile the module's ``forward_decode``/``forward_extend`` with the cast rewritten.

    Returns method name -> new function (globals: the module's own). Raises PatchError when
    the cast, or the wrapper read it pairs with, is not found exactly once in each method, or
    an updater's plan call is not the expected one.
    """
    path = module.__file__
    with open(path, encoding="utf-8") as fh:  # type: ignore[arg-type]
        source = fh.read()
    tree = ast.parse(source, filename=path)  # type: ignore[arg-type]
    for cls_name in src.PLAN_WRAPPERS:
        src.check_plan_calls(src.class_methods(tree, cls_name, PATCH), cls_name, PATCH)
    methods = src.class_methods(tree, "FlashInferMLAAttnBackend", PATCH)
    out: dict[str, Any] = {}
    for name, wrapper_attr in FORWARD_WRAPPERS.items():
        func = methods.get(name)
        if func is None:
            raise fail(PATCH, f"FlashInferMLAAttnBackend.{name} not found in the source")
        reads = [
            n
            for n in ast.walk(func)
            if isinstance(n, ast.Attribute)
            and n.attr == wrapper_attr
            and src.is_name_attr(n.value, "self", "forward_metadata")
        ]
        if any(isinstance(n, ast.Name) and n.id in ("super", "__class__") for n in ast.walk(func)):
            raise fail(PATCH, f"FlashInferMLAAttnBackend.{name} uses super(): cannot recompile")
        rewriter = _CastRewriter(wrapper_attr)
        new_func = rewriter.visit(copy.deepcopy(func))
        if rewriter.count != 1 or len(reads) != 1:
            raise fail(
                PATCH,
                f"FlashInferMLAAttnBackend.{name}: expected exactly one "
                "'<pool>.get_key_buffer(layer.layer_id).to(q.dtype)' and one "
                f"'self.forward_metadata.{wrapper_attr}', found {rewriter.count} and "
                f"{len(reads)}",
            )
        new_func.decorator_list = []
        code = compile(
            ast.fix_missing_locations(ast.Module(body=[new_func], type_ignores=[])),
            path,
            "exec",
            flags=src.future_flags(tree),
            dont_inherit=True,
        )
        namespace: dict[str, Any] = {}
        exec(code, vars(module), namespace)
        fn = namespace[name]
        fn.__qualname__ = f"FlashInferMLAAttnBackend.{name}"
        fn._glmserve_rewritten = True
        out[name] = fn
    return out


def _glmserve_gtc_key_buffer(
    backend: Any, wrapper: Any, pool: Any, layer_id: int, q_dtype: Any
) -> Any:
    """What the rewritten methods call instead of ``pool.to(q.dtype)``."""
    state = getattr(backend, "_glmserve_gtc", None)
    if state is None:
        raise fail(PATCH, "backend was built before the patch applied")
    return state.key_buffer(wrapper, pool, layer_id, q_dtype)


def _bound_arg(func: Any, name: str, args: tuple, kwargs: dict) -> Any:
    """The value passed for parameter ``name`` of ``func`` (positionally or by keyword)."""
    return inspect.signature(func).bind_partial(*args, **kwargs).arguments[name]


def apply(module: ModuleType) -> str:
    """Patch the freshly imported backend module in place; return the sglang version."""
    version = check_supported(module)
    backend_cls = module.FlashInferMLAAttnBackend
    decode_updater = module.FlashInferMLAIndicesUpdaterDecode
    prefill_updater = module.FlashInferMLAIndicesUpdaterPrefill
    if getattr(backend_cls, "_glmserve_patched", False):
        return version
    module_vars = vars(module)
    module_vars[KEY_BUFFER_HELPER] = _glmserve_gtc_key_buffer
    forwards = rewrite_forwards(module)

    orig_init = backend_cls.__init__
    orig_decode_cbf = decode_updater.call_begin_forward
    orig_prefill_cbf = prefill_updater.call_begin_forward

    def __init__(self, model_runner, *args, **kwargs):
        if dcp_enabled(module):  # before the release's own __init__ allocates anything
            raise fail(
                PATCH,
                "decode context parallelism is on: its attention reads a DCP-local KV "
                "buffer the patch does not gather (drop --dcp-size or the patch)",
            )
        orig_init(self, model_runner, *args, **kwargs)
        self._glmserve_gtc = GatherState(model_runner)

    def init_cuda_graph_state(self, *args, **kwargs):
        raise fail(PATCH, CUDA_GRAPH_REASON)

    def decode_call_begin_forward(self, *args, **kwargs):
        wrapper = _bound_arg(orig_decode_cbf, "wrapper", (self, *args), kwargs)
        with intercept_plan(wrapper, _glmserve_state(self.attn_backend)):
            return orig_decode_cbf(self, *args, **kwargs)

    def prefill_call_begin_forward(self, *args, **kwargs):
        wrapper = _bound_arg(orig_prefill_cbf, "wrapper_paged", (self, *args), kwargs)
        with intercept_plan(wrapper, _glmserve_state(self.attn_backend)):
            return orig_prefill_cbf(self, *args, **kwargs)

    __init__.__wrapped__ = orig_init  # type: ignore[attr-defined]
    backend_cls.__init__ = __init__
    backend_cls.init_cuda_graph_state = init_cuda_graph_state
    backend_cls.forward_decode = forwards["forward_decode"]
    backend_cls.forward_extend = forwards["forward_extend"]
    decode_updater.call_begin_forward = decode_call_begin_forward
    prefill_updater.call_begin_forward = prefill_call_begin_forward
    backend_cls._glmserve_patched = True
    return version


def _glmserve_state(backend: Any) -> GatherState:
    state = getattr(backend, "_glmserve_gtc", None)
    if state is None:
        raise fail(PATCH, "backend was built before the patch applied")
    return state
