"""Prompts and request bodies: random token ids, fixed lengths, ``ignore_eos`` (pure).

Random token ids with ``ignore_eos`` and ``max_new_tokens`` give exact input and output lengths
on any model without a tokenizer. The chat API only takes text, so its prompt is made of short
random words (the server's ``usage.prompt_tokens`` then says how long it really was).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

Api = Literal["native", "openai", "chat"]
APIS: tuple[str, ...] = ("native", "openai", "chat")
# Token ids well inside every modern vocabulary (GLM-5's is ~150k) and clear of special tokens.
TOKEN_ID_RANGE = (1000, 30000)


@dataclass(frozen=True)
class Request:
    """One request to send: endpoint path and JSON body."""

    path: str
    body: dict[str, Any]


def make_prompts(count: int, input_len: int, seed: int) -> list[list[int]]:
    """``count`` prompts of ``input_len`` random token ids, reproducible from ``seed``."""
    rng = random.Random(seed)
    lo, hi = TOKEN_ID_RANGE
    return [[rng.randrange(lo, hi) for _ in range(input_len)] for _ in range(count)]


def prompt_text(ids: list[int]) -> str:
    """A text stand-in for a token-id prompt (chat API): one short word per id."""
    return " ".join(f"w{i % 9973}" for i in ids)


def build_request(api: str, prompt: list[int], output_len: int, model: str) -> Request:
    """The streaming request for ``api`` with exact output length (``ignore_eos``)."""
    if api == "native":
        return Request(
            "/generate",
            {
                "input_ids": prompt,
                "sampling_params": {
                    "max_new_tokens": output_len,
                    "temperature": 0.0,
                    "ignore_eos": True,
                },
                "stream": True,
            },
        )
    common: dict[str, Any] = {
        "model": model,
        "max_tokens": output_len,
        "temperature": 0.0,
        "ignore_eos": True,  # SGLang extension to the OpenAI schema
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if api == "openai":
        return Request("/v1/completions", {**common, "prompt": prompt})
    if api == "chat":
        msgs = [{"role": "user", "content": prompt_text(prompt)}]
        return Request("/v1/chat/completions", {**common, "messages": msgs})
    raise ValueError(f"unknown api {api!r} (choose from {', '.join(APIS)})")
