"""The simulator's cost model: formula terms, calibration to the seeds, patch effect."""

from __future__ import annotations

import pytest

from glmserve.simulator import costmodel as cm
from glmserve.simulator.costmodel import CostModel, ServerShape

SEED = dict(kv_cache_dtype="fp8_e4m3", cuda_graph=False, num_continuous_decode_steps=16)


def tok_s(shape: ServerShape, ctx: int = 1024) -> float:
    return 1.0 / cm.decode_step_s(CostModel(), shape, 1, ctx)


def test_whole_pool_cast_term_is_pool_rows_times_576x3_per_layer_over_bandwidth():
    m = CostModel()
    shape = ServerShape(attention_backend="flashinfer", **SEED)
    pool = cm.pool_tokens(m, shape)
    expected = pool * 576 * 3 * m.layers / (m.bandwidth_gbps * 1e9 * m.cast_bw_eff)
    assert cm.step_terms(m, shape, 1, 100)["cast"] == pytest.approx(expected)
    # DESIGN.md: 495K x 576 x 3 B = 855 MB per layer -> ~37 ms per step at full bandwidth
    assert pool == pytest.approx(495_000, rel=0.01)
    assert expected * m.cast_bw_eff == pytest.approx(0.0372, rel=0.02)


def test_calibration_matches_the_measured_write_ups():
    fi = tok_s(ServerShape(attention_backend="flashinfer", **SEED))
    gtc = tok_s(
        ServerShape(attention_backend="flashinfer", patches=(cm.GATHER_CAST_PATCH,), **SEED)
    )
    trt = tok_s(ServerShape(attention_backend="trtllm_mla", **SEED))
    cut = tok_s(ServerShape(attention_backend="cutlass_mla", **SEED))
    assert 9.5 <= fi <= 11.0  # seeds: ~10.5 tok/s single stream
    assert 13.0 <= gtc <= 14.5  # seeds' gather-then-cast patch: 13.5 tok/s
    assert trt > cut > gtc
    assert 45 <= trt <= 60  # community runs without MTP: ~52 tok/s


def test_patch_only_matters_for_flashinfer_with_fp8():
    patched = (cm.GATHER_CAST_PATCH,)
    assert cm.cast_mode(ServerShape(attention_backend="flashinfer", **SEED)) == "whole_pool"
    assert (
        cm.cast_mode(ServerShape(attention_backend="flashinfer", patches=patched, **SEED))
        == "gather"
    )
    assert cm.cast_mode(ServerShape(attention_backend="trtllm_mla", patches=patched)) == "none"
    bf16 = ServerShape(attention_backend="flashinfer", kv_cache_dtype="bfloat16")
    assert cm.cast_mode(bf16) == "none"
    # a BF16 pool of the same memory holds half the tokens
    fp8 = ServerShape(attention_backend="flashinfer")
    assert cm.pool_tokens(CostModel(), bf16) == pytest.approx(
        cm.pool_tokens(CostModel(), fp8) / 2, abs=1
    )


def test_gather_cost_grows_with_context_but_whole_pool_does_not():
    m = CostModel()
    whole = ServerShape(attention_backend="flashinfer")
    gather = ServerShape(attention_backend="flashinfer", patches=(cm.GATHER_CAST_PATCH,))
    assert cm.step_terms(m, whole, 1, 1_000)["cast"] == cm.step_terms(m, whole, 64, 400_000)["cast"]
    assert (
        cm.step_terms(m, gather, 64, 400_000)["cast"] > cm.step_terms(m, gather, 1, 1_000)["cast"]
    )


def test_step_time_grows_with_batch_and_context_and_knobs_move_it():
    m = CostModel()
    s = ServerShape(attention_backend="trtllm_mla")
    assert cm.decode_step_s(m, s, 64, 64_000) > cm.decode_step_s(m, s, 1, 64_000)
    assert cm.decode_step_s(m, s, 8, 400_000) > cm.decode_step_s(m, s, 8, 8_000)
    graphs = ServerShape(attention_backend="trtllm_mla", cuda_graph=True)
    assert cm.decode_step_s(m, graphs, 1, 1) < cm.decode_step_s(m, s, 1, 1)
    m2 = CostModel(bandwidth_gbps=m.bandwidth_gbps / 2)
    assert cm.step_terms(m2, s, 1, 1)["weights"] == pytest.approx(
        2 * cm.step_terms(m, s, 1, 1)["weights"]
    )
    assert cm.pool_tokens(m, ServerShape(mem_fraction_static=0.85)) < cm.pool_tokens(
        m, ServerShape()
    )


def test_predict_batch_run_is_the_sum_of_its_steps():
    m = CostModel()
    s = ServerShape(attention_backend="flashinfer")
    p = cm.predict_batch_run(m, s, num_requests=10, input_len=8, output_len=5, max_running=4)
    manual = 0.0
    for wave in (4, 4, 2):
        manual += cm.prefill_step_s(m, s, wave * 8)
        manual += sum(cm.decode_step_s(m, s, wave, wave * (8 + j)) for j in range(1, 5))
    assert p["duration_s"] == pytest.approx(manual)
    assert p["output_throughput"] == pytest.approx(50 / manual)


def test_coerce_field_types():
    assert cm.coerce_field("layers", "61") == 61
    assert cm.coerce_field("bandwidth_gbps", "1500") == 1500.0
    assert cm.coerce_field("backend_overhead_ms", "flashinfer=1,trtllm_mla=2.5") == {
        "flashinfer": 1.0,
        "trtllm_mla": 2.5,
    }
    with pytest.raises(KeyError):
        cm.coerce_field("nope", 1)
    with pytest.raises(ValueError):
        cm.coerce_field("layers", "many")


# --- the flags `glmserve tune` searches (issue 15 item 5) -------------------------------


def test_graphs_cover_batches_up_to_cuda_graph_max_bs_only():
    m = CostModel()
    s = ServerShape(attention_backend="trtllm_mla", cuda_graph=True, cuda_graph_max_bs=8)
    # batch 8 replays a graph; batch 9 runs eagerly and pays the launch overhead again
    eager = cm.step_terms(m, s, 9, 1000)["no_cuda_graph"]
    assert cm.step_terms(m, s, 8, 1000)["no_cuda_graph"] == 0.0
    assert eager == pytest.approx(m.no_cuda_graph_ms / 1e3)


def test_chunked_prefill_splits_a_long_prefill_into_passes():
    m = CostModel()
    small = ServerShape(chunked_prefill_size=512)
    big = ServerShape(chunked_prefill_size=8192)
    assert cm.prefill_chunks(small, 2048) == 4 and cm.prefill_chunks(big, 2048) == 1
    assert cm.prefill_chunks(ServerShape(chunked_prefill_size=-1), 100_000) == 1
    assert cm.prefill_step_s(m, small, 2048) > cm.prefill_step_s(m, big, 2048)


def test_mem_fraction_static_past_what_the_gpu_holds_ooms_at_start():
    m = CostModel()
    ok = ServerShape(mem_fraction_static=0.92, cuda_graph=True)
    assert not cm.startup_oom(m, ok)
    assert cm.startup_oom(m, ServerShape(mem_fraction_static=0.96, cuda_graph=True))
    # the same fraction fits once activations (chunk) and graph buffers (max bs) shrink
    lean = ServerShape(
        mem_fraction_static=0.95, cuda_graph=True, cuda_graph_max_bs=16, chunked_prefill_size=2048
    )
    assert cm.startup_oom(m, ServerShape(mem_fraction_static=0.95, cuda_graph=True))
    assert not cm.startup_oom(m, lean)
    # too little for weights: no KV pool at all
    assert cm.startup_oom(m, ServerShape(mem_fraction_static=0.6))
