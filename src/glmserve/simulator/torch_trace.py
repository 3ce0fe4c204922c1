"""Chrome-trace files like SGLang's torch profiler writes (``{id}-TP-{r}.trace.json.gz``).

Each profiled step becomes GPU kernel events whose durations are the cost-model terms of that
step (unscaled, i.e. GPU time as the real box would show it), laid out back to back on one
stream, plus the CPU-side ``aten::copy_`` op for the FP8->BF16 cast where the model has one.
Kernel names are real ones from SGLang/FlashInfer/NCCL/cuBLAS traces so a trace analyser that
works here (``glmserve profile``) keys on the same names it will see on the GPU box.
"""

from __future__ import annotations

import gzip
import json
import os
from typing import Any

from glmserve.simulator import costmodel
from glmserve.simulator.costmodel import CostModel, ServerShape

CAST_KERNEL = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() "
    "const::{lambda(c10::Float8_e4m3fn)#1}, std::array<char*, 2ul>, TrivialOffsetCalculator<1, "
    "unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
    "at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() "
    "const::{lambda(c10::Float8_e4m3fn)#1}, std::array<char*, 2ul>, TrivialOffsetCalculator<1, "
    "unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
    "at::native::memory::StoreWithCast<1>)"
)
GATHER_KERNEL = (
    "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<"
    "at::native::index_kernel_impl<at::native::OpaqueType<1> >(at::TensorIteratorBase&, "
    "c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>"
    "(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, "
    "at::native::index_kernel_impl<at::native::OpaqueType<1> >(at::TensorIteratorBase&, "
    "c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1} const&, "
    "bool)::{lambda(int)#1}>(long, at::native::gpu_index_kernel<...>::{lambda(int)#1})"
)
DENSE_GEMM = "nvjet_tst_128x64_64x8_2x1_v_bz_TNT"
MOE_GEMM = (
    "void cutlass::device_kernel<flashinfer::cutlass_kernels::FusedMoeSm120BlockScaledGemm<"
    "cutlass::float_e2m1_t, cutlass::float_ue4m3_t, __nv_bfloat16, 128, 128, 128> >("
    "flashinfer::cutlass_kernels::FusedMoeSm120BlockScaledGemm<cutlass::float_e2m1_t, "
    "cutlass::float_ue4m3_t, __nv_bfloat16, 128, 128, 128>::Params)"
)
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NORM = (
    "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, "
    "__nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)"
)
ATTN = {
    "flashinfer": (
        "void flashinfer::mla::BatchMLAPagedAttentionKernel<flashinfer::MaskMode::kNone, 512u, "
        "64u, flashinfer::mla::KernelTraits<2u, 64u, 64u, 64u, 32u, __nv_bfloat16, "
        "__nv_bfloat16, __nv_bfloat16, int>, flashinfer::mla::Params<__nv_bfloat16, "
        "__nv_bfloat16, __nv_bfloat16, int> >(flashinfer::mla::Params<__nv_bfloat16, "
        "__nv_bfloat16, __nv_bfloat16, int>)"
    ),
    "trtllm_mla": (
        "fmhaSm100fKernel_QkvE4m3OBfloat16HQk576HV512HVPerCta32PagedKvDenseP64VarSeqQ8Kv128"
        "PersistentSwapsAbForGen"
    ),
    "cutlass_mla": (
        "void cutlass::device_kernel<cutlass::fmha::kernel::Sm100FmhaMlaKernelTmaWarpspecialized"
        "<cute::tuple<cute::C<128>, cute::C<128>, cute::tuple<cute::C<512>, cute::C<64> > >, "
        "cutlass::float_e4m3_t, float, cutlass::bfloat16_t> >"
    ),
}


def _copy_shapes(kernel: str, rows: int) -> dict[str, Any]:
    if kernel != CAST_KERNEL:
        return {}
    dims = [rows, 1, 576]
    return {
        "Input Dims": [dims, dims, []],
        "Input type": ["c10::BFloat16", "c10::Float8_e4m3fn", "Scalar"],
    }


def step_events(
    model: CostModel,
    shape: ServerShape,
    kind: str,
    batch: int,
    ctx: int,
    ts_us: float,
    correlation: list[int],
) -> tuple[list[dict[str, Any]], float]:
    """Kernel (and cast CPU-op) events for one step starting at ``ts_us``; returns the end."""
    if kind == "prefill":
        terms = {
            "weights": costmodel.prefill_step_s(model, shape, ctx) - model.fixed_step_ms / 1e3,
            "fixed": model.fixed_step_ms / 1e3,
        }
    else:
        terms = costmodel.step_terms(model, shape, batch, ctx)
    layers = max(1, model.layers)
    attn_s = terms.get("per_seq", 0) + terms.get("kv_read", 0) + terms.get("backend", 0)
    comm_s = terms.get("fixed", 0) + terms.get("no_cuda_graph", 0)
    w_s = terms.get("weights", 0)
    cast_s = terms.get("cast", 0)
    attn_name = ATTN.get(shape.attention_backend, ATTN["flashinfer"])
    mode = costmodel.cast_mode(shape)
    per_layer = [
        (DENSE_GEMM, 0.3 * w_s, "kernel"),
        (ALLREDUCE, 0.45 * comm_s, "kernel"),
        (NORM, 0.1 * comm_s, "kernel"),
    ]
    if mode == "whole_pool":
        per_layer.append((CAST_KERNEL, cast_s, "kernel"))
    elif mode == "gather":
        per_layer.append((GATHER_KERNEL, cast_s * 0.5, "kernel"))
        per_layer.append((CAST_KERNEL, cast_s * 0.5, "kernel"))
    per_layer += [
        (attn_name, attn_s, "kernel"),
        (MOE_GEMM, 0.7 * w_s, "kernel"),
        (ALLREDUCE, 0.45 * comm_s, "kernel"),
    ]
    # Rows the cast touches: the whole pool, or (gather-then-cast) the batch's context rows.
    rows = costmodel.pool_tokens(model, shape) if mode == "whole_pool" else max(1, batch * ctx)
    events: list[dict[str, Any]] = []
    t = ts_us
    for layer in range(layers):
        for name, total_s, cat in per_layer:
            dur = total_s / layers * 1e6
            if dur <= 0:
                continue
            correlation[0] += 1
            if name in (CAST_KERNEL, GATHER_KERNEL):
                op = "aten::copy_" if name == CAST_KERNEL else "aten::index"
                events.append(
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": op,
                        "pid": 1,
                        "tid": 1,
                        "ts": round(t, 3),
                        "dur": 6.0,
                        "args": {
                            "External id": correlation[0],
                            "layer": layer,
                            # What torch records with record_shapes=True (SGLang's
                            # /start_profile passes it): copy_(dst bf16, src fp8).
                            **_copy_shapes(name, rows),
                        },
                    }
                )
            events.append(
                {
                    "ph": "X",
                    "cat": cat,
                    "name": name,
                    "pid": 0,
                    "tid": 7,
                    "ts": round(t, 3),
                    "dur": round(dur, 3),
                    "args": {
                        "device": 0,
                        "stream": 7,
                        "correlation": correlation[0],
                        "External id": correlation[0],
                    },
                }
            )
            t += dur
    return events, t


def write_traces(
    output_dir: str,
    profile_id: str,
    tp_size: int,
    model: CostModel,
    shape: ServerShape,
    steps: list[tuple],
    activities: list[str],
) -> list[str]:
    """Write one gzipped Chrome trace per rank; returns the paths."""
    os.makedirs(output_dir, exist_ok=True)
    corr = [0]
    events: list[dict[str, Any]] = []
    t = steps[0][2] * 1e6 if steps else 0.0
    gpu = "GPU" in activities or "CUDA" in activities or not activities
    for s in steps:
        # (i, kind, start, end, emitted, model_s, batch, ctx)
        t = max(t, s[2] * 1e6)
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"{s[1]}_step_{s[0]}",
                "pid": 1,
                "tid": 1,
                "ts": round(t, 3),
                "dur": round(s[5] * 1e6, 3),
                "args": {"batch": s[6], "ctx_tokens": s[7]},
            }
        )
        if gpu:
            evs, t = step_events(model, shape, s[1], s[6], s[7], t, corr)
            events.extend(evs)
        else:
            t += s[5] * 1e6
    paths = []
    for r in range(tp_size):
        doc = {
            "schemaVersion": 1,
            "deviceProperties": [
                {
                    "id": 0,
                    "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                    "totalGlobalMem": 101970952192,
                    "computeMajor": 12,
                    "computeMinor": 0,
                    "numSms": 188,
                }
            ],
            "distributedInfo": {"backend": "nccl", "rank": r, "world_size": tp_size},
            "traceEvents": events,
            "displayTimeUnit": "ms",
        }
        path = os.path.join(output_dir, f"{profile_id}-TP-{r}.trace.json.gz")
        with gzip.open(path, "wt", compresslevel=1) as fh:
            json.dump(doc, fh, separators=(",", ":"))
        paths.append(path)
    return paths
