"""Reading SGLang's ``flashinfer_mla_backend.py`` source for a rewrite: the whole-pool cast,
the updaters' plan calls, the classes' methods, the module's ``__future__`` flags.

Shared by the two patches that recompile methods of that file (``flashinfer_mla_gather_cast``
and ``mla_fp8_flashinfer``); each refusal names the patch that asked (``patch``)."""

from __future__ import annotations
import __future__

import ast

from .. import fail

TARGET = "sglang.srt.layers.attention.flashinfer_mla_backend"
# updater class -> the call_begin_forward parameter holding the MLA paged wrapper it plans
PLAN_WRAPPERS = {
    "FlashInferMLAIndicesUpdaterDecode": "wrapper",
    "FlashInferMLAIndicesUpdaterPrefill": "wrapper_paged",
}


def is_name_attr(node: ast.AST, base: str, attr: str) -> bool:
    """``base.attr`` with ``base`` a plain name."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == base
    )


def is_whole_pool_cast(node: ast.AST) -> bool:
    """``<pool>.get_key_buffer(layer.layer_id).to(q.dtype)``, any ``<pool>`` expression."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "to"
        and len(node.args) == 1
        and not node.keywords
        and is_name_attr(node.args[0], "q", "dtype")
    ):
        return False
    inner = node.func.value
    return (
        isinstance(inner, ast.Call)
        and isinstance(inner.func, ast.Attribute)
        and inner.func.attr == "get_key_buffer"
        and len(inner.args) == 1
        and not inner.keywords
        and is_name_attr(inner.args[0], "layer", "layer_id")
    )


def class_methods(tree: ast.Module, cls_name: str, patch: str) -> dict[str, ast.FunctionDef]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            return {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
    raise fail(patch, f"class {cls_name} not found in {TARGET} source")


def check_plan_calls(methods: dict[str, ast.FunctionDef], cls_name: str, patch: str) -> None:
    """The updater plans through ``<param>.plan(qo, kv_indptr, kv_indices, kv_len, ...)``."""
    func = methods.get("call_begin_forward")
    param = PLAN_WRAPPERS[cls_name]
    if func is None or param not in [a.arg for a in func.args.args]:
        raise fail(patch, f"{cls_name}.call_begin_forward has no parameter {param!r}")
    plans = [
        n
        for n in ast.walk(func)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "plan"
    ]
    bad = [
        n.lineno
        for n in plans
        if not is_name_attr(n.func, param, "plan")
        or len(n.args) < 4
        or any(isinstance(a, ast.Starred) for a in n.args[:4])
    ]
    if not plans or bad:
        raise fail(
            patch,
            f"{cls_name}.call_begin_forward: expected {param}.plan(qo_indptr, kv_indptr, "
            f"kv_indices, kv_len_arr, ...) calls, found {len(plans)} plan call(s)"
            + (f", unexpected at line(s) {bad}" if bad else ""),
        )


def future_flags(tree: ast.Module) -> int:
    """The module's ``from __future__ import ...`` flags (annotations!), for recompiling."""
    flags = 0
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            for alias in node.names:
                flags |= getattr(__future__, alias.name).compiler_flag
    return flags
