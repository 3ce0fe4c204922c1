"""How many tokens a text prompt is: with the model's tokenizer when there is one locally.

SGLang 0.5.9 tokenizes text with the server's tokenizer (``tokenizer_manager._tokenize_texts``:
``self.tokenizer(texts)["input_ids"]``; chat messages through
``tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)`` in
``entrypoints/openai/serving_chat.py``), loaded from ``--tokenizer-path`` (default
``--model-path``). The simulator does the same when that path is a local directory
(``AutoTokenizer.from_pretrained(path, local_files_only=True)``: never the network), so a
``bench_serving`` prompt of N random token ids, decoded to text by the client, is counted as
SGLang counts it, not as ``bytes / 4`` (issue 10 #9: 64 ids counted 111). Without one it
falls back to ~4 bytes per token and says so in ``/sim/config`` (``prompt_tokens``).
"""

from __future__ import annotations

import os
from typing import Any

BYTES_PER_TOKEN = 4
CHAT_TOKENS_PER_MESSAGE = 4  # role and template tokens per message, without a tokenizer


def approx_tokens(text: str) -> int:
    """Prompt length for text input without a tokenizer: ~4 bytes per token."""
    return max(1, len(text.encode()) // BYTES_PER_TOKEN)


class PromptCounter:
    """Counts text and chat prompts; ``describe()`` is what ``/sim/config`` reports."""

    def __init__(self, tokenizer: Any = None, path: str | None = None, why: str = "") -> None:
        self.tokenizer = tokenizer
        self.path = path
        self.why = why  # why there is no tokenizer, when there is none

    def text(self, text: str) -> int:
        if self.tokenizer is None:
            return approx_tokens(text)
        return max(1, len(self.tokenizer(text)["input_ids"]))

    def messages(self, messages: list[Any]) -> int:
        if self.tokenizer is not None and getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(
                messages, tokenize=True, add_generation_prompt=True
            )
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
            return max(1, len(ids))
        total = 0
        for m in messages or []:
            content = m.get("content") if isinstance(m, dict) else m
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            total += self.text(str(content or "")) + CHAT_TOKENS_PER_MESSAGE
        return max(1, total + 2)

    def describe(self) -> dict[str, Any]:
        if self.tokenizer is not None:
            return {"tokenizer": self.path, "rule": f"text is tokenized with {self.path}"}
        return {
            "tokenizer": None,
            "rule": f"text counts as max(1, UTF-8 bytes // {BYTES_PER_TOKEN}); chat adds "
            f"{CHAT_TOKENS_PER_MESSAGE} per message + 2 ({self.why}); token ids count exactly",
        }


def load_counter(tokenizer_path: str | None, model_path: str | None) -> PromptCounter:
    """The counter for a server started with these paths (the tokenizer path wins, as in
    SGLang); a tokenizer is loaded only from a local directory, never downloaded."""
    path = tokenizer_path or model_path
    if not path or not os.path.isdir(path):
        return PromptCounter(why=f"no local tokenizer directory at {path!r}")
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # any load failure: fall back, and say why
        return PromptCounter(why=f"tokenizer at {path} not loadable: {type(exc).__name__}")
    return PromptCounter(tok, path)
