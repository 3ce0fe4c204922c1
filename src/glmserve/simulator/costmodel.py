"""The simulator's timing model: pure functions from a batch to a step time (no I/O).

Why a model and not a replay: the point of the simulator is that clients (bench, watch, sweep)
can be held against a ground truth they could not know otherwise. Every term below is a
bandwidth or latency cost from DESIGN.md's physical picture of GLM-5-NVFP4 at TP8 on RTX PRO
6000 (SM120, 1,792 GB/s); each parameter is overridable (``--sim-<name>`` or ``--sim-config``).

Decode step (one token for each of the B running requests; C = sum of their context lengths)::

    t_decode = fixed_step_ms + sched_overhead_ms
             + (no_cuda_graph_ms            if CUDA graphs are disabled or B > cuda_graph_max_bs)
             + weight_gb * 1e9 / (bw * weight_bw_eff)                       weights, per GPU
             + B * per_seq_us                                               per-sequence cost
             + C * 576 * kv_read_bytes * layers / (bw * kv_bw_eff)          KV read
             + backend_overhead_ms[attention_backend]
             + t_cast
             + t_attn                                                       calibrated backends

    t_attn (decode backend triton; its KV read replaces the generic kv_read term) =
        layers * scale * (triton_layer_us + triton_token_us * waves * L / S
                          + triton_split_us * B * S) / 1e6
        L = C / B (tokens per sequence), S = KV splits the kernel runs with (below),
        waves = ceil(B * S / (triton_programs_per_sm * sm_count)),
        scale = calib_copy_gbps / (bandwidth_gbps * kv_bw_eff)   (H200 -> modelled GPU)

    S: SGLang's per-batch heuristic (sglang 0.5.9 triton_backend.py:182-232 and
    get_num_kv_splits_triton :1207-1250; same in 0.5.23 kernels/ops/attention/metadata.py)
    for B sequences of L tokens: min(ceil(sm_count * max(log2(L / 64), 1) / B), S_max), or
    S_max with SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS. S_max is
    --triton-attention-num-kv-splits (default 8), raised for MLA from 0.5.12 to
    max(flag, min(next_pow2(sm_count), next_pow2(ceil(context_len / 32))))
    (0.5.23 triton_backend.py:83-90, 327-333): see options.triton_max_kv_splits.

    t_attn (runtime patch mla_fp8_decode, decode backend triton or flashinfer, FP8 KV; its
    KV read and flashinfer's cast are replaced by glmserve's FP8-native kernel) =
        layers * scale * (mla_fp8_layer_us + mla_fp8_row_us * C) / 1e6

    t_cast = pool_tokens * 576 * 3 * layers / (bw * cast_bw_eff)        whole-pool FP8->BF16
             when backend is flashinfer and the KV cache is FP8 and GLMSERVE_PATCHES does not
             list flashinfer_mla_gather_cast;
           = layers * gather_layer_us + C * 576 * 3 * layers / (bw * cast_bw_eff)
             when that patch is active (gather the batch's rows, then cast);
           = 0 for FP8-native backends (trtllm_mla, cutlass_mla, flashmla, ...).

    (576 = kv_lora_rank 512 + rope 64; 3 bytes = 1 read as FP8 + 2 written as BF16;
     kv_read_bytes = 2 when flashinfer reads the BF16 copy, else the KV dtype's size.)

Prefill step (the new requests admitted at a step boundary, N prompt tokens in all)::

    t_prefill = ceil(N / chunked_prefill_size) * (fixed_step_ms + weight term
                                                  + (no_cuda_graph_ms if graphs off))
              + N * prefill_us_per_token

Start-up memory (what the GPU must hold outside the static fraction; SGLang's own estimate in
server_args._handle_gpu_memory_settings, sglang 0.5.9 server_args.py:1022-1031, with the
physical coefficients below instead of its conservative 1.5 MB per chunk token)::

    need_gib = (base_mib + act_mib_per_token * max(chunked_prefill_size, 2048)
                + graph_mib_per_bs * cuda_graph_max_bs (graphs on)) / 1024
    (1 - mem_fraction_static) * gpu_mem_gib < need_gib  ->  CUDA OOM at start-up

``auto`` KV dtype resolves to FP8 (as on the seeds' box: NVFP4 checkpoint on Blackwell); an
unset attention backend resolves as SGLang 0.5.9 resolves it for GLM-5, a DeepSeek-sparse-
attention model (``resolve_backend``): ``nsa`` when no attention flag is given. The pool size
is derived from memory: (mem_fraction_static * gpu_mem_gib - weight_mem_gib - reserve_gib) /
(576 * kv bytes * layers), i.e. ~495K tokens at 0.92 with FP8, unless pool_tokens is set.

Triton coefficients (``triton_*``): least-squares fit of issue 23's H200 table (one layer,
16 heads, 495K-row FP8 pool, L2 flushed, median of 20, SGLang 0.5.9's kernel; 12 points:
batch x context 1x8K, 1x32K, 8x8K, 8x32K, 64x7.7K, 256x1.9K at 8 and 64 splits) to
a + b * waves * L / S + d * B * S with H200's 132 SMs and 2 programs per SM (the slot count
that fits best; 1 or 3 per SM fit worse): a = 44.35 us, b = 0.1337 us per token a program
walks, d = 0.0204 us per (sequence, split) (stage-2 reduction and the fp32 partials); max
error 14% (1x8K at 8 splits: 181 vs 159 us), mean 6%. ``calib_copy_gbps``: the same
machine kind's device-to-device copy, 4240 GB/s (benchmarks/results/gather_cast_h200.md).
The fit is at 16 heads; GLM-5 at TP8 has 8 per rank (one head block either way, so the
same program count; fewer FLOPs, so an upper bound). Only the slot count uses the
modelled GPU's SM count; the rest scales by bandwidth.

mla_fp8 coefficients (``mla_fp8_*``): least-squares fit of the shipped kernel config's
per-layer time on the H200 at 8 heads, run 3 (benchmarks/results/mla_fp8_decode/
h200_2026-12-05_run3/bench.json; FP16 operands, 64 rows, 8 warps, and the split budget
default_config ships since run 3: two programs per SM at batch 1, entry ``new``, one from
batch 2, entry ``new_cfg6``; CUDA-graph time at 1x2K/8K/32K, 8x2K/8K and 64x2K, eager at
8x32K, 64x7.7K and 256x1.9K) to a + c * rows: a = 18.8 us, c = 0.498 ns per KV row
(1.2 TB/s on the FP8 bytes). The three >= 150 MB points are within 0.3%; the small shapes
are latency-bound, which a + c * rows does not capture: +24% at 8x2K (27.0 vs 21.7 us in a
graph), -17% at 1x32K (35.1 vs 42.1 us), within 9% elsewhere. (Run 2's fit, 21.4 us +
0.524 ns a row, predates the run-3 split budget; on these points it was 6% slow at the big
shapes and up to 38% at 8x2K.) tests/unit/test_profile_mla_fp8.py refits both from the JSON.

nsa (DeepSeek sparse attention, SGLang's default for GLM-5) replaces the generic KV read with
an **estimate**, not a calibration (no NSA measurement exists here)::

    t_nsa = layers * B * (nsa_index_bytes * L + nsa_row_bytes * min(L, nsa_topk))
            / (bw * kv_bw_eff)                                    L = C / B

the bytes DSA must read per layer and sequence: the lightning indexer scores every cached
token from its FP8 index key (128 bytes + a 4-byte fp32 scale: sglang 0.5.9
mem_cache/memory_pool.py:1730-1797, ``NSATokenToKVPool``, index_head_dim 128, one scale
per 128), then the sparse MLA reads the top-k tokens' rows in NSA's FP8 layout (656 bytes:
512 FP8 + 4 fp32 scales + 64 BF16 rope, layers/attention/nsa/dequant_k_cache.py:55-64);
top-k 2048 is DeepSeek-V3.2's ``index_topk``, assumed for GLM-5. Left out: the indexer's
and the top-k selection's compute and launches (small beside the reads at these lengths,
unmeasured), and NSA's larger rows in the pool size.

Calibration (graphs disabled, as in every seed run): flashinfer+FP8 ~10 tok/s single stream
(64.6 ms of a ~97 ms step is the cast, as the seeds' profile showed), the seeds' gather-then-cast
patch ~13.5-14 tok/s, trtllm_mla ~52 tok/s (community runs without MTP).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

GATHER_CAST_PATCH = "flashinfer_mla_gather_cast"
MLA_FP8_PATCH = "mla_fp8_decode"
MLA_FP8_BACKENDS = frozenset({"triton", "flashinfer"})  # the backends the patch changes
KV_ROW_ELEMS = 576  # kv_lora_rank (512) + qk_rope_head_dim (64), GLM-5 / DeepSeek MLA
GIB = 1 << 30

# Backends that read an FP8 pool natively (no cast), vs flashinfer's BF16-only MLA kernel.
FP8_NATIVE_BACKENDS = {"trtllm_mla", "cutlass_mla", "flashmla", "fa3", "fa4", "nsa"}


def _default_backend_overhead() -> dict[str, float]:
    return {
        "flashinfer": 13.2,  # BF16 MLA decode + per-layer plan() without graphs
        "trtllm_mla": 0.0,
        "cutlass_mla": 2.5,
        "flashmla": 1.5,
        "triton": 0.0,  # its kernel time is the calibrated attention term (triton_*)
    }


@dataclass
class CostModel:
    """Every knob of the timing model; field names are the ``--sim-<name>`` options."""

    bandwidth_gbps: float = 1792.0  # RTX PRO 6000 HBM... GDDR7 bandwidth, GB/s
    weight_gb: float = 9.8  # weights read per GPU per step at TP8
    weight_bw_eff: float = 0.70
    layers: int = 78
    fixed_step_ms: float = 4.4  # launches, all-reduce latency, sampling
    sched_overhead_ms: float = 1.0  # scheduler work per step (batch bookkeeping, sampling)
    no_cuda_graph_ms: float = 6.0  # extra launch cost when CUDA graphs are disabled
    per_seq_us: float = 40.0
    kv_bw_eff: float = 0.80
    cast_bw_eff: float = 0.576  # torch elementwise cast: 64.6 ms for the 495K pool (seeds)
    gather_layer_us: float = 520.0  # per-layer cost of the seeds' unfused gather-then-cast
    prefill_us_per_token: float = 60.0
    backend_overhead_ms: dict[str, float] = field(default_factory=_default_backend_overhead)
    gpu_mem_gib: float = 94.97
    weight_mem_gib: float = 52.0
    reserve_gib: float = 14.66  # activations, graphs, NSA indexer cache, fragmentation
    pool_tokens: int = 0  # 0 = derive from memory
    base_mib: float = 1536.0  # non-static memory besides activations/graphs (NCCL, workspace)
    act_mib_per_token: float = 0.5  # activation memory per chunked-prefill token
    graph_mib_per_bs: float = 2.0  # CUDA graph buffers per captured batch size
    context_len: int = 202752
    sm_count: int = 188  # RTX PRO 6000 Blackwell: 188 SMs (SGLang's device_core_count)
    attn_heads: int = 8  # GLM-5: 64 attention heads over TP 8 (num_attention_heads)
    calib_copy_gbps: float = 4240.0  # H200 D2D copy, gather_cast_h200.md (2026-11-30)
    triton_layer_us: float = 44.35  # fit of issue 23's H200 table (see module docstring)
    triton_token_us: float = 0.1337
    triton_split_us: float = 0.0204
    triton_programs_per_sm: int = 2
    mla_fp8_layer_us: float = 18.8  # mla_fp8_decode kernel, H200 run-3 fit (module docstring)
    mla_fp8_row_us: float = 0.000498
    nsa_topk: int = 2048  # nsa estimate (module docstring): tokens the sparse MLA reads
    nsa_index_bytes: float = 132.0  # indexer key per token and layer (FP8 128 + fp32 scale)
    nsa_row_bytes: float = 656.0  # NSA's FP8 KV row (512 FP8 + 16 B scales + 128 B rope)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


@dataclass(frozen=True)
class ServerShape:
    """The server flags the cost model depends on, already resolved (no 'auto')."""

    attention_backend: str = "flashinfer"
    kv_cache_dtype: str = "fp8_e4m3"  # fp8_e4m3 | fp8_e5m2 | bfloat16 | fp4_e2m1
    cuda_graph: bool = False
    num_continuous_decode_steps: int = 1  # parsed, but no effect (SGLang 0.5.9 never reads it)
    mem_fraction_static: float = 0.92
    patches: tuple[str, ...] = ()
    cuda_graph_max_bs: int = 512  # sglang 0.5.9 server_args.py:976-985 (96 GB GPU, TP >= 4)
    chunked_prefill_size: int = 8192  # same place; <= 0 disables chunking (-1 in SGLang)
    decode_backend: str | None = None  # --decode-attention-backend (None: attention_backend)
    prefill_backend: str | None = None  # --prefill-attention-backend (None: attention_backend)
    max_kv_splits: int = 8  # triton: the most KV splits (after SGLang's MLA cap)
    static_kv_splits: bool = False  # SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS

    @property
    def decode_attention(self) -> str:
        """The backend decode batches run on (sglang 0.5.9 server_args.py:1776-1779)."""
        return self.decode_backend or self.attention_backend


def resolve_backend(
    backend: str | None,
    prefill: str | None = None,
    decode: str | None = None,
    gpu_arch: str = "sm120",
) -> str:
    """The ``attention_backend`` SGLang 0.5.9's ServerArgs resolves for the simulated model,
    GLM-5 (``GlmMoeDsaForCausalLM``: MLA with DeepSeek sparse attention).

    * No attention flag at all: ``nsa`` (server_args.py:1199-1213,
      ``_handle_model_specific_adjustments``: ``is_deepseek_nsa`` and
      ``is_attention_backend_not_set()``, logging "Use nsa attention backend for DeepSeek
      with DSA."). A non-DSA MLA model (DeepSeek V3/R1) would get trtllm_mla on SM100
      (:1273-1286) and otherwise fall through to the generic default below.
    * ``--prefill-attention-backend`` equal to ``--decode-attention-backend``: that backend
      (:1776-1779).
    * Otherwise, when ``--attention-backend`` is still unset (a prefill or decode backend was
      given): the MLA default of :1782-1837, fa3 on Hopper, flashinfer on SM100, triton
      elsewhere (SM120 included), logging "Attention backend not specified. Use X backend
      by default."
    """
    if backend is None and prefill is None and decode is None:
        return "nsa"
    if prefill is not None and prefill == decode:
        return prefill
    if backend is None:
        return {"sm90": "fa3", "sm100": "flashinfer"}.get(gpu_arch, "triton")
    return backend


def backend_log_lines(
    backend: str | None, prefill: str | None, decode: str | None, gpu_arch: str
) -> list[str]:
    """What SGLang 0.5.9's launcher logs (info) about that choice, before ``server_args=``."""
    resolved = resolve_backend(backend, prefill, decode, gpu_arch)
    if backend is None and prefill is None and decode is None:
        return ["Use nsa attention backend for DeepSeek with DSA."]  # server_args.py:1213
    if backend is None and not (prefill is not None and prefill == decode):
        # server_args.py:1835-1837
        return [f"Attention backend not specified. Use {resolved} backend by default."]
    return []


def resolve_kv_dtype(kv_cache_dtype: str | None) -> str:
    """``auto`` resolves to FP8 e4m3 for the NVFP4 checkpoint on Blackwell (seeds' box)."""
    if kv_cache_dtype in (None, "auto", "fp8_e4m3"):
        return "fp8_e4m3"
    if kv_cache_dtype in ("bf16", "bfloat16", "float16", "fp16"):
        return "bfloat16"
    return kv_cache_dtype


def kv_bytes_per_elem(kv_dtype: str) -> float:
    if kv_dtype.startswith("fp8"):
        return 1.0
    if kv_dtype.startswith("fp4"):
        return 0.5625  # 4 bits + scales
    return 2.0


def is_fp8(kv_dtype: str) -> bool:
    return kv_dtype.startswith("fp8")


def pool_tokens(model: CostModel, shape: ServerShape) -> int:
    """KV pool size (#tokens), as SGLang derives it from mem-fraction-static."""
    if model.pool_tokens > 0:
        return model.pool_tokens
    free_gib = shape.mem_fraction_static * model.gpu_mem_gib - model.weight_mem_gib
    free_gib -= model.reserve_gib
    per_token = KV_ROW_ELEMS * kv_bytes_per_elem(shape.kv_cache_dtype) * model.layers
    return max(0, int(free_gib * GIB / per_token))


def kv_pool_gib(model: CostModel, shape: ServerShape) -> float:
    per_token = KV_ROW_ELEMS * kv_bytes_per_elem(shape.kv_cache_dtype) * model.layers
    return pool_tokens(model, shape) * per_token / GIB


def mla_fp8_kernel(shape: ServerShape) -> bool:
    """Whether decode runs glmserve's FP8-native kernel (patch mla_fp8_decode on an FP8 KV
    cache with the triton or flashinfer backend)."""
    return (
        MLA_FP8_PATCH in shape.patches
        and shape.kv_cache_dtype == "fp8_e4m3"
        and shape.decode_attention in MLA_FP8_BACKENDS
    )


def cast_mode(shape: ServerShape) -> str:
    """'whole_pool' | 'gather' | 'none': which FP8->BF16 cast the backend pays each step."""
    if shape.decode_attention != "flashinfer" or not is_fp8(shape.kv_cache_dtype):
        return "none"
    if mla_fp8_kernel(shape):
        return "none"
    return "gather" if GATHER_CAST_PATCH in shape.patches else "whole_pool"


def graph_runs(shape: ServerShape, batch: int) -> bool:
    """A decode batch replays a captured CUDA graph only up to ``cuda_graph_max_bs``; a larger
    one runs eagerly (sglang 0.5.9 cuda_graph_runner.py:399-404, ``can_run``)."""
    return shape.cuda_graph and batch <= shape.cuda_graph_max_bs


def startup_need_gib(model: CostModel, shape: ServerShape) -> float:
    """GiB the server needs outside ``mem_fraction_static`` (activations + graph buffers)."""
    mib = model.base_mib + model.act_mib_per_token * max(shape.chunked_prefill_size, 2048)
    if shape.cuda_graph:
        mib += model.graph_mib_per_bs * shape.cuda_graph_max_bs
    return mib / 1024


def startup_oom(model: CostModel, shape: ServerShape) -> bool:
    """True when the modelled GPU cannot start this shape: the static fraction leaves less
    than the activations and graph buffers need (CUDA OOM at graph capture, or at the
    warmup forward with graphs off), or no KV pool at all (sglang 0.5.9
    model_runner_kv_cache_mixin.py:415 'Not enough memory')."""
    left = (1.0 - shape.mem_fraction_static) * model.gpu_mem_gib
    return left < startup_need_gib(model, shape) or pool_tokens(model, shape) <= 0


def _bw(model: CostModel, eff: float) -> float:
    return model.bandwidth_gbps * 1e9 * eff


CALIBRATED_DECODE = frozenset({"triton"})  # backends with a measured decode-attention term


def calib_scale(model: CostModel) -> float:
    """H200-measured kernel time -> modelled GPU: measured copy bandwidth over the modelled
    GPU's usable bandwidth (the same ``kv_bw_eff`` the generic KV read uses)."""
    return model.calib_copy_gbps / (model.bandwidth_gbps * model.kv_bw_eff)


def triton_kv_splits(model: CostModel, shape: ServerShape, batch: int, seq_len: int) -> int:
    """KV splits SGLang's Triton decode runs ``batch`` sequences of ``seq_len`` tokens with
    (get_num_kv_splits_triton, sglang 0.5.9 triton_backend.py:1207-1250, for equal lengths:
    one head block per sequence while heads <= 16)."""
    cap = max(1, shape.max_kv_splits)
    if shape.static_kv_splits:
        return cap
    ext = int(model.sm_count * max(math.log2(max(seq_len, 1) / 64.0), 1.0))
    grid = max(1, batch) * -(-model.attn_heads // min(16, max(1, model.attn_heads)))
    splits2 = min(-(-ext // grid), cap)
    chunk = -(-max(seq_len, 1) // max(1, splits2))
    return max(1, -(-max(seq_len, 1) // chunk))


def triton_layer_us(
    model: CostModel, batch: int, seq_len: int, splits: int, sm_count: int
) -> float:
    """One layer's Triton MLA decode, in microseconds of the calibration GPU (H200) with
    ``sm_count`` SMs' worth of program slots (fit in the module docstring)."""
    slots = max(1, model.triton_programs_per_sm * sm_count)
    programs = max(1, batch) * splits
    waves = -(-programs // slots)
    return (
        model.triton_layer_us
        + model.triton_token_us * waves * seq_len / splits
        + model.triton_split_us * programs
    )


def attention_s(model: CostModel, shape: ServerShape, batch: int, ctx_tokens: int) -> float:
    """Seconds of a calibrated backend's decode attention over all layers (0 otherwise)."""
    if batch <= 0:
        return 0.0
    if mla_fp8_kernel(shape):
        per_layer = model.mla_fp8_layer_us + model.mla_fp8_row_us * ctx_tokens
        return model.layers * per_layer * calib_scale(model) / 1e6
    if shape.decode_attention not in CALIBRATED_DECODE:
        return 0.0
    seq_len = max(1, ctx_tokens // batch)
    splits = triton_kv_splits(model, shape, batch, seq_len)
    per_layer = triton_layer_us(model, batch, seq_len, splits, model.sm_count)
    return model.layers * per_layer * calib_scale(model) / 1e6


def nsa_read_s(model: CostModel, batch: int, ctx_tokens: int) -> float:
    """Seconds of DeepSeek sparse attention's reads over all layers (an estimate: the index
    keys of every cached token, then the top-k rows; module docstring)."""
    if batch <= 0:
        return 0.0
    seq_len = ctx_tokens / batch
    per_seq = model.nsa_index_bytes * seq_len + model.nsa_row_bytes * min(
        seq_len, float(model.nsa_topk)
    )
    return batch * per_seq * model.layers / _bw(model, model.kv_bw_eff)


def step_terms(model: CostModel, shape: ServerShape, batch: int, ctx_tokens: int) -> dict:
    """Each term of one decode step, in seconds (the sum is the step time)."""
    mode = cast_mode(shape)
    # flashinfer attends over the BF16 copy; FP8-native backends read the pool as stored
    kv_read_bytes = kv_bytes_per_elem(shape.kv_cache_dtype) if mode == "none" else 2.0
    terms = {
        "fixed": (model.fixed_step_ms + model.sched_overhead_ms) / 1e3,
        "no_cuda_graph": 0.0 if graph_runs(shape, batch) else model.no_cuda_graph_ms / 1e3,
        "weights": model.weight_gb * 1e9 / _bw(model, model.weight_bw_eff),
        "per_seq": batch * model.per_seq_us / 1e6,
        "kv_read": 0.0
        if shape.decode_attention in CALIBRATED_DECODE or mla_fp8_kernel(shape)
        else nsa_read_s(model, batch, ctx_tokens)
        if shape.decode_attention == "nsa"
        else ctx_tokens * KV_ROW_ELEMS * kv_read_bytes * model.layers / _bw(model, model.kv_bw_eff),
        "backend": model.backend_overhead_ms.get(shape.decode_attention, 0.0) / 1e3,
        "cast": 0.0,
        "attention": attention_s(model, shape, batch, ctx_tokens),
    }
    cast_bytes_per_row = KV_ROW_ELEMS * 3 * model.layers
    if mode == "whole_pool":
        terms["cast"] = (
            pool_tokens(model, shape) * cast_bytes_per_row / _bw(model, model.cast_bw_eff)
        )
    elif mode == "gather":
        terms["cast"] = model.layers * model.gather_layer_us / 1e6 + ctx_tokens * (
            cast_bytes_per_row
        ) / _bw(model, model.cast_bw_eff)
    return terms


def decode_step_s(model: CostModel, shape: ServerShape, batch: int, ctx_tokens: int) -> float:
    """Seconds one decode step takes with ``batch`` requests holding ``ctx_tokens`` in all."""
    return sum(step_terms(model, shape, batch, ctx_tokens).values())


def prefill_chunks(shape: ServerShape, new_tokens: int) -> int:
    """Forward passes a prefill of ``new_tokens`` takes: SGLang's PrefillAdder splits it into
    chunks of ``chunked_prefill_size`` (sglang 0.5.9 schedule_policy.py:394-401, 505;
    scheduler.py:2021-2030), run back to back before decoding resumes."""
    chunk = shape.chunked_prefill_size
    if chunk <= 0:
        return 1
    return max(1, -(-new_tokens // chunk))


def prefill_step_s(model: CostModel, shape: ServerShape, new_tokens: int) -> float:
    """Seconds the prefill of ``new_tokens`` prompt tokens takes (all of its chunks)."""
    base = model.fixed_step_ms / 1e3 + model.weight_gb * 1e9 / _bw(model, model.weight_bw_eff)
    if not shape.cuda_graph:
        base += model.no_cuda_graph_ms / 1e3
    return prefill_chunks(shape, new_tokens) * base + new_tokens * model.prefill_us_per_token / 1e6


def predict_batch_run(
    model: CostModel,
    shape: ServerShape,
    num_requests: int,
    input_len: int,
    output_len: int,
    max_running: int,
) -> dict[str, float]:
    """Predicted wall time of ``num_requests`` identical requests that all arrive at t=0.

    Waves of up to ``max_running`` requests: one prefill step (first token), then
    ``output_len - 1`` decode steps whose context grows by one token per request per step.
    This is what bench_serving with ``--request-rate inf`` exercises.
    """
    total = 0.0
    left = num_requests
    while left > 0:
        wave = min(left, max_running)
        total += prefill_step_s(model, shape, wave * input_len)
        for j in range(1, output_len):
            total += decode_step_s(model, shape, wave, wave * (input_len + j))
        left -= wave
    out_tokens = num_requests * output_len
    return {
        "duration_s": total,
        "output_tokens": float(out_tokens),
        "output_throughput": out_tokens / total if total > 0 else 0.0,
    }


def coerce_field(name: str, raw: Any) -> Any:
    """Convert a CLI/YAML value to the type of CostModel field ``name`` (ValueError if bad)."""
    by_name = {f.name: f for f in fields(CostModel)}
    if name not in by_name:
        raise KeyError(name)
    default = getattr(CostModel(), name)
    if isinstance(default, dict):
        if isinstance(raw, dict):
            return {str(k): float(v) for k, v in raw.items()}
        out: dict[str, float] = {}
        for part in str(raw).split(","):
            key, _, val = part.partition("=")
            out[key.strip()] = float(val)
        if any(not math.isfinite(v) or v < 0 for v in out.values()):
            raise ValueError(f"{name}: expected finite numbers >= 0, got {raw!r}")
        return out
    if isinstance(default, bool):
        return str(raw).lower() in ("1", "true", "yes")
    if isinstance(default, dict):  # pragma: no cover (handled above)
        return raw
    value: float = int(raw) if isinstance(default, int) else float(raw)
    # Every field is a size, a time or a rate: NaN or inf would run (a bench then reported
    # 68,498 tok/s off a NaN speed in an audit), and a zero bandwidth or efficiency divides.
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}: expected a finite number >= 0, got {raw!r}")
    if value == 0 and name in POSITIVE_FIELDS:
        raise ValueError(f"{name}: must be > 0")
    return value


# Fields a step time divides by, or that size what must exist.
POSITIVE_FIELDS = frozenset(
    {"bandwidth_gbps", "weight_bw_eff", "kv_bw_eff", "cast_bw_eff", "layers", "gpu_mem_gib",
     "context_len", "sm_count", "attn_heads", "calib_copy_gbps", "triton_programs_per_sm"}
)  # fmt: skip
