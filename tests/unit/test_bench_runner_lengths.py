"""Issue 14: ``--random-range-ratio`` follows bench_serving's default (0.0) where the knob has its
meaning (random prompts at ``--request-rate``) while decode, concurrency, the rate sweep and
dataset prompts keep fixed lengths; the result records the ratio actually used either way."""

from __future__ import annotations

import pytest

from glmserve.bench.runner import prepare_requests
from glmserve.bench.settings import BenchSettings


def shapes(settings: BenchSettings) -> tuple[list[int], list[int]]:
    """(input lengths, output lengths) of the requests the bench would send."""
    reqs = prepare_requests(settings, "default")
    ins = [len(r.body["input_ids"]) for r in reqs]
    outs = [r.body["sampling_params"]["max_new_tokens"] for r in reqs]
    return ins, outs


def test_open_loop_random_prompts_use_bench_servings_default_ratio():
    s = BenchSettings("http://x", mode="rate", request_rate=[20.0], input_len=64, output_len=32,
                      num_prompts=200)  # fmt: skip
    ins, outs = shapes(s)
    # bench_serving's compute_random_lens with ratio 0.0: uniform in [1, len]
    assert min(ins) >= 1 and max(ins) <= 64 and len(set(ins)) > 20
    assert min(outs) >= 1 and max(outs) <= 32 and len(set(outs)) > 10
    assert min(ins) < 64 // 4  # reaches far below the old fixed length
    assert s.to_dict()["random_range_ratio"] == 0.0


@pytest.mark.parametrize(
    "kw",
    [
        {"mode": "decode"},
        {"mode": "concurrency", "concurrency": [4, 16]},
        {"mode": "rate", "rate_sweep": 3},  # its saturation rule compares one request shape
    ],
)
def test_fixed_length_modes_state_ratio_one(kw):
    s = BenchSettings("http://x", input_len=64, output_len=32, **kw)
    ins, outs = shapes(s)
    assert set(ins) == {64} and set(outs) == {32}
    assert s.to_dict()["random_range_ratio"] == 1.0


def test_dataset_prompts_keep_a_fixed_output_length(tmp_path):
    data = tmp_path / "prompts.txt"
    data.write_text("one prompt\nanother prompt\n")
    s = BenchSettings("http://x", mode="rate", request_rate=[5.0], output_len=32,
                      dataset_path=str(data), num_prompts=20)  # fmt: skip
    reqs = prepare_requests(s, "default")
    assert {r.body["sampling_params"]["max_new_tokens"] for r in reqs} == {32}
    assert s.to_dict()["random_range_ratio"] == 1.0


@pytest.mark.parametrize("mode", ["decode", "rate"])
def test_an_explicit_ratio_is_used_in_every_mode(mode):
    rate = [5.0] if mode == "rate" else None
    s = BenchSettings("http://x", mode=mode, request_rate=rate, input_len=64, output_len=32,
                      num_prompts=100, random_range_ratio=0.5)  # fmt: skip
    ins, outs = shapes(s)
    assert min(ins) >= 32 and len(set(ins)) > 5 and min(outs) >= 16
    assert s.to_dict()["random_range_ratio"] == 0.5
    fixed = BenchSettings("http://x", mode=mode, request_rate=rate, input_len=64,
                          num_prompts=10, random_range_ratio=1.0)  # fmt: skip
    assert set(shapes(fixed)[0]) == {64}
