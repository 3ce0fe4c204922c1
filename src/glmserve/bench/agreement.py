"""Output agreement of a candidate server with a reference: is it still the same model?

A faster config is only a win if it computes the same model (issue 22: FP8 KV garbling GLM-5
on SM120; Triton MLA decode multiplying the softmax weights in FP8). Two measures, both from
the logprob payloads the server already returns, nothing else:

* **greedy agreement**: per probe, the tokens before the first divergence of the candidate's
  greedy output from the reference's, as a fraction of the reference's length; averaged over
  the probe set. One flipped near-tie ends a probe's agreement, so this is a coarse measure.
* **excess NLL**: the candidate's negative log-likelihood of the *reference's* output tokens
  (teacher forced: the reference continuation is fed as input and its input logprobs read back)
  minus the reference's own NLL of them, in nats per token. It is ~0 for the same model, a few
  hundredths for an FP8 KV cache, and nats for garbled output. Without a live candidate
  (``compare`` of two stored results) it is estimated over each probe's agreed prefix, where
  the candidate's own output logprobs *are* teacher-forced logprobs of the reference's tokens.

Payload shapes, sglang 0.5.9:

* native ``/generate`` with ``return_logprob``: ``meta_info.output_token_logprobs`` and
  ``meta_info.input_token_logprobs`` are lists of ``(logprob, token_id, text_or_None)``
  (``tokenizer_manager.py:1789-1803`` ``detokenize_logprob_tokens``, set at 1662-1663). Input
  logprobs start at ``logprob_start_len`` and their first value is None (``[None] +
  input_token_logprobs[:-1]``, ``scheduler_output_processor_mixin.py:577``); the default start
  with ``return_logprob`` is ``len(input_ids) - 1`` (``scheduler.py:1619-1623``). So a teacher
  forced request sends ``input_ids = prompt_ids + reference_ids`` with ``logprob_start_len =
  len(prompt_ids) - 1``: entry 0 is the prompt's last token (None), entries 1.. are the
  reference tokens with the candidate's logprobs.
* OpenAI ``/v1/completions`` with ``logprobs``: ``choices[0].logprobs`` is ``LogProbs``
  (``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``; ``protocol.py:80-84``,
  built by ``to_openai_style_logprobs``, ``entrypoints/openai/utils.py:14-48``). With ``echo``
  and ``logprobs`` the prompt's logprobs come first (``logprob_start_len = 0``,
  ``serving_completions.py:79-83``), the first None.
* OpenAI ``/v1/chat/completions`` with ``logprobs``: ``choices[0].logprobs.content`` is a list
  of ``{token, bytes, logprob, top_logprobs}`` (``ChatCompletionTokenLogprob``,
  ``serving_chat.py:1000-1040``). No teacher forcing there (the prompt's logprobs are never
  computed on chat: ``logprob_start_len=-1``, ``serving_chat.py:290``).

Native outputs are compared by token id; OpenAI ones by token text (the only identity they
carry).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from glmserve.errors import TransportError

# Defaults justified in notes/agree.md (published FP8 KV quality studies).
DEFAULT_MAX_EXCESS_NLL = 0.1  # nats per token
DEFAULT_MIN_GREEDY_AGREEMENT = 0.25  # mean fraction of each probe before its first divergence

WRONG_OUTPUT = "WRONG_OUTPUT"
AGREES = "agrees"


@dataclass(frozen=True)
class ProbeOutput:
    """One probe's greedy output: its tokens (ids, or texts on the OpenAI endpoints) and the
    logprob of each under the server that generated it; ``prompt_ids`` when known (native)."""

    probe_id: str
    tokens: tuple[Any, ...]
    logprobs: tuple[float, ...]
    prompt_ids: tuple[int, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.probe_id,
            "tokens": list(self.tokens),
            "logprobs": list(self.logprobs),
        }
        if self.prompt_ids is not None:
            d["prompt_ids"] = list(self.prompt_ids)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProbeOutput:
        pids = d.get("prompt_ids")
        return cls(
            str(d["id"]),
            tuple(d["tokens"]),
            tuple(float(x) for x in d["logprobs"]),
            tuple(int(x) for x in pids) if pids is not None else None,
        )


@dataclass(frozen=True)
class Thresholds:
    max_excess_nll: float = DEFAULT_MAX_EXCESS_NLL
    min_greedy_agreement: float = DEFAULT_MIN_GREEDY_AGREEMENT


@dataclass
class Agreement:
    """The verdict of a candidate against a reference over one probe set."""

    greedy_agreement: float
    excess_nll: float | None
    nll_method: str  # "teacher-forced" | "agreed-prefix" | "none"
    per_probe: dict[str, float] = field(default_factory=dict)
    thresholds: Thresholds = field(default_factory=Thresholds)
    reasons: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return WRONG_OUTPUT if self.reasons else AGREES

    @property
    def wrong(self) -> bool:
        return bool(self.reasons)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "greedy_agreement": self.greedy_agreement,
            "excess_nll": self.excess_nll,
            "nll_method": self.nll_method,
            "max_excess_nll": self.thresholds.max_excess_nll,
            "min_greedy_agreement": self.thresholds.min_greedy_agreement,
            "reasons": list(self.reasons),
            "per_probe": dict(self.per_probe),
        }


# -- payload parsing ---------------------------------------------------------------------


def _bad(what: str) -> TransportError:
    return TransportError(f"probe answer without logprobs: {what}")


def _triples(meta: dict[str, Any], key: str) -> list[Sequence[Any]]:
    v = meta.get(key)
    if not isinstance(v, list) or not all(isinstance(t, (list, tuple)) and len(t) >= 2 for t in v):
        raise _bad(f"meta_info.{key} is not a list of (logprob, token_id, text)")
    return v


def from_native(probe_id: str, payload: dict[str, Any]) -> ProbeOutput:
    """A ``/generate`` answer sent with ``return_logprob`` (and ``logprob_start_len=0`` for the
    prompt's ids, which teacher forcing needs)."""
    meta = payload.get("meta_info") if isinstance(payload, dict) else None
    if not isinstance(meta, dict):
        raise _bad("no meta_info")
    out = _triples(meta, "output_token_logprobs")
    prompt_ids = None
    if meta.get("input_token_logprobs"):
        prompt_ids = tuple(int(t[1]) for t in _triples(meta, "input_token_logprobs"))
    if any(t[0] is None for t in out):
        raise _bad("an output token has no logprob")
    return ProbeOutput(
        probe_id, tuple(int(t[1]) for t in out), tuple(float(t[0]) for t in out), prompt_ids
    )


def from_openai(probe_id: str, payload: dict[str, Any]) -> ProbeOutput:
    """An OpenAI completion or chat completion answer sent with ``logprobs``."""
    try:
        lp = payload["choices"][0]["logprobs"]
    except (KeyError, IndexError, TypeError):
        raise _bad("no choices[0].logprobs") from None
    if not isinstance(lp, dict):
        raise _bad("choices[0].logprobs is null")
    if "content" in lp:  # chat: ChoiceLogprobs
        items = lp["content"] or []
        toks = tuple(str(i["token"]) for i in items)
        vals = [i.get("logprob") for i in items]
    else:  # completions: LogProbs
        toks = tuple(str(t) for t in lp.get("tokens") or [])
        vals = list(lp.get("token_logprobs") or [])
    if len(vals) != len(toks) or any(v is None for v in vals):
        raise _bad("tokens and token_logprobs differ in length or hold null")
    return ProbeOutput(probe_id, toks, tuple(float(v) for v in vals))


def forced_native(payload: dict[str, Any], reference: Sequence[int]) -> list[float]:
    """The candidate's logprobs of the reference tokens from a teacher-forced ``/generate``
    answer (``input_ids = prompt_ids + reference``, ``logprob_start_len = len(prompt_ids)-1``)."""
    meta = payload.get("meta_info") if isinstance(payload, dict) else None
    if not isinstance(meta, dict):
        raise _bad("no meta_info")
    inp = _triples(meta, "input_token_logprobs")[1:]
    if len(inp) < len(reference):
        raise _bad(f"{len(inp)} input logprobs for {len(reference)} reference tokens")
    got = [int(t[1]) for t in inp[: len(reference)]]
    if got != [int(r) for r in reference]:
        raise _bad("input_token_logprobs are not of the reference tokens sent")
    if any(t[0] is None for t in inp[: len(reference)]):
        raise _bad("a reference token has no input logprob")
    return [float(t[0]) for t in inp[: len(reference)]]


def forced_openai(payload: dict[str, Any], n_prompt: int, n_reference: int) -> list[float]:
    """The same from an OpenAI ``/v1/completions`` answer sent with ``echo`` and ``logprobs``
    on prompt + reference: the echoed token logprobs after the prompt's ``n_prompt``."""
    out = from_openai("", _nonnull_first(payload))
    vals = list(out.logprobs)[n_prompt : n_prompt + n_reference]
    if len(vals) < n_reference:
        raise _bad(f"{len(vals)} echoed logprobs for {n_reference} reference tokens")
    return vals


def _nonnull_first(payload: dict[str, Any]) -> dict[str, Any]:
    """Echoed logprobs begin with None (the first prompt token has none): read it as 0.0 so
    the parser's null check applies only to the tokens that must have one."""
    try:
        lp = payload["choices"][0]["logprobs"]
        vals = list(lp["token_logprobs"])
    except (KeyError, IndexError, TypeError):
        raise _bad("no choices[0].logprobs.token_logprobs") from None
    if vals and vals[0] is None:
        vals[0] = 0.0
    lp = {**lp, "token_logprobs": vals}
    return {"choices": [{**payload["choices"][0], "logprobs": lp}]}


# -- measures ----------------------------------------------------------------------------


def greedy_agreement(reference: Sequence[Any], candidate: Sequence[Any]) -> float:
    """Tokens before the first divergence, as a fraction of the reference's length."""
    if not reference:
        return 1.0
    n = 0
    for a, b in zip(reference, candidate, strict=False):
        if a != b:
            break
        n += 1
    return n / len(reference)


def excess_nll(reference_logprobs: Sequence[float], forced_logprobs: Sequence[float]) -> float:
    """Mean NLL of the reference's tokens under the candidate minus under the reference."""
    n = min(len(reference_logprobs), len(forced_logprobs))
    if n == 0:
        return 0.0
    return (sum(reference_logprobs[:n]) - sum(forced_logprobs[:n])) / n


def _by_id(outs: Sequence[ProbeOutput]) -> dict[str, ProbeOutput]:
    return {o.probe_id: o for o in outs}


def agree(
    reference: Sequence[ProbeOutput],
    candidate: Sequence[ProbeOutput],
    forced: dict[str, Sequence[float]] | None = None,
    thresholds: Thresholds | None = None,
) -> Agreement:
    """The candidate's agreement with the reference over the probes both answered.

    ``forced`` maps a probe id to the candidate's teacher-forced logprobs of the reference's
    tokens; without it the excess NLL is taken over each probe's agreed prefix."""
    th = thresholds or Thresholds()
    ref, cand = _by_id(reference), _by_id(candidate)
    ids = [i for i in ref if i in cand]
    if not ids:
        return Agreement(0.0, None, "none", {}, th, ["no probe answered by both"])
    per = {i: greedy_agreement(ref[i].tokens, cand[i].tokens) for i in ids}
    greedy = sum(per.values()) / len(per)
    num = den = 0.0
    method = "none"
    if forced:
        method = "teacher-forced"
        for i in ids:
            if i in forced:
                f = list(forced[i])[: len(ref[i].logprobs)]
                num += sum(ref[i].logprobs[: len(f)]) - sum(f)
                den += len(f)
    else:
        for i in ids:
            k = round(per[i] * len(ref[i].tokens))
            if k:
                method = "agreed-prefix"
                num += sum(ref[i].logprobs[:k]) - sum(cand[i].logprobs[:k])
                den += k
    xnll = num / den if den else None
    if xnll is not None and not math.isfinite(xnll):
        xnll = math.inf
    reasons: list[str] = []
    if xnll is not None and xnll > th.max_excess_nll:
        reasons.append(f"excess NLL {xnll:.3f} nats/token > {th.max_excess_nll:g} ({method})")
    if greedy < th.min_greedy_agreement:
        reasons.append(f"greedy agreement {greedy:.2f} < {th.min_greedy_agreement:g}")
    return Agreement(greedy, xnll, method, per, th, reasons)


def unconfirmed(a: dict[str, Any], base_id: Any) -> dict[str, Any]:
    """An agreed-prefix "agrees" is no verdict unless the greedy outputs are identical: the
    estimate reads only the tokens both servers chose, so a server wrong at some positions
    diverges exactly there and its error is never measured (simulated ``garble=0.1``: 0.000
    nats/token over the agreed prefix, greedy agreement 0.29 above its floor, while teacher
    forced it is 0.626: WRONG_OUTPUT). A WRONG_OUTPUT found this way stands (its evidence is
    measured); an identical greedy output is read whole, so its "agrees" stands too."""
    if a["verdict"] == WRONG_OUTPUT or a.get("nll_method") != "agreed-prefix":
        return a
    if a["greedy_agreement"] >= 1.0:
        return a
    return {
        **a,
        "verdict": None,
        "note": (
            f"output not judged against {base_id}: greedy agreement "
            f"{a['greedy_agreement']:.2f}, and between stored results the excess NLL is "
            "read only over the tokens both chose; bench this server with --reference "
            f"{base_id} for the teacher-forced verdict"
        ),
    }
