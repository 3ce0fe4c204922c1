"""The per-backend decode-attention term (issue 23): Triton's calibration against the H200
table, SGLang's KV-split choice per release, and the hybrid prefill/decode shape."""

from __future__ import annotations

import pytest

from glmserve.simulator import costmodel as cm
from glmserve.simulator import options

# issue 23's H200 table: (batch, context, splits) -> us per layer, SGLang 0.5.9's kernel
H200 = {
    (1, 8192, 8): 159, (1, 8192, 64): 68, (1, 32768, 8): 579, (1, 32768, 64): 108,
    (8, 8192, 8): 168, (8, 8192, 64): 80, (8, 32768, 8): 592, (8, 32768, 64): 210,
    (64, 7700, 8): 329, (64, 7700, 64): 396, (256, 1917, 8): 364, (256, 1917, 64): 625,
}  # fmt: skip


def triton(max_splits: int = 64, graphs: bool = True, static: bool = False) -> cm.ServerShape:
    return cm.ServerShape(attention_backend="triton", cuda_graph=graphs,
                          max_kv_splits=max_splits, static_kv_splits=static)  # fmt: skip


@pytest.mark.parametrize("point", sorted(H200))
def test_triton_fit_reproduces_the_h200_table(point):
    b, ctx, splits = point
    got = cm.triton_layer_us(cm.CostModel(), b, ctx, splits, sm_count=132)  # H200: 132 SMs
    assert got == pytest.approx(H200[point], rel=0.15)


def test_the_fit_keeps_the_measured_order_of_splits():
    m = cm.CostModel()
    for b, ctx in {(b, c) for b, c, _ in H200}:
        few, many = (cm.triton_layer_us(m, b, ctx, s, 132) for s in (8, 64))
        assert (few < many) == (H200[(b, ctx, 8)] < H200[(b, ctx, 64)]), (b, ctx)


def test_scale_is_measured_copy_over_modelled_usable_bandwidth():
    m = cm.CostModel()
    assert cm.calib_scale(m) == pytest.approx(4240.0 / (1792.0 * 0.80))
    fast = cm.CostModel(bandwidth_gbps=3584.0)
    s = triton()
    assert cm.attention_s(fast, s, 1, 8192) == pytest.approx(cm.attention_s(m, s, 1, 8192) / 2)


def test_kv_splits_follow_sglang_heuristic_and_the_flag_as_a_cap():
    m = cm.CostModel()  # 188 SMs, 8 heads per rank
    assert cm.triton_kv_splits(m, triton(64), 1, 8192) == 64  # 188 * 7 / 1 > 64: the cap
    assert cm.triton_kv_splits(m, triton(8), 1, 8192) == 8
    # 64 sequences of 4000: ceil(188 * log2(62.5) / 64) = 18 splits whatever the cap above
    assert cm.triton_kv_splits(m, triton(64), 64, 4000) == 18
    assert cm.triton_kv_splits(m, triton(32), 64, 4000) == 18
    assert cm.triton_kv_splits(m, triton(64, static=True), 64, 4000) == 64


def test_best_split_cap_depends_on_the_load():
    m = cm.CostModel()

    def best(batch: int, ctx: int) -> int:
        speed = {s: batch / cm.decode_step_s(m, triton(s), batch, batch * ctx)
                 for s in (8, 16, 32, 64)}  # fmt: skip
        return max(speed, key=speed.get)

    assert best(1, 4000) == 64
    assert best(64, 4000) == 16


def test_sglang_0512_and_later_raise_the_mla_cap():
    assert options.triton_max_kv_splits("0.5.9", 16, 188, 202752) == 16
    assert options.triton_max_kv_splits("0.5.23", 16, 188, 202752) == 256
    assert options.triton_max_kv_splits("0.5.23", 512, 188, 202752) == 512
    assert options.triton_max_kv_splits("0.5.12", 8, 132, 4096) == 128  # min(256, 4096/32)


def test_cuda_graphs_and_splits_change_the_simulated_step():
    m = cm.CostModel()
    on, off = triton(64, graphs=True), triton(64, graphs=False)
    assert cm.decode_step_s(m, off, 1, 8192) - cm.decode_step_s(m, on, 1, 8192) == pytest.approx(
        m.no_cuda_graph_ms / 1e3
    )
    assert cm.decode_step_s(m, triton(64), 1, 32768) < cm.decode_step_s(m, triton(8), 1, 32768)
    terms = cm.step_terms(m, triton(), 8, 8 * 8192)
    assert terms["kv_read"] == 0 and terms["cast"] == 0 and terms["attention"] > 0


def test_hybrid_decode_backend_decides_cast_and_attention():
    hybrid = cm.ServerShape(attention_backend="flashinfer", decode_backend="trtllm_mla",
                            prefill_backend="flashinfer")  # fmt: skip
    assert cm.cast_mode(hybrid) == "none"
    assert cm.cast_mode(cm.ServerShape(attention_backend="flashinfer")) == "whole_pool"
    o = options.parse(["--model", "x", "--prefill-attention-backend", "flashinfer",
                       "--decode-attention-backend", "trtllm_mla"], {})  # fmt: skip
    assert o.shape.decode_attention == "trtllm_mla" and cm.cast_mode(o.shape) == "none"


def test_static_splits_env_and_flag_reach_the_shape():
    argv = ["--model", "x", "--attention-backend", "triton", "--triton-attention-num-kv-splits",
            "32"]  # fmt: skip
    o = options.parse(argv, {"SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS": "1"})
    assert o.shape.max_kv_splits == 32 and o.shape.static_kv_splits
    newer = options.parse([*argv, "--sim-sglang-version", "0.5.23"], {})
    assert newer.shape.max_kv_splits == 256 and not newer.shape.static_kv_splits
