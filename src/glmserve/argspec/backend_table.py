"""Attention-backend facts per SGLang release, GPU architecture and role, as data.

Each row says what happens when an attention backend serves one role (``prefill`` or
``decode``) on one GPU architecture under a range of SGLang releases: it runs, SGLang
refuses to start (``refused``, at argument checking), the first forward of that role
crashes (``crash``), or nobody here has checked (``unverified``). Every row cites the
release file and line, or the issue/PR, it rests on; ``log_line`` is the line the failure
prints. ``backend_facts`` turns the rows into validation warnings and refusals, the
simulator (``simulator/options.py``) into start-up outcomes, and ``glmserve profiles
--for-host`` into a verdict per shipped profile.

Rows are matched in order: the first row whose backend, role, architecture, release range
and KV dtype all match wins, so narrower rows come first. Release ranges are PEP 440
specifiers. Source paths are relative to the release's ``sglang`` package (PyPI wheel) or
the FlashInfer wheel the release pins (``Requires-Dist`` in its METADATA:
0.5.9 -> flashinfer_python 0.6.3, 0.5.23 -> 0.7.2).
"""

from __future__ import annotations

from dataclasses import dataclass

ARCHS = ("sm90", "sm100", "sm120")
OUTCOMES = ("runs", "refused", "crash", "unverified")


@dataclass(frozen=True)
class BackendRow:
    """One fact: ``backend`` in ``role`` on ``archs`` under ``releases``."""

    backend: str
    role: str  # "prefill" | "decode"
    archs: tuple[str, ...]
    releases: str  # PEP 440 specifier set
    outcome: str  # one of OUTCOMES
    sources: tuple[str, ...]
    fp8_native: bool | None = None  # reads an FP8 KV pool without a cast (None: n/a)
    kv_dtypes: tuple[str, ...] | None = None  # resolved KV dtypes this row is about (None: any)
    log_line: str = ""  # what the failure prints (refused / crash)
    crash_kind: str = ""  # the simulator's crash template (simulator/faults.py)
    caveat: str = ""  # accuracy or performance trade-off worth a note
    note: str = ""  # why the outcome holds, in a few words


_SM90_REFUSAL = (
    "ValueError: TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x). "
    "Please use a different backend."
)
_REFUSAL_SOURCES = (
    "sglang 0.5.9 srt/server_args.py:1874-1881 (_handle_attention_backend_compatibility)",
    "sglang 0.5.23 srt/arg_groups/overrides.py:1205-1213 (_mla_kv_cache_dtype_checks)",
)
_TLLM_PREFILL = (
    "RuntimeError: Error in function 'TllmGenFmhaRunner' at "
    "flashinfer/data/include/flashinfer/trtllm/fmha/fmhaRunner.cuh:30: Unsupported architecture"
)
_TRITON_P_FP8 = (
    "softmax weights P are cast to the KV dtype before P.V (p.to(v.dtype)): FP8 when the "
    "pool is FP8, 1-2.4% max relative error against an fp32 reference vs 0.3-0.5% for "
    "FlashInfer on BF16 (issue 23's H200 table); 0.5.23 keeps P in fp32 only on AMD gfx1250"
)

# fmt: off
ROWS: tuple[BackendRow, ...] = (
    # --- flashinfer (MLA, FA2 on SM120/SM90): 16-bit KV only -----------------------------
    BackendRow(
        "flashinfer", "decode", ARCHS, ">=0.5.9", "runs",
        (
            "sglang 0.5.9 srt/layers/attention/flashinfer_mla_backend.py:639 "
            "(get_key_buffer(...).to(q.dtype): the whole pool, every layer)",
            "benchmarks/results/gtc_flashinfer_h200_2026-12-01/README.md (0.85 ms per layer)",
        ),
        fp8_native=False,
        caveat="an FP8 pool is cast to BF16 whole in every layer of every decode step",
    ),
    BackendRow(
        "flashinfer", "prefill", ARCHS, ">=0.5.9", "runs",
        ("sglang 0.5.9 srt/layers/attention/flashinfer_mla_backend.py:575 (paged prefill)",),
        fp8_native=False,
    ),
    # --- triton: Triton JIT, so every arch Triton targets; FP8 converted in registers ----
    BackendRow(
        "triton", "decode", ARCHS, ">=0.5.9", "runs",
        (
            "sglang 0.5.9 srt/layers/attention/triton_backend.py:1031-1033 "
            "(get_key_buffer(layer_id) passed uncast)",
            "sglang 0.5.9 srt/layers/attention/triton_ops/decode_attention.py:355 "
            "(tl.dot(q, k.to(q.dtype))) and :395 (tl.dot(p.to(v.dtype), v))",
            "sglang 0.5.23 kernels/ops/attention/decode_attention.py:754-762 "
            "(P in fp32 only if IS_GFX1250)",
            "sglang 0.5.9 srt/server_args.py:2742-2746 (deterministic mode on SM100/SM120: "
            "'fallback to triton for DeepSeek models')",
        ),
        fp8_native=True,
        caveat=_TRITON_P_FP8,
    ),
    BackendRow(
        "triton", "prefill", ARCHS, ">=0.5.9", "runs",
        ("sglang 0.5.9 srt/layers/attention/triton_backend.py:798 (forward_extend, Triton JIT)",),
        fp8_native=True,
    ),
    # --- trtllm_mla: refused off Blackwell, trtllm-gen on SM100, XQA decode on SM120 -----
    BackendRow(
        "trtllm_mla", "decode", ("sm90",), ">=0.5.9", "refused", _REFUSAL_SOURCES,
        log_line=_SM90_REFUSAL, crash_kind="trtllm_mla_not_blackwell",
        note="SGLang's argument checks require Blackwell",
    ),
    BackendRow(
        "trtllm_mla", "prefill", ("sm90",), ">=0.5.9", "refused", _REFUSAL_SOURCES,
        log_line=_SM90_REFUSAL, crash_kind="trtllm_mla_not_blackwell",
        note="SGLang's argument checks require Blackwell",
    ),
    BackendRow(
        "trtllm_mla", "decode", ("sm100",), ">=0.5.9", "runs",
        (
            "flashinfer 0.6.3 flashinfer/mla.py:584-587 (backend='auto' -> trtllm-gen on "
            "compute capability 10.x)",
            "https://github.com/sgl-project/sglang/pull/8632",
        ),
        fp8_native=True,
    ),
    BackendRow(
        "trtllm_mla", "prefill", ("sm100",), ">=0.5.9", "runs",
        ("sglang 0.5.9 srt/layers/attention/trtllm_mla_backend.py:1113 "
         "(flashinfer.prefill.trtllm_ragged_attention_deepseek, trtllm-gen)",),
        fp8_native=True,
    ),
    BackendRow(
        "trtllm_mla", "prefill", ("sm120",), ">=0.5.9", "crash",
        (
            "https://github.com/sgl-project/sglang/issues/24633 (SM120 MLA prefill routes to "
            "TllmGenFmhaRunner, 0.5.10)",
            "https://github.com/flashinfer-ai/flashinfer/issues/3263 (fmhaRunner accepts "
            "SM100/SM103 only)",
            "sglang 0.5.9 srt/layers/attention/trtllm_mla_backend.py:1113,1131; "
            "0.5.23 :1082 (prefill calls trtllm_ragged_attention_deepseek)",
            "the seeds' run_tp8_trtllm_mla.sh crashed at warmup on RTX PRO 6000",
        ),
        fp8_native=True, log_line=_TLLM_PREFILL, crash_kind="tllm_unsupported_arch",
        note="trtllm-gen FMHA kernels exist for SM100/SM103 only",
    ),
    BackendRow(
        "trtllm_mla", "decode", ("sm120",), "==0.5.9", "crash",
        (
            "flashinfer 0.6.3 flashinfer/mla.py:593-601 (XQA MLA: fp8 query and KV on SM120 "
            "only)",
        ),
        kv_dtypes=("bfloat16",), fp8_native=True,
        log_line=(
            "ValueError: XQA MLA only supports fp8 operation on SM120 GPUs, got "
            "torch.bfloat16 and torch.bfloat16"
        ),
        crash_kind="xqa_mla_bf16",
        note="XQA MLA in FlashInfer 0.6.3 takes FP8 only",
    ),
    BackendRow(
        "trtllm_mla", "decode", ("sm120",), "==0.5.9", "runs",
        (
            "flashinfer 0.6.3 flashinfer/mla.py:584-587 (backend='auto' -> 'xqa' unless "
            "compute capability 10.x) and :593-614 (XQA MLA: fp8 on SM120)",
            "sglang 0.5.9 srt/layers/attention/trtllm_mla_backend.py:765-781 (FP8 KV: query "
            "quantized to FP8) and :860-871 (no backend argument: FlashInfer's 'auto')",
            "https://github.com/flashinfer-ai/flashinfer/pull/2053 (xqa MLA backend, SM120)",
        ),
        fp8_native=True,
        caveat="XQA decode: FP8 query x FP8 KV tensor-core math (no GPU measurement here: "
        "XQA MLA is SM12x-only, the H200 cannot run it)",
        note="decode dispatches to FlashInfer's XQA MLA kernel on SM120",
    ),
    BackendRow(
        "trtllm_mla", "decode", ("sm120",), ">=0.5.10,<0.5.15", "unverified",
        (
            "sglang 0.5.10, 0.5.11, 0.5.12 srt/layers/attention/trtllm_mla_backend.py: the same "
            "call as 0.5.9 (no backend, no counter buffer); their FlashInfer pins (0.6.7.post2, "
            "0.6.8.post1, 0.6.11.post1) not read",
        ),
        fp8_native=True,
        note="SGLang side as in 0.5.9; the pinned FlashInfer's XQA path was not checked",
    ),
    BackendRow(
        "trtllm_mla", "decode", ("sm120",), "==0.5.15", "runs",
        (
            "sglang 0.5.15 srt/layers/attention/trtllm_mla_backend.py:639-652 (no backend, no "
            "counter buffer) and :722 (FP8 KV: query quantized to FP8)",
            "flashinfer 0.6.12 (0.5.15's pin) flashinfer/mla/_core.py:1169-1172 ('auto' -> "
            "'xqa' unless compute capability 10.x) and :1180-1192 (XQA MLA: fp8 or bf16 on SM12x)",
        ),
        fp8_native=True,
        caveat="XQA decode: FP8 query x FP8 KV tensor-core math (no GPU measurement here: "
        "XQA MLA is SM12x-only, the H200 cannot run it)",
        note="decode dispatches to FlashInfer's XQA MLA kernel on SM120",
    ),
    BackendRow(
        "trtllm_mla", "decode", ("sm120",), ">=0.5.15.post1,<0.5.17", "unverified",
        (
            "sglang 0.5.16 srt/layers/attention/trtllm_mla_backend.py:644-645: the same call as "
            "0.5.15; its FlashInfer pin (0.6.14) not read; 0.5.15.post1 not read",
        ),
        fp8_native=True,
        note="SGLang side as in 0.5.15; the pinned FlashInfer's XQA path was not checked",
    ),
    BackendRow(
        "trtllm_mla", "decode", ("sm120",), ">=0.5.17,<0.5.19", "unverified",
        (
            "sglang 0.5.17 srt/layers/attention/trtllm_mla_backend.py:856 and 0.5.18 :875 pass "
            "multi_ctas_kv_counter_buffer as 0.5.19 does; their FlashInfer pins (0.6.15.post1, "
            "0.6.17) not read",
        ),
        fp8_native=True,
        note="likely the 0.5.19 crash; the pinned FlashInfer not checked",
    ),
    BackendRow(
        "trtllm_mla", "decode", ("sm120",), "==0.5.19", "crash",
        (
            "sglang 0.5.19 srt/layers/attention/trtllm_mla_backend.py:1054-1073 (counter buffer "
            "passed with no backend argument)",
            "flashinfer 0.6.18 (0.5.19's pin) flashinfer/mla/_core.py:3833-3844 ('auto' -> "
            "'xqa' unless compute capability 10.x; XQA refuses the counter buffer)",
        ),
        fp8_native=True,
        log_line=(
            "ValueError: multi_ctas_kv_counter_buffer is only supported by the trtllm-gen "
            "backend"
        ),
        crash_kind="xqa_multi_ctas_buffer",
        note="SGLang hands the trtllm-gen counter buffer to FlashInfer's XQA path",
    ),
    BackendRow(
        "trtllm_mla", "decode", ("sm120",), "==0.5.21", "crash",
        (
            "sglang 0.5.21 srt/layers/attention/trtllm_mla_backend.py:1076-1095 (counter buffer "
            "passed with no backend argument)",
            "flashinfer 0.6.18 (0.5.21's pin) flashinfer/mla/_core.py:3833-3844",
        ),
        fp8_native=True,
        log_line=(
            "ValueError: multi_ctas_kv_counter_buffer is only supported by the trtllm-gen "
            "backend"
        ),
        crash_kind="xqa_multi_ctas_buffer",
        note="SGLang hands the trtllm-gen counter buffer to FlashInfer's XQA path",
    ),
    BackendRow(
        "trtllm_mla", "decode", ("sm120",), ">=0.5.19,<0.5.23", "unverified",
        (
            "not read: sglang 0.5.20, 0.5.22 (their neighbours crash: 0.5.19 "
            "srt/layers/attention/trtllm_mla_backend.py:1054-1073, 0.5.21 :1076-1095)",
        ),
        fp8_native=True,
        note="between releases that crash; not read",
    ),
    BackendRow(
        "trtllm_mla", "decode", ("sm120",), ">=0.5.23", "crash",
        (
            "sglang 0.5.23 srt/layers/attention/trtllm_mla_backend.py:280-286 (counter buffer "
            "always made) and :1036-1041 (passed when backend == 'trtllm-gen', with no "
            "backend argument)",
            "flashinfer 0.7.2 flashinfer/mla/_core.py:4205-4210 ('auto' -> 'xqa' unless "
            "compute capability 10.x) and :4291-4295 (XQA refuses the counter buffer)",
            "related: https://github.com/sgl-project/sglang/issues/40558 and "
            "https://github.com/flashinfer-ai/flashinfer/issues/5445 (SM120 decode autotune "
            "'Tuning trtllm_batch_decode_mla' -> TllmGenFmhaRunner Unsupported architecture, "
            "DSA trtllm decode, FlashInfer 0.6.18)",
        ),
        fp8_native=True,
        log_line=(
            "ValueError: multi_ctas_kv_counter_buffer is only supported by the trtllm-gen "
            "backend"
        ),
        crash_kind="xqa_multi_ctas_buffer",
        note="SGLang hands the trtllm-gen counter buffer to FlashInfer's XQA path",
    ),
    # --- cutlass_mla: SM100 CUTLASS kernel for decode; prefill is FlashInfer MLA's ------
    BackendRow(
        "cutlass_mla", "prefill", ARCHS, ">=0.5.9,<0.5.20", "runs",
        ("sglang 0.5.9 srt/layers/attention/cutlass_mla_backend.py:48 "
         "(CutlassMLABackend(FlashInferMLAAttnBackend): prefill is FlashInfer's)",),
        fp8_native=False,
    ),
    BackendRow(
        "cutlass_mla", "decode", ("sm100",), ">=0.5.9,<0.5.20", "runs",
        ("https://github.com/sgl-project/sglang/issues/5390",), fp8_native=True,
    ),
    BackendRow(
        "cutlass_mla", "decode", ("sm90", "sm120"), ">=0.5.9,<0.5.20", "crash",
        (
            "https://github.com/sgl-project/sglang/issues/5390 ('cutlass_mla_decode kernel "
            "requires blackwell')",
            "https://github.com/flashinfer-ai/flashinfer/issues/3669 (SM10x/11x builds only)",
        ),
        fp8_native=True,
        log_line="torch.AcceleratorError: CUDA error: no kernel image is available for "
        "execution on the device",
        crash_kind="no_kernel_image",
        note="tcgen05 MLA kernel, SM100 only (exact SM120 message not found: modelled)",
    ),
)
# fmt: on


def roles_of(values: dict[str, str | None]) -> dict[str, tuple[str, str]]:
    """``role -> (backend, flag)`` from the attention flags that parsed: the per-role flag
    wins over ``--attention-backend`` (sglang 0.5.9 server_args.py:1776-1779 and the
    hybrid backend in model_runner). Roles with no backend are left out."""
    general = values.get("attention_backend")
    out: dict[str, tuple[str, str]] = {}
    for role in ("prefill", "decode"):
        own = values.get(f"{role}_attention_backend")
        if own:
            out[role] = (own, f"--{role}-attention-backend")
        elif general:
            out[role] = (general, "--attention-backend")
    return out
