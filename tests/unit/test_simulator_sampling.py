"""The simulator's sampling-parameter checks are SGLang's ``SamplingParams.verify``: the
message, per release (0.5.9 and 0.5.23 sampling_params.py, cited in simulator/sampling.py)."""

from __future__ import annotations

import pytest

from glmserve.simulator.sampling import check, from_openai

V = 151552


@pytest.mark.parametrize(
    ("params", "old", "new"),
    [
        ({"max_new_tokens": -3}, "max_new_tokens must be at least 0, got -3.", None),
        ({"max_new_tokens": 8}, None, None),
        ({"max_new_tokens": 0}, None, None),
        ({"temperature": -0.5}, "temperature must be non-negative, got -0.5.",
         "temperature must be a non-negative finite number, got -0.5."),
        ({"temperature": float("inf")}, None,
         "temperature must be a non-negative finite number, got inf."),
        ({"top_p": 0}, "top_p must be in (0, 1], got 0.", None),
        ({"top_p": 1.5}, "top_p must be in (0, 1], got 1.5.", None),
        ({"min_p": -0.1}, "min_p must be in [0, 1], got -0.1.", None),
        ({"top_k": 0}, "top_k must be -1 (disable) or at least 1, got 0.", None),
        ({"top_k": 0, "temperature": 0}, None, None),  # greedy: top_k becomes 1 first
        ({"top_k": -1}, None, None),
        ({"top_k": -2}, "top_k must be -1 (disable) or at least 1, got -2.", None),
        ({"frequency_penalty": 2.5}, "frequency_penalty must be in [-2, 2], got 2.5.", None),
        ({"presence_penalty": -3}, "presence_penalty must be in [-2, 2], got -3.", None),
        ({"repetition_penalty": 0}, None,
         "repetition_penalty must be in (0, 2] (1.0 = no penalty), got 0."),
        ({"repetition_penalty": 3}, "repetition_penalty must be in [0, 2], got 3.",
         "repetition_penalty must be in (0, 2] (1.0 = no penalty), got 3."),
        ({"min_new_tokens": -1}, "min_new_tokens must be in [0, max_new_tokens], got -1.",
         None),
        ({"min_new_tokens": 9, "max_new_tokens": 8},
         "min_new_tokens must be in [0, max_new_tokens(8)], got 9.", None),
        ({"logit_bias": {"200000": 1.0}},
         "logit_bias must has keys in [0, 151551], got 200000.", None),
        ({"regex": "a", "ebnf": "b"}, "Only one of regex, json_schema, or ebnf can be set.",
         "Only one of json_schema, regex, ebnf, or structural_tag can be set."),
        ({"regex": "a", "structural_tag": "t"}, None,
         "Only one of json_schema, regex, ebnf, or structural_tag can be set."),
        ({"beam_width": 0}, None, "beam_width must be at least 1, got 0."),
        ({"sampling_seed": 2**64}, None, "sampling_seed must be in [-2**63, 2**63 - 1], got "
         "18446744073709551616."),
        ({"temperature": None}, TypeError, None),  # 0.5.9: `0 <= None` in __init__
    ],
)  # fmt: skip
def test_messages_match_sglangs_verify(params, old, new):
    if old is TypeError:  # 0.5.23's __post_init__ reads null as the default instead
        with pytest.raises(TypeError):
            check(params, V, "0.5.9")
        assert check(params, V, "0.5.23") is None
        return
    assert check(params, V, "0.5.9") == old
    assert check(params, V, "0.5.23") == (new if new is not None else old)


def test_openai_fields_map_to_sampling_params():
    body = {"max_tokens": 4, "top_p": 0, "min_tokens": 2, "seed": 7, "temperature": None}
    sp = from_openai(body, -3)
    assert sp == {"top_p": 0, "min_new_tokens": 2, "sampling_seed": 7, "max_new_tokens": -3}
    assert check(sp, V) == "top_p must be in (0, 1], got 0."
