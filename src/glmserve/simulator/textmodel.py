"""The simulator's language model: deterministic text with defined logprobs.

So output agreement (``bench --probe``) is meaningful in CI, the simulator generates text from
a model, not from the request id: each greedy token is a function of the whole context (the
prompt's token ids, then every token generated so far) and ``MODEL_SEED`` (the "weights", the
same for every simulated server, as every real server of a sweep loads the same checkpoint).
Each context has a top token, a runner-up ``margin`` nats below it (exponentially distributed,
mean ``MEAN_MARGIN``: some positions are near-ties, as in a real model) and every other token
further below; ``logprob(ctx, token)`` is defined for any token, so teacher forcing (input
logprobs of a prompt plus a given continuation) reads the same model.

Text prompts are tokenized with the server's tokenizer when one is loaded (``prompts.py``), else
into ``max(1, bytes // 4)`` pseudo-ids (4-byte chunks), the count ``prompts.approx_tokens`` uses.

Output faults (``--sim-output-fault``), applied only when the server's attention backend and KV
dtype match the fault's selector:

* ``garble[=P]``: at a fraction P (default 0.5) of positions the kernel's numbers are wrong: the
  top token is an unrelated one and the model's own top token gets a logprob of ~-6. This is
  local-inference-lab/rtx6kpro ``models/glm5.md`` (March 2026): FP8 KV on SM120 garbles GLM-5.
* ``drift[=D]``: every logit is perturbed by up to D nats (default 0.02): near-ties flip, the
  rest keeps its token with logprobs a little off. This is SGLang's Triton MLA decode with an FP8
  KV cache, which multiplies the softmax weights in FP8 (``p.to(v.dtype)`` in
  ``_fwd_grouped_kernel_stage1``, 0.5.9 ``layers/attention/triton_ops/decode_attention.py``):
  1-2.4% relative error in the attention output on an H200.

Selector: ``KIND[=DEGREE][@BACKEND[/KV_DTYPE]]``, e.g. ``garble@trtllm_mla/fp8_e4m3`` or
``drift=0.05@triton``; without ``@`` the fault applies to any combination.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from glmserve.errors import SimUsageError

VOCAB = 151552  # GLM-5 tokenizer vocabulary (tokens.VOCAB_SIZE)
MODEL_SEED = 0x5EED_61A5
MEAN_MARGIN = 1.5  # nats between the top token and the runner-up, on average
_M64 = (1 << 64) - 1
FAULT_KINDS = ("garble", "drift")
DEFAULT_DEGREE = {"garble": 0.5, "drift": 0.02}


def mix(*xs: int) -> int:
    """splitmix64 over the arguments: a cheap, well-spread deterministic hash."""
    h = 0x9E3779B97F4A7C15
    for x in xs:
        h = (h ^ (x & _M64)) * 0xBF58476D1CE4E5B9 & _M64
        h = (h ^ (h >> 27)) * 0x94D049BB133111EB & _M64
        h ^= h >> 31
    return h


def _unit(h: int) -> float:
    """A hash as a float in (0, 1)."""
    return ((h >> 11) + 0.5) / float(1 << 53)


@dataclass(frozen=True)
class OutputFault:
    kind: str
    degree: float
    backend: str | None = None
    kv_dtype: str | None = None

    def applies(self, backend: str, kv_dtype: str) -> bool:
        return (self.backend in (None, backend)) and (self.kv_dtype in (None, kv_dtype))


def parse_fault(spec: str | None) -> OutputFault | None:
    """``--sim-output-fault`` text -> OutputFault; a bad one is a one-line SimUsageError."""
    if not spec:
        return None
    head, _, where = spec.partition("@")
    kind, _, deg = head.partition("=")
    if kind not in FAULT_KINDS:
        raise SimUsageError(
            f"--sim-output-fault {spec}: want {'|'.join(FAULT_KINDS)}[=DEGREE][@BACKEND[/KV]]"
        )
    try:
        degree = float(deg) if deg else DEFAULT_DEGREE[kind]
    except ValueError:
        raise SimUsageError(f"--sim-output-fault {spec}: degree {deg!r} is not a number") from None
    hi = 1.0 if kind == "garble" else 10.0
    if not (0.0 < degree <= hi):
        raise SimUsageError(f"--sim-output-fault {spec}: degree must be in (0, {hi:g}]")
    backend, _, kv = where.partition("/")
    return OutputFault(kind, degree, backend or None, kv or None)


class TextModel:
    """The model one server computes (the fault, if it applies, is part of it)."""

    def __init__(self, fault: OutputFault | None = None, seed: int = MODEL_SEED) -> None:
        self.fault = fault
        self.seed = seed

    def start(self, prompt_ids: list[int]) -> int:
        """The context state after the prompt."""
        s = mix(self.seed)
        for t in prompt_ids:
            s = mix(s, t)
        return s

    @staticmethod
    def advance(state: int, token: int) -> int:
        return mix(state, token)

    def _clean(self, state: int) -> tuple[int, int, float, float]:
        """(top, runner-up, top logprob, margin) of the fault-free model."""
        top = mix(state, 1) % VOCAB
        second = mix(state, 2) % VOCAB
        if second == top:
            second = (top + 1) % VOCAB
        lp_top = -0.6 * _unit(mix(state, 3))  # confident: -0.6 .. 0
        margin = -MEAN_MARGIN * math.log(_unit(mix(state, 4)))
        return top, second, lp_top, margin

    def _clean_lp(self, state: int, token: int) -> float:
        top, second, lp_top, margin = self._clean(state)
        if token == top:
            return lp_top
        if token == second:
            return lp_top - margin
        return lp_top - margin - 0.5 - 4.0 * _unit(mix(state, token, 5))

    def greedy(self, state: int) -> tuple[int, float]:
        """The greedy token at this context and its logprob (under this server's model)."""
        top, second, lp_top, margin = self._clean(state)
        f = self.fault
        if f is None:
            return top, lp_top
        if f.kind == "garble":
            if _unit(mix(state, 6)) < f.degree:
                return mix(state, 7) % VOCAB, -0.05
            return top, lp_top
        # drift: the top two logits each move by up to D nats
        d1 = f.degree * (2 * _unit(mix(state, 8)) - 1)
        d2 = f.degree * (2 * _unit(mix(state, 9)) - 1)
        if margin + d1 - d2 < 0:
            return second, lp_top - margin + d2 - abs(d1)
        return top, lp_top + d1 * 0.5 - abs(d2) * 0.5

    def logprob(self, state: int, token: int) -> float:
        """This server's logprob of any token at this context (teacher forcing)."""
        f = self.fault
        if f is None:
            return self._clean_lp(state, token)
        g, glp = self.greedy(state)
        if token == g:
            return glp
        if f.kind == "garble" and _unit(mix(state, 6)) < f.degree:
            return -6.0 - _unit(mix(state, token, 10))
        if f.kind == "drift":
            top, _, _, _ = self._clean(state)
            if token == top:  # the flipped-away top token: just below the new one
                return glp - 0.01
            return self._clean_lp(state, token) - f.degree * _unit(mix(state, token, 11))
        return self._clean_lp(state, token)


def tokenize(text: str, tokenizer: object | None = None) -> list[int]:
    """Prompt ids: the loaded tokenizer's, else 4-byte pseudo-tokens (``approx_tokens`` many)."""
    if tokenizer is not None:
        return list(tokenizer(text)["input_ids"])  # type: ignore[operator]
    raw = text.encode()
    n = max(1, len(raw) // 4)
    return [
        mix(int.from_bytes(raw[4 * i : 4 * i + 4] or b"\0", "little"), i) % VOCAB for i in range(n)
    ]


class Generation:
    """One request's greedy decode under a TextModel: the engine calls ``next`` per token."""

    __slots__ = ("logprobs", "model", "prompt_ids", "start", "state")

    def __init__(self, model: TextModel, prompt_ids: list[int]) -> None:
        self.model = model
        self.prompt_ids = prompt_ids
        self.state = model.start(prompt_ids)
        self.logprobs: list[float] = []
        self.start = -1  # logprob_start_len as resolved

    def next(self) -> int:
        tok, lp = self.model.greedy(self.state)
        self.logprobs.append(lp)
        self.state = TextModel.advance(self.state, tok)
        return tok

    def input_logprobs(self, start: int) -> list[float | None]:
        """Logprobs of the prompt's tokens from ``start`` on, the first None (as SGLang:
        ``[None] + input_token_logprobs[:-1]``)."""
        ids = self.prompt_ids
        out: list[float | None] = []
        if start >= len(ids):
            return out
        # the context state before token j is the model's state over ids[:j]
        m = self.model
        s = m.start([])
        for j, t in enumerate(ids):
            if j >= start:
                out.append(None if j == start else m.logprob(s, t))
            s = mix(s, t)
        return out
