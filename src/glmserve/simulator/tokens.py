"""The simulator's stand-in tokens: a deterministic "sampled" id per request and position, and
a word of text per id (plain ASCII, so a chunk's JSON needs no escaping)."""

from __future__ import annotations

VOCAB_SIZE = 151552  # GLM-5 tokenizer vocabulary
_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "at",
    "this",
    "from",
    "have",
    "or",
    "an",
    "are",
    "not",
    "but",
    "which",
    "one",
    "all",
    "their",
    "there",
    "been",
    "has",
    "more",
    "will",
    "would",
    "can",
    "when",
    "who",
    "about",
    "into",
    "than",
    "model",
    "token",
    "cache",
    "layer",
    "batch",
    "decode",
    "kernel",
    "stream",
    "tensor",
    "graph",
    "memory",
]
TOKEN_TEXT = [" " + _WORDS[i % len(_WORDS)] for i in range(4096)]


def token_id(seed: int, n: int) -> int:
    """Deterministic 'sampled' token n of a request (temperature is irrelevant here)."""
    return (seed * 40503 + n * 2654435761) % VOCAB_SIZE


def token_text(tid: int) -> str:
    return TOKEN_TEXT[tid & 4095]
