"""Patterns in the per-rank shares turned into advice: the findings of ``glmserve profile``.

Each rule looks at the worst rank (a TP group decodes at the pace of its slowest rank) and
fires past a threshold share of decode step time. The first rule is the one this tool was
written for: FlashInfer MLA casting the whole FP8 KV pool to BF16 on every layer (69% of decode
on an H200), told apart from the gather-then-cast patch that casts only the batch's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from glmserve.profiling.spans import share as _share

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
    cast = _worst(ranks, lambda r: [o for o in r.ops if o.cast and o.cast[0].startswith("fp8")])
    if cast and cast[1] >= CAST_SHARE:
        op, share, rks, prof = cast
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
        findings.append(
            Finding(
                kind="fp8_kv_cast",
                severity="high" if share >= 0.3 else "medium",
                share=share,
                ranks=rks,
                message=(
                    f"{op.name} ({src.split('_')[0]} -> {dst} elementwise) takes {share:.0%} of "
                    f"decode ({per_step:.0f} casts{shape} per step): {why}"
                ),
            )
        )
    dtype_cast = _worst_kind(ranks, "cast")
    if not findings and dtype_cast and dtype_cast[0] >= CAST_SHARE:
        findings.append(
            Finding(
                kind="dtype_cast",
                severity="high" if dtype_cast[0] >= 0.3 else "medium",
                share=dtype_cast[0],
                ranks=dtype_cast[1],
                message=(
                    f"dtype-converting copy kernels take {dtype_cast[0]:.0%} of decode (the "
                    "trace does not name the dtypes: profile with record_shapes to see them); "
                    "with an FP8 KV cache this is the whole pool cast to BF16 every layer: "
                    "try flashinfer_gtc or trtllm_mla"
                ),
            )
        )
    ar = _worst_kind(ranks, "allreduce")
    if ar and ar[0] >= ALLREDUCE_SHARE:
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
        findings.append(
            Finding(
                kind="allreduce",
                severity="high" if ar[0] >= 0.3 else "medium",
                share=ar[0],
                ranks=ar[1],
                message=(
                    f"all-reduce kernels take {ar[0]:.0%} of decode{skew}: on PCIe-only GPUs "
                    "check NCCL_P2P_LEVEL (SYS lets P2P cross the root complex), keep SGLang's "
                    "custom all-reduce on (no --disable-custom-all-reduce), or use fewer TP "
                    "ranks"
                ),
            )
        )
    gemm = _worst_kind(ranks, "gemm")
    if gemm and gemm[0] >= GEMM_SHARE:
        findings.append(
            Finding(
                kind="gemm_bound",
                severity="info",
                share=gemm[0],
                ranks=gemm[1],
                message=(
                    f"GEMM kernels take {gemm[0]:.0%} of decode: expected for weight-bandwidth-"
                    "bound decode; gains now come from fewer bytes per step (quantization, MTP)"
                ),
            )
        )
    htod = _worst_kind(ranks, "memcpy_htod")
    if htod and htod[0] >= HTOD_SHARE:
        findings.append(
            Finding(
                kind="memcpy_htod",
                severity="medium",
                share=htod[0],
                ranks=htod[1],
                message=(
                    f"host-to-device copies take {htod[0]:.0%} of decode: use pinned memory "
                    "(pin_memory=True / non_blocking copies) and keep per-step inputs on the GPU"
                ),
            )
        )
    idle = [
        (1 - _share(r.gpu_busy_us, r.window_us), r.rank)
        for r in ranks
        if r.has_gpu and r.window_us > 0
    ]
    if idle:
        worst_idle = max(idle)
        if worst_idle[0] >= IDLE_SHARE:
            findings.append(
                Finding(
                    kind="gpu_idle",
                    severity="medium",
                    share=worst_idle[0],
                    ranks=[r for s, r in idle if s >= IDLE_SHARE],
                    message=(
                        f"the GPU is idle {worst_idle[0]:.0%} of the decode step: launch-bound; "
                        "enable CUDA graphs (drop --disable-cuda-graph) or raise the batch size"
                    ),
                )
            )
    named = {f.kind for f in findings}
    dom = _worst(ranks, lambda r: [o for o in r.ops if not o.name.startswith("(")][:1])
    if dom and dom[1] >= DOMINANT_SHARE and "fp8_kv_cast" not in named:
        op, share, rks, _ = dom
        label = f" ({op.label})" if op.label else ""
        kernels = f" via {', '.join(op.kernels)}" if op.kernels else ""
        findings.append(
            Finding(
                kind="dominant_op",
                severity="info",
                share=share,
                ranks=rks,
                message=f"{op.name}{label} takes {share:.0%} of decode{kernels}",
            )
        )
    findings.sort(key=lambda f: ({"high": 0, "medium": 1, "info": 2}[f.severity], -f.share))
    return findings


_GATHER_OPS = frozenset({"aten::index", "aten::index_select", "aten::gather", "aten::take"})


def _has_gather(prof: RankProfile) -> bool:
    """Rows are gathered before the cast (the flashinfer_gtc pattern) in this rank's trace."""
    if any(o.name in _GATHER_OPS for o in prof.ops):
        return True
    return any(
        "gather" in k.short_name or "index_elementwise" in k.short_name for k in prof.kernels
    )


def _rows(dims: Any) -> int | None:
    try:
        return int(dims[0]) if dims else None
    except (TypeError, ValueError, IndexError):
        return None


def _worst(
    ranks: list[RankProfile], pick: Any
) -> tuple[OpStat, float, list[int], RankProfile] | None:
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
    shares = [(sum(k.share for k in r.kernels if k.kind == kind), r.rank) for r in ranks]
    shares = [s for s in shares if s[0] > 0]
    if not shares:
        return None
    return max(s for s, _ in shares), [rk for _, rk in shares]
