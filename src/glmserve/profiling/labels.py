"""Names and kinds of what ran: short kernel names, dtype casts, kernel kinds (pure).

A kernel's C++ name is long and templated; what a reader wants is its bare name, what kind of
work it is (gemm, attention, cast, all-reduce...) and, for copies, which dtypes it converts.
With ``record_shapes`` the launching op's ``Input type`` tells an ``aten::copy_`` FP8 -> BF16
cast apart from any other copy (FlashInfer MLA casting the whole FP8 KV pool to BF16 on every
layer); without it, the copy kernel's functor type still names the FP8 source.
"""

from __future__ import annotations

import re
from typing import Any

from glmserve.profiling.events import OpSpan

# torch ScalarType codes as they appear in ``Concrete Inputs`` of aten::to / aten::_to_copy.
_SCALAR_TYPE_CODES = {
    "5": "Half",
    "6": "Float",
    "15": "BFloat16",
    "23": "Float8_e5m2",
    "24": "Float8_e4m3fn",
}
_SHORT_DTYPE = {
    "Float8_e4m3fn": "fp8_e4m3",
    "Float8_e4m3fnuz": "fp8_e4m3",
    "Float8_e5m2": "fp8_e5m2",
    "Float8_e5m2fnuz": "fp8_e5m2",
    "BFloat16": "bf16",
    "Half": "fp16",
    "Float": "fp32",
    "Byte": "uint8",
}
_CAST_OPS = frozenset({"aten::copy_", "aten::_to_copy", "aten::to"})


def short_kernel(name: str) -> str:
    """``void at::native::unrolled_elementwise_kernel<...>(...)`` -> its bare name."""
    base = name.removeprefix("void ")
    depth, cut = 0, len(base)
    for i, ch in enumerate(base):
        if ch in "<(" and depth == 0:
            cut = i
            break
    base = base[:cut].strip()
    return base.rsplit("::", 1)[-1] or name[:60]


def _dtype(type_str: Any) -> str:
    s = str(type_str).removeprefix("c10::")
    return _SHORT_DTYPE.get(s, s.lower() if s else "")


def cast_dtypes(op: OpSpan) -> tuple[str, str] | None:
    """(src, dst) when the op converts dtypes, from ``Input type`` (record_shapes)."""
    types = op.args.get("Input type") or []
    if op.name == "aten::copy_" and len(types) >= 2:
        dst, src = _dtype(types[0]), _dtype(types[1])
    elif op.name in ("aten::to", "aten::_to_copy") and types:
        src = _dtype(types[0])
        concrete = op.args.get("Concrete Inputs") or []
        code = str(concrete[1]) if len(concrete) > 1 else ""
        dst = _dtype(_SCALAR_TYPE_CODES.get(code, ""))
    else:
        return None
    if src and dst and src != dst and src not in ("scalar", "") and dst != "scalar":
        return (src, dst)
    return None


def op_dims(op: OpSpan | None) -> list[Any]:
    """The op's non-empty ``Input Dims`` (record_shapes): the buffer a cast converts."""
    if op is None:
        return []
    return [d for d in (op.args.get("Input Dims") or []) if d]


def kernel_fp8_cast(name: str) -> tuple[str, str] | None:
    """A copy kernel whose functor takes ``c10::Float8_e4m3fn``: an FP8 upcast.

    Used when the trace lacks ``record_shapes``; the destination dtype is only named when the
    kernel name carries it (direct_copy_kernel's lambdas name the source type only).
    """
    if "Float8_e4m3" not in name or "copy" not in name:
        return None
    dst = "bf16" if "BFloat16" in name else "fp16" if "Half" in name else "wider"
    return ("fp8_e4m3", dst)


def _kernel_dtype_cast(name: str) -> bool:
    """A dtype-converting copy kernel whose name does not say the types (newer torch:
    ``direct_copy_kernel_cuda`` through ``LoadWithCast``/``StoreWithCast``)."""
    return "copy" in name and ("LoadWithCast" in name or "StoreWithCast" in name)


def kernel_label(name: str, cat: str) -> str:
    """What a kernel with no known launching op does, from its name alone ("" if unsaid)."""
    if cat == "gpu_memcpy":
        return name
    cast = kernel_fp8_cast(name)
    if cast:
        return f"{cast[0]} -> {cast[1]} elementwise"
    return "dtype cast" if _kernel_dtype_cast(name) else ""


def op_cast(op: OpSpan, kernel_name: str) -> tuple[str, str] | None:
    """(src, dst) of a casting op: its recorded types, else its copy kernel's name."""
    cast = cast_dtypes(op)
    if cast is None and op.name in _CAST_OPS:
        cast = kernel_fp8_cast(kernel_name)
    return cast


def op_label(op: OpSpan, kernel_name: str) -> str:
    """``fp8_e4m3 -> bf16 elementwise`` for a cast (ops of one name split by it), else ""."""
    cast = op_cast(op, kernel_name)
    if cast is None:
        return ""
    suffix = " elementwise" if "elementwise" in kernel_name or not kernel_name else ""
    return f"{cast[0]} -> {cast[1]}{suffix}"


_GEMM = re.compile(r"gemm|gemv|cutlass|matmul|\bmm\b|_mm_|sm\d+_xmma|cublas|nvjet|fp4|mma", re.I)
_NORM = re.compile(r"rms_?norm|layer_?norm|norm_kernel|::norm::", re.I)
_ATTN = re.compile(r"attention|attn|mla|fmha|flash_?mla|softmax|decode_kernel", re.I)
_ALLREDUCE = re.compile(
    r"nccl.*(allreduce|all_reduce|reducescatter|allgather)|cross_device_reduce|all_reduce|allreduce",
    re.I,
)


def kernel_kind(name: str, cat: str, launcher: str) -> str:
    """The kind of work a kernel does, by its name and the op label that launched it."""
    if cat == "gpu_memcpy":
        return "memcpy_htod" if "HtoD" in name else "memcpy"
    if cat == "gpu_memset":
        return "memset"
    if _ALLREDUCE.search(name) or "nccl" in name.lower():
        return "allreduce"
    if ("->" in launcher and "elementwise" in name) or kernel_fp8_cast(name):
        return "cast"
    if _kernel_dtype_cast(name):
        return "cast"
    if _NORM.search(name):
        return "norm"
    if _GEMM.search(name) or launcher.startswith(("aten::mm", "aten::addmm", "aten::bmm")):
        return "gemm"
    if _ATTN.search(name):
        return "attention"
    if "elementwise" in name:
        return "elementwise"
    return "other"
