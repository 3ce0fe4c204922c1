"""The simulator's text model: deterministic greedy text with defined logprobs, faults that
garble or drift, and the run-to-run variation (pure)."""

from __future__ import annotations

import pytest

from glmserve.errors import SimUsageError
from glmserve.simulator import options
from glmserve.simulator.textmodel import Generation, TextModel, parse_fault, tokenize
from glmserve.simulator.variation import Variation


def greedy(model: TextModel, prompt: str, n: int = 16) -> tuple[list[int], list[float]]:
    g = Generation(model, tokenize(prompt))
    return [g.next() for _ in range(n)], g.logprobs


def test_same_context_same_text_distinct_prompts_differ():
    a1, lp1 = greedy(TextModel(), "The capital of France is")
    a2, lp2 = greedy(TextModel(), "The capital of France is")
    b, _ = greedy(TextModel(), "Write a haiku about spring")
    assert a1 == a2 and lp1 == lp2
    assert a1 != b
    assert all(-0.6 <= x <= 0 for x in lp1)


def test_teacher_forcing_reads_the_same_model():
    m = TextModel()
    prompt = tokenize("Explain photosynthesis in one paragraph.")
    out, lps = greedy(m, "Explain photosynthesis in one paragraph.")
    forced = Generation(m, prompt + out).input_logprobs(len(prompt) - 1)
    assert forced[0] is None  # the prompt's last token: no logprob (SGLang's shift)
    assert forced[1:] == pytest.approx(lps)


def test_garble_and_drift_move_the_reference_tokens_logprobs():
    prompt = tokenize("List the planets")
    out, lps = greedy(TextModel(), "List the planets", 32)

    def excess(fault: str) -> float:
        f = Generation(TextModel(parse_fault(fault)), prompt + out).input_logprobs(len(prompt) - 1)
        return (sum(lps) - sum(f[1:])) / len(out)

    assert excess("garble") > 1.0
    assert 0 < excess("drift=0.02") < 0.05


def test_fault_selector_and_bad_values():
    f = parse_fault("garble=0.3@triton/fp8_e4m3")
    assert f.applies("triton", "fp8_e4m3") and not f.applies("flashinfer", "fp8_e4m3")
    assert parse_fault("drift").applies("anything", "bfloat16")
    for bad in ("scramble", "garble=2", "drift=x", "garble=0"):
        with pytest.raises(SimUsageError, match="--sim-output-fault"):
            parse_fault(bad)


def test_bad_output_fault_is_a_usage_error_at_parse():
    with pytest.raises(SimUsageError, match="--sim-output-fault"):
        options.parse(["--model-path", "m", "--sim-output-fault", "nope"], env={})


def test_variation_is_seeded_and_changes_per_run():
    a, b = Variation(0.05, 0.0, seed=3), Variation(0.05, 0.0, seed=3)
    fa = [a.step()]
    fb = [b.step()]
    for v, out in ((a, fa), (b, fb)):
        v.idle(0.5)  # a new run
        out.append(v.step())
        v.idle(0.01)  # too short: the same run
        out.append(v.step())
    assert fa == fb
    assert fa[0] != fa[1] and fa[1] == fa[2]
    assert Variation().step() == 1.0
