"""Logprobs on the simulator's generation endpoints, in sglang 0.5.9's shapes.

Native ``/generate`` (``return_logprob``, ``logprob_start_len``): ``meta_info`` gains
``output_token_logprobs`` and ``input_token_logprobs``, lists of ``[logprob, token_id, None]``
(``tokenizer_manager.py:1662-1663``, tuples built at 1796-1799 without ``return_text_in_logprobs``);
input logprobs start at ``logprob_start_len`` (default ``len(input_ids) - 1`` when logprobs
are asked for, ``scheduler.py:1619-1623``; above the input length the request is refused,
1634-1635) and their first value is None (``scheduler_output_processor_mixin.py:577``).
OpenAI completions (``logprobs``, ``echo``) and chat (``logprobs``, ``top_logprobs``): the
``LogProbs`` / ``ChoiceLogprobs`` shapes (``entrypoints/openai/utils.py:14-48``,
``serving_chat.py:1000-1040``), with ``echo`` + ``logprobs`` putting the prompt's first
(``serving_completions.py:79-83``).

Not modelled: logprobs on *streamed* answers (the probe sends non-streamed requests) and the
runner-up entries of top-logprob lists (each position lists the greedy token only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from glmserve.simulator.engine import Request
from glmserve.simulator.textmodel import Generation, tokenize
from glmserve.simulator.tokens import token_text

if TYPE_CHECKING:
    from glmserve.simulator.server import SimServer


def pick(value: Any, i: int) -> Any:
    """A per-request field of a (possibly batched) /generate body."""
    return value[i] if isinstance(value, list) else value


def attach(
    server: SimServer, req: Request, prompt_ids: list[int] | None, text: str | None, start: Any
) -> str | None:
    """Give the request a Generation (its tokens from the text model, logprobs kept); returns
    SGLang's refusal text when ``logprob_start_len`` is past the input, else None."""
    ids = prompt_ids if prompt_ids is not None else tokenize(text or "", server.prompts.tokenizer)
    s = -1 if start is None else int(start)
    if s == -1:
        s = len(ids) - 1
    if s > len(ids):
        return (
            f"req.logprob_start_len={s} is higher than the number of input tokens "
            f"len(req.origin_input_ids)={len(ids)}. Please use a smaller logprob_start_len."
        )
    gen = Generation(server.text_model, ids)
    gen.start = s
    req.gen = gen
    return None


def native_meta(req: Request, meta: dict[str, Any], top: int) -> None:
    """Add the logprob fields to a finished request's ``meta_info``."""
    gen = req.gen
    if gen is None:
        return
    out = [[lp, tid, None] for lp, tid in zip(gen.logprobs, req.out_ids, strict=False)]
    inp_lp = gen.input_logprobs(gen.start)
    inp = [[lp, tid, None] for lp, tid in zip(inp_lp, gen.prompt_ids[gen.start :], strict=False)]
    meta["input_token_logprobs"] = inp
    meta["output_token_logprobs"] = out
    if top > 0:
        meta["input_top_logprobs"] = [None if e[0] is None else [e] for e in inp]
        meta["output_top_logprobs"] = [[e] for e in out]


def openai_logprobs(req: Request, chat: bool, top: int, echo: bool) -> dict[str, Any] | None:
    """``choices[i].logprobs`` of a non-streamed OpenAI answer."""
    gen = req.gen
    if gen is None:
        return None
    toks = [token_text(t) for t in req.out_ids]
    lps: list[float | None] = list(gen.logprobs[: len(toks)])
    if chat:
        return {
            "content": [
                {
                    "token": t,
                    "bytes": list(t.encode()),
                    "logprob": lp,
                    "top_logprobs": (
                        [{"token": t, "bytes": list(t.encode()), "logprob": lp}] if top else []
                    ),
                }
                for t, lp in zip(toks, lps, strict=True)
            ]
        }
    if echo:
        toks = [token_text(t) for t in gen.prompt_ids] + toks
        lps = list(gen.input_logprobs(0)) + lps
    return {
        "text_offset": [-1] * len(toks),
        "token_logprobs": lps,
        "tokens": toks,
        "top_logprobs": [None if lp is None else {t: lp} for t, lp in zip(toks, lps, strict=True)]
        if top
        else [],
    }
