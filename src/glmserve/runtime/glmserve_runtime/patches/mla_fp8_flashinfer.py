"""The ``flashinfer`` MLA backend's decode through the FP8-native kernel (part of the
``mla_fp8_decode`` patch; ``mla_fp8_decode.py`` has the ``triton`` backend's part).

Problem: ``FlashInferMLAAttnBackend.forward_decode`` casts the whole FP8 pool to BF16 in
every layer (``<pool>.get_key_buffer(layer.layer_id).to(q.dtype)``), because FlashInfer's
MLA kernel takes only 16-bit KV, and then FlashInfer reads the BF16 copy.

What changes (and nothing else): ``forward_decode`` is recompiled from the release's own
source (``ast``; same file name and line numbers, the module's globals) with two
expressions replaced, each found exactly once or the patch refuses:

* the cast becomes ``_glmserve_mla_fp8_key_buffer(self, self.forward_metadata.decode_wrapper,
  <pool>.get_key_buffer(layer.layer_id), layer.layer_id, q.dtype)``: the FP8 pool itself
  when the planned batch is the kernel's, else the release's own cast;
* ``decode_wrapper.run(q_nope, q_rope, ckv, kpe, out=o, ...)`` becomes
  ``_glmserve_mla_fp8_run(self, decode_wrapper, <same arguments>)``: given FP8 views it runs
  the kernel over the indices the wrapper was planned with, else FlashInfer's ``run``.

The decode indices updater's ``call_begin_forward`` runs unchanged; while it runs, the
wrapper's ``plan`` is wrapped to keep what it is given (``kv_indptr``, ``kv_indices``, heads,
head dims, page size, ``sm_scale``, dtypes) and then plans as before, so FlashInfer stays
ready for any fallback. ``forward_extend`` (prefill) keeps its cast.

Semantics are the release's: its FlashInfer decode applies no k/v scale to the FP8 values
(the cast is raw), and neither does this path. CUDA graphs: the kernel's grid depends only
on the batch size and its workspace is reserved at backend init, so a captured decode
replays; under capture the indices are read from the backend's ``cuda_graph_kv_indices``
(what the release's replay fills, and the buffer the graph's FlashInfer wrapper reads) and
``kv_indptr`` from the updater's own buffer, which replay rewrites in place. A planned
batch that is not the kernel's (page size, dims, dtypes, more requests than the workspace,
``return_lse`` for decode context parallelism, a capture over another ``kv_indptr``) runs
the release's cast + FlashInfer, with one log line per reason.

Supported: the files of SGLang 0.5.9 and 0.5.23 (``flashinfer_mla_backend.py`` sha256 in
:data:`TESTED_SOURCES`); anything else is refused. Cannot be combined with
``flashinfer_mla_gather_cast`` (both rewrite the same method).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .. import PATCHES_ENV, fail, log, parse_patch_names
from . import flashinfer_mla_gather_cast as gtc
from . import flashinfer_mla_source as src

PATCH = "mla_fp8_decode"
TARGET = "sglang.srt.layers.attention.flashinfer_mla_backend"
# sha256 of sglang/srt/layers/attention/flashinfer_mla_backend.py of the supported releases
# (the same files flashinfer_mla_gather_cast's table lists for them; 0.5.9's file is also
# 0.5.8-0.5.12.post1's, 0.5.23's also 0.5.22's, but only 0.5.9 and 0.5.23 are supported).
TESTED_SOURCES: dict[str, tuple[str, ...]] = {
    "f24df800a605d1d349d1d11c1a78921ace252778a2a10e980492d5fb83abad2d": ("0.5.9",),
    "85ba5db394df47f12e8edc69282954b9f000b37c519194f56418424ee718bf2e": ("0.5.23",),
}
KEY_BUFFER_HELPER = "_glmserve_mla_fp8_key_buffer"
RUN_HELPER = "_glmserve_mla_fp8_run"
COMBINED_REASON = (
    "mla_fp8_decode and flashinfer_mla_gather_cast both rewrite the FlashInfer MLA decode: "
    "arm one of them"
)


@dataclass
class Plan:
    """What the decode wrapper was last planned with (positional arguments of plan)."""

    kv_indptr: Any
    kv_indices: Any
    num_heads: int
    head_dim_ckv: int
    head_dim_kpe: int
    page_size: int
    causal: bool
    sm_scale: float
    q_dtype: Any
    kv_dtype: Any


class FlashInferState:
    """Per-backend state: the kernel's reserved workspace, counters, logged reasons."""

    def __init__(self, backend: Any, model_runner: Any) -> None:
        import torch

        from ..kernels import mla_fp8_decode as mk
        from .mla_fp8_decode import check_runner

        check_runner(model_runner)
        self.mk = mk
        self.heads = int(backend.indices_updater_decode.num_local_heads)
        self.max_batch = int(model_runner.req_to_token_pool.size)
        self.workspace = mk.Workspace()
        self.workspace.reserve(self.max_batch, self.heads, torch.device(model_runner.device))
        self.fast_calls = 0
        self.fallback_calls = 0
        self._logged: set[str] = set()
        log(
            f"glmserve patch {PATCH}: flashinfer MLA decode reads the FP8 KV pool in-kernel "
            f"({self.heads} heads, up to {self.max_batch} requests, pid {os.getpid()})"
        )

    def note_fallback(self, reason: str) -> None:
        self.fallback_calls += 1
        if reason not in self._logged:
            self._logged.add(reason)
            log(f"glmserve patch {PATCH}: {reason}: cast + FlashInfer runs")

    def refusal(self, backend: Any, wrapper: Any, pool: Any, q_dtype: Any) -> str | None:
        """Why this decode is not the kernel's (None: it is)."""
        import torch

        mk = self.mk
        plan: Plan | None = getattr(wrapper, "_glmserve_mla_fp8_plan", None)
        if plan is None:
            return "the decode wrapper was planned outside the patched updater"
        if pool.dtype != mk.FP8_DTYPE or pool.dim() != 3 or pool.shape[1:] != (1, mk.D_KV):
            return f"KV buffer {pool.dtype} {tuple(pool.shape)}"
        if pool.stride(2) != 1:
            return "KV rows are not contiguous"
        if q_dtype != torch.bfloat16:
            return f"query dtype {q_dtype}"
        if (plan.head_dim_ckv, plan.head_dim_kpe) != (mk.D_LATENT, mk.D_ROPE):
            return f"head dims {plan.head_dim_ckv}/{plan.head_dim_kpe}"
        if plan.page_size != 1 or plan.causal:
            return f"page size {plan.page_size}, causal {plan.causal}"
        batch = int(plan.kv_indptr.numel()) - 1
        splits = mk.default_config(batch, plan.num_heads, pool.device).max_splits
        if not self.workspace.fits(batch, plan.num_heads, splits):
            return f"batch {batch} x {plan.num_heads} heads exceeds the reserved workspace"
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            own = backend.indices_updater_decode.kv_indptr
            if plan.kv_indptr.untyped_storage().data_ptr() != own.untyped_storage().data_ptr():
                return "a CUDA graph captured over another kv_indptr (speculative decoding)"
        return None


def key_buffer(backend: Any, wrapper: Any, pool: Any, layer_id: int, q_dtype: Any) -> Any:
    """What the rewritten ``forward_decode`` calls instead of ``pool.to(q.dtype)``."""
    state: FlashInferState | None = getattr(backend, "_glmserve_mla_fp8", None)
    if state is None:
        raise fail(PATCH, "backend was built before the patch applied")
    reason = state.refusal(backend, wrapper, pool, q_dtype)
    if reason is None:
        return pool  # FP8, uncast: run() below takes the kernel's path
    state.note_fallback(reason)
    return pool.to(q_dtype)


def run(backend: Any, wrapper: Any, q_nope: Any, q_pe: Any, ckv: Any, kpe: Any,
        *args: Any, **kwargs: Any) -> Any:  # fmt: skip
    """What the rewritten ``forward_decode`` calls instead of ``decode_wrapper.run``."""
    import torch

    state: FlashInferState | None = getattr(backend, "_glmserve_mla_fp8", None)
    if state is None or ckv.dtype != state.mk.FP8_DTYPE:
        return wrapper.run(q_nope, q_pe, ckv, kpe, *args, **kwargs)
    mk = state.mk
    pool = ckv.as_strided((ckv.shape[0], 1, mk.D_KV), ckv.stride())
    if args or kwargs.get("return_lse") or set(kwargs) - {"out", "return_lse"}:
        # e.g. decode context parallelism wants the log-sum-exp: the release's own path
        state.note_fallback("FlashInfer run() asked for more than the output (return_lse)")
        bf = pool.to(q_nope.dtype)
        return wrapper.run(q_nope, q_pe, bf[:, :, : mk.D_LATENT], bf[:, :, mk.D_LATENT :],
                           *args, **kwargs)  # fmt: skip
    if kpe.data_ptr() != ckv.data_ptr() + mk.D_LATENT or kpe.stride() != ckv.stride():
        raise fail(PATCH, "forward_decode's rope cache is not the latent cache's tail")
    plan: Plan = wrapper._glmserve_mla_fp8_plan
    indices = plan.kv_indices
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        indices = backend.cuda_graph_kv_indices  # what replay fills (see module docstring)
    out = kwargs.get("out")
    if out is None:
        out = q_nope.new_empty(q_nope.shape)
    state.fast_calls += 1
    mk.mla_fp8_decode(q_nope, pool, plan.kv_indptr, indices, float(plan.sm_scale), q_rope=q_pe,
                      out=out, workspace=state.workspace)  # fmt: skip
    return out


@contextlib.contextmanager
def record_plan(wrapper: Any) -> Iterator[None]:
    """While the decode updater runs, keep what ``wrapper.plan`` is given (then plan)."""
    had_own = "plan" in vars(wrapper)
    inner = wrapper.plan

    def plan(qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv,
             head_dim_kpe, page_size, causal, sm_scale, q_data_type, kv_data_type,
             *args, **kwargs):  # fmt: skip
        wrapper._glmserve_mla_fp8_plan = Plan(
            kv_indptr, kv_indices, int(num_heads), int(head_dim_ckv), int(head_dim_kpe),
            int(page_size), bool(causal), float(sm_scale), q_data_type, kv_data_type,
        )  # fmt: skip
        return inner(qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv,
                     head_dim_kpe, page_size, causal, sm_scale, q_data_type, kv_data_type,
                     *args, **kwargs)  # fmt: skip

    wrapper.plan = plan
    try:
        yield
    finally:
        if had_own:
            wrapper.plan = inner
        else:
            del wrapper.plan


# ---------------------------------------------------------------------------------------------
# The AST rewrite of forward_decode


def _is_run_call(node: Any) -> bool:
    import ast

    return (
        isinstance(node, ast.Call)
        and src.is_name_attr(node.func, "decode_wrapper", "run")
        and len(node.args) == 4
        and not any(isinstance(a, ast.Starred) for a in node.args)
    )


def rewrite_forward_decode(module: ModuleType) -> Any:
    """``forward_decode`` compiled with the cast and the run call replaced (see above)."""
    import ast

    path = module.__file__
    with open(path, encoding="utf-8") as fh:  # type: ignore[arg-type]
        source = fh.read()
    tree = ast.parse(source, filename=path)  # type: ignore[arg-type]
    updater = "FlashInferMLAIndicesUpdaterDecode"
    src.check_plan_calls(src.class_methods(tree, updater, PATCH), updater, PATCH)
    func = src.class_methods(tree, "FlashInferMLAAttnBackend", PATCH).get("forward_decode")
    if func is None:
        raise fail(PATCH, "FlashInferMLAAttnBackend.forward_decode not found in the source")
    counts = {"cast": 0, "run": 0}

    class Rewriter(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            if src.is_whole_pool_cast(node):
                counts["cast"] += 1
                wrapper = ast.parse("self.forward_metadata.decode_wrapper", mode="eval").body
                pool_read = node.func.value  # type: ignore[attr-defined]
                args = [ast.Name("self", ast.Load()), wrapper, pool_read, *pool_read.args,
                        node.args[0]]  # fmt: skip
                return ast.copy_location(
                    ast.Call(ast.Name(KEY_BUFFER_HELPER, ast.Load()), args, []), node
                )
            if _is_run_call(node):
                counts["run"] += 1
                args = [ast.Name("self", ast.Load()), ast.Name("decode_wrapper", ast.Load()),
                        *node.args]  # fmt: skip
                return ast.copy_location(
                    ast.Call(ast.Name(RUN_HELPER, ast.Load()), args, node.keywords), node
                )
            return node

    new_func = Rewriter().visit(copy.deepcopy(func))
    if counts != {"cast": 1, "run": 1}:
        raise fail(
            PATCH,
            "FlashInferMLAAttnBackend.forward_decode: expected exactly one "
            "'<pool>.get_key_buffer(layer.layer_id).to(q.dtype)' and one "
            f"'decode_wrapper.run(q_nope, q_rope, ckv, kpe, ...)', found {counts['cast']} "
            f"and {counts['run']}",
        )
    new_func.decorator_list = []
    code = compile(
        ast.fix_missing_locations(ast.Module(body=[new_func], type_ignores=[])),
        path,  # type: ignore[arg-type]
        "exec",
        flags=src.future_flags(tree),
        dont_inherit=True,
    )
    namespace: dict[str, Any] = {}
    exec(code, vars(module), namespace)
    fn = namespace["forward_decode"]
    fn.__qualname__ = "FlashInferMLAAttnBackend.forward_decode"
    fn._glmserve_mla_fp8 = True
    return fn


def check_source(module: ModuleType, version: str) -> str:
    """Refuse unless the module is the file of a supported release; returns that release."""
    from .mla_fp8_decode import SUPPORTED_VERSIONS, unsupported_version_reason

    path = getattr(module, "__file__", None)
    if not path or not os.path.isfile(path):
        raise fail(PATCH, f"cannot read the source of {module.__name__}")
    with open(path, "rb") as fh:
        sha = hashlib.sha256(fh.read()).hexdigest()
    releases = TESTED_SOURCES.get(sha)
    if releases is None:
        if version in SUPPORTED_VERSIONS:
            raise fail(
                PATCH, f"{path} (sglang {version}) differs from the released file (sha256 {sha})"
            )
        raise fail(PATCH, unsupported_version_reason(version))
    return version if version in releases else releases[0]


def install(backend: Any, model_runner: Any) -> FlashInferState:
    """Check the requirements and give ``backend`` its state (after the release's own
    ``__init__``). Raises PatchError (logged FAILED) on a miss."""
    state = FlashInferState(backend, model_runner)
    backend._glmserve_mla_fp8 = state
    return state


def apply(module: ModuleType, version: str) -> str:
    """Patch the freshly imported flashinfer MLA backend module; returns the version."""
    if "flashinfer_mla_gather_cast" in parse_patch_names(os.environ.get(PATCHES_ENV)):
        raise fail(PATCH, COMBINED_REASON)
    version = check_source(module, version)
    backend_cls = getattr(module, "FlashInferMLAAttnBackend", None)
    updater = getattr(module, "FlashInferMLAIndicesUpdaterDecode", None)
    if backend_cls is None or updater is None:
        raise fail(PATCH, "FlashInferMLAAttnBackend or its decode indices updater not found")
    if getattr(backend_cls, "_glmserve_mla_fp8_patched", False):
        return version
    if getattr(backend_cls, "_glmserve_patched", False):
        raise fail(PATCH, COMBINED_REASON)
    forward_decode = rewrite_forward_decode(module)
    module_vars = vars(module)
    module_vars[KEY_BUFFER_HELPER] = key_buffer
    module_vars[RUN_HELPER] = run
    orig_init = backend_cls.__init__
    orig_cbf = updater.call_begin_forward

    def __init__(self, model_runner, *args, **kwargs):
        if gtc.dcp_enabled(module):
            raise fail(
                PATCH,
                "decode context parallelism is on: its decode needs FlashInfer's log-sum-exp "
                "(drop --dcp-size or the patch)",
            )
        orig_init(self, model_runner, *args, **kwargs)
        install(self, model_runner)

    def call_begin_forward(self, *args, **kwargs):
        wrapper = gtc._bound_arg(orig_cbf, "wrapper", (self, *args), kwargs)
        with record_plan(wrapper):
            return orig_cbf(self, *args, **kwargs)

    __init__.__wrapped__ = orig_init  # type: ignore[attr-defined]
    backend_cls.__init__ = __init__
    backend_cls.forward_decode = forward_decode
    updater.call_begin_forward = call_begin_forward
    backend_cls._glmserve_mla_fp8_patched = True
    return version
