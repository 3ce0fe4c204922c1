"""Patterns in the per-rank shares turned into advice: the findings of ``glmserve profile``.

Each rule looks at the worst rank (a TP group decodes at the pace of its slowest rank) and
fires past a threshold share of decode step time. The first rule is the one this tool was
written for: FlashInfer MLA casting the whole FP8 KV pool to BF16 on every layer (69% of decode
on an H200), told apart from the gather-then-cast patch that casts only the batch's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from glmserve.profiling.spans import share

if TYPE_CHECKING:
    from glmserve.profiling.results import OpStat, RankProfile

# Thresholds on the share of decode step time (worst rank).
CAST_SHARE = 0.10
ALLREDUCE_SHARE = 0.15
GEMM_SHARE = 0.40
HTOD_SHARE = 0.05
IDLE_SHARE = 0.30
DOMINANT_SHARE = 0.25
# A cast buffer this many rows or more is a KV pool, not one batch's gathered rows.
WHOLE_POOL_ROWS = 100_000
# A graded finding is high from this share of decode on, medium below it.
HIGH_SHARE = 0.3

# What each kernel-kind finding says, "{share}" of decode (and the allreduce "{skew}").
_DTYPE_CAST = (
    "dtype-converting copy kernels take {share:.0%} of decode (the "
    "trace does not name the dtypes: profile with record_shapes to see them); "
    "with an FP8 KV cache this is the whole pool cast to BF16 every layer: "
    "try flashinfer_gtc or trtllm_mla"
)
_ALLREDUCE = (
    "all-reduce kernels take {share:.0%} of decode{skew}: on PCIe-only GPUs "
    "check NCCL_P2P_LEVEL (SYS lets P2P cross the root complex), keep SGLang's "
    "custom all-reduce on (no --disable-custom-all-reduce), or use fewer TP "
    "ranks"
)
_GEMM = (
    "GEMM kernels take {share:.0%} of decode: expected for weight-bandwidth-"
    "bound decode; gains now come from fewer bytes per step (quantization, MTP)"
)
_HTOD = (
    "host-to-device copies take {share:.0%} of decode: use pinned memory "
    "(pin_memory=True / non_blocking copies) and keep per-step inputs on the GPU"
)

_GATHER_OPS = frozenset({"aten::index", "aten::index_select", "aten::gather", "aten::take"})
_SEVERITY_ORDER = {"high": 0, "medium": 1, "info": 2}


@dataclass
class Finding:
    """A pattern in the trace turned into advice."""

    kind: str  # fp8_kv_cast | allreduce | gemm_bound | memcpy_htod | gpu_idle | dominant_op
    severity: str  # high | medium | info
    share: float
    ranks: list[int]
    message: str


def find_bottlenecks(ranks: list[RankProfile]) -> list[Finding]:
    """Pure: turn the per-rank shares into advice, worst rank first, biggest share first."""
    findings: list[Finding] = []
    _add(findings, _fp8_kv_cast(ranks))
    if not findings:  # the FP8 cast named above says more than an unnamed dtype cast
        _add(findings, _dtype_cast(ranks))
    _add(findings, _allreduce(ranks))
    _add(findings, _kind_finding(ranks, "gemm", GEMM_SHARE, "gemm_bound", "info", _GEMM))
    _add(findings, _kind_finding(ranks, "memcpy_htod", HTOD_SHARE, "memcpy_htod", "medium", _HTOD))
    _add(findings, _gpu_idle(ranks))
    if not any(f.kind == "fp8_kv_cast" for f in findings):
        _add(findings, _dominant_op(ranks))
    findings.sort(key=lambda f: (_SEVERITY_ORDER[f.severity], -f.share))
    return findings


def _add(findings: list[Finding], finding: Finding | None) -> None:
    """Keep a rule's finding (rules answer None when they do not fire)."""
    if finding is not None:
        findings.append(finding)


def _graded(share_: float) -> str:
    """high from HIGH_SHARE of decode on, else medium."""
    return "high" if share_ >= HIGH_SHARE else "medium"


def _kind_finding(
    ranks: list[RankProfile],
    kernel_kind: str,
    threshold: float,
    kind: str,
    severity: str | None,
    message: str,
    **fields: str,
) -> Finding | None:
    """A finding when kernels of ``kernel_kind`` take ``threshold`` or more of some rank's
    decode; ``severity`` None grades it by share (``_graded``). ``message`` is a template
    of ``{share}`` and ``fields``."""
    worst = _worst_kind(ranks, kernel_kind)
    if not worst or worst[0] < threshold:
        return None
    share_, hit = worst
    return Finding(
        kind=kind,
        severity=severity or _graded(share_),
        share=share_,
        ranks=hit,
        message=message.format(share=share_, **fields),
    )


def _fp8_kv_cast(ranks: list[RankProfile]) -> Finding | None:
    """An FP8 -> wider cast op: of the whole KV pool every layer, or of gathered rows."""
    cast = _worst(ranks, lambda r: [o for o in r.ops if o.cast and o.cast[0].startswith("fp8")])
    if not cast or cast[1] < CAST_SHARE:
        return None
    op, share_, rks, prof = cast
    per_step = op.count / prof.steps if prof.steps else op.count
    dims = op.example_dims[0] if op.example_dims else None
    shape = f" of a {list(dims)} buffer" if dims else ""
    src, dst = op.cast or ("fp8", "bf16")
    rows = _rows(dims)
    gathered = _has_gather(prof) and not (rows is not None and rows >= WHOLE_POOL_ROWS)
    if gathered:
        why = (
            "only the batch's KV rows are cast (gather-then-cast is active); the rest "
            "needs an FP8-native attention backend (trtllm_mla or cutlass_mla: SM100 GPUs only)"
        )
    else:
        why = (
            "the whole KV pool is cast every layer; try flashinfer_gtc (gather-then-cast) "
            "or trtllm_mla (reads FP8 KV natively)"
        )
    return Finding(
        kind="fp8_kv_cast",
        severity=_graded(share_),
        share=share_,
        ranks=rks,
        message=(
            f"{op.name} ({src.split('_')[0]} -> {dst} elementwise) takes {share_:.0%} of "
            f"decode ({per_step:.0f} casts{shape} per step): {why}"
        ),
    )


def _dtype_cast(ranks: list[RankProfile]) -> Finding | None:
    """Dtype-converting copy kernels whose trace does not name the dtypes."""
    return _kind_finding(ranks, "cast", CAST_SHARE, "dtype_cast", None, _DTYPE_CAST)


def _allreduce(ranks: list[RankProfile]) -> Finding | None:
    """All-reduce time; shares that differ across ranks point at the slowest one."""
    ar_shares = [
        sum(k.share for k in r.kernels if k.kind == "allreduce") for r in ranks if r.has_gpu
    ]
    skew = (
        " (shares differ across ranks, "
        + ", ".join(f"{x:.0%}" for x in ar_shares)
        + ": part of it is waiting for the slowest rank, so check that rank first)"
        if len(ar_shares) > 1 and max(ar_shares) > 2 * min(ar_shares)
        else ""
    )
    return _kind_finding(
        ranks, "allreduce", ALLREDUCE_SHARE, "allreduce", None, _ALLREDUCE, skew=skew
    )


def _gpu_idle(ranks: list[RankProfile]) -> Finding | None:
    """The GPU waiting on the CPU inside the decode step: launch-bound."""
    idle = [
        (1 - share(r.gpu_busy_us, r.window_us), r.rank)
        for r in ranks
        if r.has_gpu and r.window_us > 0
    ]
    if not idle:
        return None
    worst_idle = max(idle)
    if worst_idle[0] < IDLE_SHARE:
        return None
    return Finding(
        kind="gpu_idle",
        severity="medium",
        share=worst_idle[0],
        ranks=[r for s, r in idle if s >= IDLE_SHARE],
        message=(
            f"the GPU is idle {worst_idle[0]:.0%} of the decode step: launch-bound; "
            "enable CUDA graphs (drop --disable-cuda-graph) or raise the batch size"
        ),
    )


def _dominant_op(ranks: list[RankProfile]) -> Finding | None:
    """One named op taking a large share, when no rule above explains it."""
    dom = _worst(ranks, lambda r: [o for o in r.ops if not o.name.startswith("(")][:1])
    if not dom or dom[1] < DOMINANT_SHARE:
        return None
    op, share_, rks, _ = dom
    label = f" ({op.label})" if op.label else ""
    kernels = f" via {', '.join(op.kernels)}" if op.kernels else ""
    return Finding(
        kind="dominant_op",
        severity="info",
        share=share_,
        ranks=rks,
        message=f"{op.name}{label} takes {share_:.0%} of decode{kernels}",
    )


def _has_gather(prof: RankProfile) -> bool:
    """Rows are gathered before the cast (the flashinfer_gtc pattern) in this rank's trace."""
    if any(o.name in _GATHER_OPS for o in prof.ops):
        return True
    return any(
        "gather" in k.short_name or "index_elementwise" in k.short_name for k in prof.kernels
    )


def _rows(dims: Any) -> int | None:
    """Rows of a cast buffer (its first dim), None when the dims do not say."""
    try:
        return int(dims[0]) if dims else None
    except (TypeError, ValueError, IndexError):
        return None


def _worst(
    ranks: list[RankProfile], pick: Any
) -> tuple[OpStat, float, list[int], RankProfile] | None:
    """The biggest op ``pick`` chooses on any rank, its share, the ranks that have one, and
    the rank where it is biggest."""
    best: tuple[OpStat, float, list[int], RankProfile] | None = None
    hit_ranks: list[int] = []
    for r in ranks:
        ops = pick(r)
        if not ops:
            continue
        op = max(ops, key=lambda o: o.share)
        hit_ranks.append(r.rank)
        if best is None or op.share > best[1]:
            best = (op, op.share, hit_ranks, r)
    return best


def _worst_kind(ranks: list[RankProfile], kind: str) -> tuple[float, list[int]] | None:
    """The largest share kernels of ``kind`` take on one rank, and the ranks that have any."""
    shares = [(sum(k.share for k in r.kernels if k.kind == kind), r.rank) for r in ranks]
    shares = [s for s in shares if s[0] > 0]
    if not shares:
        return None
    return max(s for s, _ in shares), [rk for _, rk in shares]
