"""SGLang's ``SamplingParams`` checks, applied to a request's sampling parameters.

SGLang builds ``SamplingParams(**sampling_params)`` for every request and calls ``verify``
(0.5.9 ``managers/tokenizer_manager.py:894-913``, after the context-length check of
``_validate_one_request`` :751-790); its ``ValueError`` becomes the answer: HTTP 400
``{"error": {"message": ...}}`` for ``/generate`` without ``stream``
(``entrypoints/http_server.py:675-683``, ``_create_error_response`` :1636-1639), and with
``stream`` a 200 whose one event is that error, then ``[DONE]`` (:654-668: the request is
only tokenized once the stream runs). The OpenAI endpoints answer the same message in their
``ErrorResponse`` (``serving_completions.py:362-366`` streamed, 400 otherwise).

Rules by release (messages are SGLang's, ``f"{value}"`` as Python prints it):

* 0.5.9 ``srt/sampling/sampling_params.py``: defaults :40-67 (``top_k`` -1), the special cases
  :97-103 (temperature in [0, 1e-6) means greedy: ``top_k`` 1; ``top_k`` -1 means the whole
  vocabulary), ``verify`` :105-161 (temperature >= 0, top_p in (0, 1], min_p in [0, 1],
  top_k >= 1, frequency/presence penalty in [-2, 2], repetition_penalty in [0, 2],
  min_new_tokens >= 0, max_new_tokens >= 0 and >= min_new_tokens, logit_bias keys in
  [0, vocab), one grammar of regex/json_schema/ebnf).
* 0.5.23 (same file): ``__post_init__`` :191-250 (a null value of a non-optional field means
  its default; an empty grammar string means unset), ``verify`` :252-330: temperature also
  finite, repetition_penalty in (0, 2], beam_width >= 1, sampling_seed an integer within
  int64, structural_tag is a grammar too. Releases between 0.5.9 and 0.5.23 were not read:
  the simulator applies 0.5.23's rules from 0.5.23 on and 0.5.9's below.

Not modelled: an unknown key (SGLang's constructor raises TypeError: a 500) and values of
the wrong JSON type (a TypeError inside ``verify``: a 500, or a cut stream); the simulator
answers both with its handler error (500) instead.
"""

from __future__ import annotations

import math
from typing import Any

SAMPLING_EPS = 1e-6  # _SAMPLING_EPS
TOP_K_ALL = 1 << 30
NEW_RULES = (0, 5, 23)
DEFAULTS: dict[str, Any] = {
    "max_new_tokens": 128, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
    "frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
    "min_new_tokens": 0,
}  # fmt: skip


def _version(v: str) -> tuple[int, ...]:
    parts = []
    for p in v.split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check(params: dict[str, Any], vocab_size: int, sglang_version: str = "0.5.9") -> str | None:
    """SGLang's ValueError message for these sampling parameters, or None when they pass.

    TypeError for a value of the wrong type (SGLang's own comparison raises it too)."""
    new = _version(sglang_version) >= NEW_RULES
    p = {**DEFAULTS, **params}
    if new:  # __post_init__: null is the default for every non-optional field
        for key, default in DEFAULTS.items():
            if key != "max_new_tokens" and p[key] is None:
                p[key] = default
        for key in ("json_schema", "regex", "ebnf", "structural_tag"):
            p[key] = p.get(key) or None
    temperature, top_k = p["temperature"], p["top_k"]
    if 0 <= temperature < SAMPLING_EPS:  # greedy
        temperature, top_k = 1.0, 1
    if top_k == -1:
        top_k = TOP_K_ALL
    beam = p.get("beam_width")
    if new and beam is not None and beam < 1:
        return f"beam_width must be at least 1, got {beam}."
    if new and (not math.isfinite(temperature) or temperature < 0.0):
        return f"temperature must be a non-negative finite number, got {temperature}."
    if not new and temperature < 0.0:
        return f"temperature must be non-negative, got {temperature}."
    if not 0.0 < p["top_p"] <= 1.0:
        return f"top_p must be in (0, 1], got {p['top_p']}."
    if not 0.0 <= p["min_p"] <= 1.0:
        return f"min_p must be in [0, 1], got {p['min_p']}."
    if top_k < 1 or top_k == -1:
        return f"top_k must be -1 (disable) or at least 1, got {top_k}."
    for key in ("frequency_penalty", "presence_penalty"):
        if not -2.0 <= p[key] <= 2.0:
            return f"{key} must be in [-2, 2], got {p[key]}."
    rp = p["repetition_penalty"]
    if new and not 0.0 < rp <= 2.0:
        return f"repetition_penalty must be in (0, 2] (1.0 = no penalty), got {rp}."
    if not new and not 0.0 <= rp <= 2.0:
        return f"repetition_penalty must be in [0, 2], got {rp}."
    lo, hi = p["min_new_tokens"], p["max_new_tokens"]
    if not lo >= 0:  # sampling_params.py:132 (`not 0 <= min_new_tokens`)
        return f"min_new_tokens must be in [0, max_new_tokens], got {lo}."
    if hi is not None:
        if hi < 0:
            return f"max_new_tokens must be at least 0, got {hi}."
        if not lo <= hi:
            return f"min_new_tokens must be in [0, max_new_tokens({hi})], got {lo}."
    bias = p.get("logit_bias")
    if bias is not None:
        for token_id in bias:
            try:
                tid = int(token_id)
            except ValueError as exc:  # int("x") is a ValueError: SGLang answers its text
                return str(exc)
            if not 0 <= tid < vocab_size:
                return f"logit_bias must has keys in [0, {vocab_size - 1}], got {token_id}."
    seed = p.get("sampling_seed")
    if new and seed is not None:
        if not isinstance(seed, int):
            return f"sampling_seed must be an integer, got {type(seed).__name__}."
        if not -(2**63) <= seed <= 2**63 - 1:
            return f"sampling_seed must be in [-2**63, 2**63 - 1], got {seed}."
    grammars = ["json_schema", "regex", "ebnf"] + (["structural_tag"] if new else [])
    if sum(p.get(g) is not None for g in grammars) > 1:
        if new:
            return "Only one of json_schema, regex, ebnf, or structural_tag can be set."
        return "Only one of regex, json_schema, or ebnf can be set."
    return None


# OpenAI request fields -> SamplingParams keys (0.5.9 serving_completions.py:130-153;
# serving_chat builds the same keys)
OPENAI_KEYS = {
    "temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
    "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
    "repetition_penalty": "repetition_penalty", "min_tokens": "min_new_tokens",
    "logit_bias": "logit_bias", "regex": "regex", "json_schema": "json_schema",
    "ebnf": "ebnf", "seed": "sampling_seed",
}  # fmt: skip


def from_openai(body: dict[str, Any], max_new: int | None) -> dict[str, Any]:
    """The sampling parameters an OpenAI request body becomes (null fields left out)."""
    out = {sp: body[k] for k, sp in OPENAI_KEYS.items() if body.get(k) is not None}
    out["max_new_tokens"] = max_new
    return out
