"""``--dataset-name generated-shared-prefix``: groups of conversations that share a system
prompt, as SGLang's bench client generates them.

Knobs, names and defaults follow sglang's ``bench_serving.py`` (0.5.9 in site-packages,
lines 3319-3368; the same group in the stored upstream source): ``--gsp-num-groups`` 64,
``--gsp-prompts-per-group`` 16, ``--gsp-system-prompt-len`` 2048, ``--gsp-question-len``
128, ``--gsp-output-len`` 256, ``--gsp-num-turns`` 1 (``sample_generated_shared_prefix_
requests``, line 1909: one system prompt per group, one question per prompt and turn).

Prompts are token ids (native ``input_ids``), so the shared prefix is exact. With more than
one turn, turn k's prompt is the conversation so far, *including the ids the server really
returned for turn k-1* (``next_turn``), not a canned reply: what a radix cache can reuse.
The level's cache hit rate is the server's ``meta_info.cached_tokens`` summed over the
prompt tokens (``hit_rate``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from glmserve.bench.workload import TOKEN_ID_RANGE

DEFAULTS = {
    "num_groups": 64,
    "prompts_per_group": 16,
    "system_prompt_len": 2048,
    "question_len": 128,
    "output_len": 256,
    "num_turns": 1,
}


@dataclass(frozen=True)
class GspParams:
    """The workload's parameters: part of what makes two results comparable."""

    num_groups: int = DEFAULTS["num_groups"]
    prompts_per_group: int = DEFAULTS["prompts_per_group"]
    system_prompt_len: int = DEFAULTS["system_prompt_len"]
    question_len: int = DEFAULTS["question_len"]
    output_len: int = DEFAULTS["output_len"]
    num_turns: int = DEFAULTS["num_turns"]
    seed: int = 1

    def check(self) -> str | None:
        """The first bad parameter as a one-line message (flag named), or None."""
        for name in DEFAULTS:
            if getattr(self, name) < 1:
                return f"--gsp-{name.replace('_', '-')} must be at least 1"
        return None

    def describe(self) -> dict[str, object]:
        return {"kind": "generated-shared-prefix", **self.__dict__}


@dataclass
class Conversation:
    """One prompt of a group: its system prompt, a question per turn, and what was sent."""

    group: int
    system: list[int]
    questions: list[list[int]]
    output_len: int
    history: list[int] = field(default_factory=list)  # the last prompt plus its reply
    turn: int = 0

    def prompt(self) -> list[int]:
        """The next turn's prompt: the conversation so far, then this turn's question."""
        base = self.history if self.turn else self.system
        return base + self.questions[self.turn]

    def next_turn(self, sent: list[int], reply_ids: list[int]) -> bool:
        """Record the server's reply to ``sent``; True while turns remain."""
        self.history = list(sent) + list(reply_ids)
        self.turn += 1
        return self.turn < len(self.questions)


def conversations(p: GspParams) -> list[Conversation]:
    """Every group's conversations, reproducible from ``p.seed``; group-major order (the
    runner may shuffle, as SGLang does unless ``--gsp-ordered``)."""
    rng = random.Random(p.seed)
    lo, hi = TOKEN_ID_RANGE

    def ids(n: int) -> list[int]:
        return [rng.randrange(lo, hi) for _ in range(n)]

    out: list[Conversation] = []
    for g in range(p.num_groups):
        system = ids(p.system_prompt_len)
        for _ in range(p.prompts_per_group):
            qs = [ids(p.question_len) for _ in range(p.num_turns)]
            out.append(Conversation(g, system, qs, p.output_len))
    return out


def hit_rate(prompt_tokens: list[int], cached_tokens: list[int | None]) -> float | None:
    """The level's cache hit rate: cached over prompt tokens of the requests that reported
    ``cached_tokens`` (None when none did, e.g. an OpenAI route without usage details)."""
    pairs = [(p, c) for p, c in zip(prompt_tokens, cached_tokens, strict=True) if c is not None]
    total = sum(p for p, _ in pairs)
    return sum(c for _, c in pairs) / total if total else None


def ideal_hit_rate(p: GspParams, block: int = 1) -> float:
    """The best hit rate a prefix cache with ``block``-token granularity and no eviction can
    reach on the first turn: every group's first request misses, the rest reuse the system
    prompt's whole blocks (a bound to read a measured rate against, not a ground truth)."""
    reuse = (p.system_prompt_len // block) * block
    n = p.num_groups * p.prompts_per_group
    prompt = p.system_prompt_len + p.question_len
    return p.num_groups * (p.prompts_per_group - 1) * reuse / (n * prompt)
