"""The attention backend the simulator runs when a profile names none follows SGLang 0.5.9's
ServerArgs for GLM-5, a DeepSeek-sparse-attention model: ``nsa`` (server_args.py:1199-1213),
logged as SGLang logs it; a lone prefill or decode backend leaves the generic MLA default
(:1782-1837: triton on SM120, flashinfer on SM100, fa3 on Hopper). Before, every unset
backend was flashinfer, whose whole-pool FP8 cast made a default GLM-5 server 5x slower than
the backend SGLang would really run.

The nsa cost term is an estimate (no NSA measurement exists): the bytes DSA reads, index keys
for every token and the top-k rows; checked here against its own definition and its shape
(linear in context below top-k, index keys only beyond), not against copied numbers."""

from __future__ import annotations

import pytest

from glmserve.simulator import costmodel as cm
from glmserve.simulator import options

ARGV = ["--model-path", "glm-5", "--tp-size", "8"]


def parse(*extra: str, arch: str = "sm120") -> options.SimOptions:
    return options.parse([*ARGV, "--sim-gpu-arch", arch, *extra], env={})


@pytest.mark.parametrize("arch", ["sm90", "sm100", "sm120"])
def test_no_attention_flag_is_nsa_with_its_log_line(arch):
    o = parse(arch=arch)
    assert o.shape.attention_backend == "nsa" and o.shape.decode_attention == "nsa"
    assert o.server_args()["attention_backend"] == "nsa"
    lines = cm.backend_log_lines(None, None, None, arch)
    assert lines == ["Use nsa attention backend for DeepSeek with DSA."]


@pytest.mark.parametrize(
    ("arch", "default"), [("sm90", "fa3"), ("sm100", "flashinfer"), ("sm120", "triton")]
)
def test_a_lone_decode_backend_leaves_the_generic_mla_default(arch, default):
    o = parse("--prefill-attention-backend", "flashinfer",
              "--decode-attention-backend", "trtllm_mla", arch=arch)  # fmt: skip
    assert o.shape.attention_backend == default
    assert o.shape.decode_attention == "trtllm_mla"  # what decode runs is unchanged
    assert cm.backend_log_lines(None, "flashinfer", "trtllm_mla", arch) == [
        f"Attention backend not specified. Use {default} backend by default."
    ]


def test_equal_prefill_and_decode_backends_and_an_explicit_one_are_kept():
    o = parse("--prefill-attention-backend", "triton", "--decode-attention-backend", "triton")
    assert o.shape.attention_backend == "triton"
    assert cm.backend_log_lines(None, "triton", "triton", "sm120") == []
    for name in ("flashinfer", "trtllm_mla", "triton", "cutlass_mla"):
        assert parse("--attention-backend", name).shape.attention_backend == name
        assert cm.backend_log_lines(name, None, None, "sm120") == []


def test_the_profiles_keep_the_backend_they_name():
    """configs/profiles name their backends; only the base profile (never launched alone in
    the shipped configs) names none."""
    from glmserve.config.profiles import load_profile

    want = {"flashinfer": "flashinfer", "flashinfer_gtc": "flashinfer", "triton": "triton",
            "trtllm_mla": "trtllm_mla", "cutlass_mla": "cutlass_mla", "mla_fp8": "triton",
            "trtllm_mla_decode": "trtllm_mla", "glm5-nvfp4-tp8": "nsa"}  # fmt: skip
    for name, decode in want.items():
        spec = load_profile(name)
        o = options.parse(list(spec.argv), {"GLMSERVE_PATCHES": ",".join(spec.patches)})
        assert o.shape.decode_attention == decode, name


def test_nsa_reads_index_keys_for_every_token_and_rows_for_the_top_k():
    model = cm.CostModel()
    shape = parse().shape
    bw = model.bandwidth_gbps * 1e9 * model.kv_bw_eff

    def nsa(batch: int, seq: int) -> float:
        return cm.step_terms(model, shape, batch, batch * seq)["kv_read"]

    for batch, seq in ((1, 512), (1, 2048), (8, 8192), (64, 32768)):
        per_seq = model.nsa_index_bytes * seq + model.nsa_row_bytes * min(seq, model.nsa_topk)
        assert nsa(batch, seq) == pytest.approx(batch * per_seq * model.layers / bw)
    k = model.nsa_topk
    # below top-k both parts grow with the context, beyond it only the index keys
    below = (nsa(1, k) - nsa(1, k // 2)) / (k // 2)
    above = (nsa(1, 4 * k) - nsa(1, 2 * k)) / (2 * k)
    assert above == pytest.approx(model.nsa_index_bytes * model.layers / bw)
    assert below == pytest.approx(above * (1 + model.nsa_row_bytes / model.nsa_index_bytes))
    # a dense FP8 MLA read of the same context (trtllm_mla) costs more once past top-k
    dense = parse("--attention-backend", "trtllm_mla").shape
    assert cm.step_terms(model, dense, 1, 32768)["kv_read"] > nsa(1, 32768)
    assert cm.cast_mode(shape) == "none" and cm.step_terms(model, shape, 1, 4096)["cast"] == 0
