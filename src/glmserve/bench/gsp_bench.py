"""``glmserve bench --dataset-name generated-shared-prefix``: options, checks, requests, the
multi-turn level and ``--flush-cache``.

Names and defaults follow sglang's ``bench_serving.py`` (0.5.9 in site-packages, lines
3319-3372: ``--gsp-num-groups`` 64, ``--gsp-prompts-per-group`` 16, ``--gsp-system-prompt-len``
2048, ``--gsp-question-len`` 128, ``--gsp-output-len`` 256, ``--gsp-num-turns`` 1; the
prompts are shuffled unless ``--gsp-ordered``, line 2016). Every group shares one system
prompt (``bench.datasets.shared_prefix``); a level sends each group's prompts once
(``num_groups * prompts_per_group`` requests, or ``--num-prompts``, cycled).

With ``--gsp-num-turns N`` > 1 each prompt is a conversation: turn k's prompt is the
conversation so far *including the ids the server really returned for turn k-1*, then the
next question (``Conversation.next_turn``), sent ``--think-time`` seconds after the reply.
A slot runs one conversation's turns in order (``--concurrency`` conversations at once), so
the native API's ``output_ids`` is needed: ``--api native`` only.

``--flush-cache`` asks ``POST /flush_cache`` before each level (sglang 0.5.9
``entrypoints/http_server.py`` line 710, GET or POST, 400 while requests run), so each
level starts cold, as bench_serving's ``--flush-cache`` does before its run; the level
records ``cache_flushed`` (and why not).
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import httpx

from glmserve.bench.datasets.shared_prefix import Conversation, GspParams, conversations
from glmserve.bench.metrics import close_unfinished
from glmserve.bench.workload import Request, build_request, make_prompts
from glmserve.errors import ConfigError

GSP = "generated-shared-prefix"
MAX_THINK_TIME = 3600.0
MAX_GSP_TOKENS = 20_000_000  # every id generated (as bench.session.MAX_PROMPT_TOKENS)
MAX_GSP = {"num_groups": 100_000, "prompts_per_group": 100_000, "system_prompt_len": 1 << 20,
           "question_len": 1 << 20, "output_len": 1 << 20, "num_turns": 1000}  # fmt: skip


def is_gsp(s: Any) -> bool:
    return getattr(s, "dataset_name", None) == GSP


def params(s: Any) -> GspParams:
    """The settings' ``gsp_*`` fields as ``GspParams`` (the seed is ``--seed``)."""
    return GspParams(
        num_groups=s.gsp_num_groups,
        prompts_per_group=s.gsp_prompts_per_group,
        system_prompt_len=s.gsp_system_prompt_len,
        question_len=s.gsp_question_len,
        output_len=s.gsp_output_len,
        num_turns=s.gsp_num_turns,
        seed=s.seed,
    )


def multi_turn(s: Any) -> bool:
    return is_gsp(s) and s.gsp_num_turns > 1


def check_workload(s: Any) -> None:
    """Every workload flag's check, one line naming the flag (the one place they live);
    a trace is read here (``bench.trace_replay.check``)."""
    import math

    from glmserve.bench.trace_replay import check

    check(s)

    if not math.isfinite(s.think_time) or not 0 <= s.think_time <= MAX_THINK_TIME:
        raise ConfigError(f"--think-time must be 0 to {MAX_THINK_TIME:g} seconds, got "
                          f"{s.think_time}")  # fmt: skip
    if not is_gsp(s):
        given = [f"--gsp-{k.replace('_', '-')}" for k, d in GSP_DEFAULTS.items()
                 if getattr(s, f"gsp_{k}") != d]  # fmt: skip
        if given:
            raise ConfigError(f"{given[0]} shapes --dataset-name {GSP}: give that too")
        if s.think_time:
            raise ConfigError(f"--think-time is between turns: give --dataset-name {GSP} "
                              "--gsp-num-turns N")  # fmt: skip
        return
    p = params(s)
    if (why := p.check()) is not None:
        raise ConfigError(why)
    for k, hi in MAX_GSP.items():
        if getattr(p, k) > hi:
            raise ConfigError(f"--gsp-{k.replace('_', '-')}: at most {hi:,}, got {getattr(p, k):,}")
    ids = p.num_groups * (p.system_prompt_len + p.prompts_per_group * p.num_turns * p.question_len)
    if ids > MAX_GSP_TOKENS:
        raise ConfigError(f"--gsp-*: {ids:,} token ids to generate; at most {MAX_GSP_TOKENS:,}")
    if s.dataset_path:
        raise ConfigError(f"--dataset-name {GSP} generates its prompts: leave out --dataset-path")
    if s.think_time and p.num_turns < 2:
        raise ConfigError("--think-time is between turns: give --gsp-num-turns 2 or more")
    if p.num_turns > 1:
        if s.api != "native":
            raise ConfigError(f"--gsp-num-turns {p.num_turns}: multi-turn needs --api native "
                              "(the next prompt carries the reply's output_ids)")  # fmt: skip
        closed = (("--num-prompts", s.num_prompts), ("--duration", s.duration),
                  ("--request-rate", s.request_rate), ("--rate-sweep", s.rate_sweep))  # fmt: skip
        for flag, v in closed:
            if v is not None:
                raise ConfigError(
                    f"{flag}: a multi-turn level runs every conversation's turns, closed "
                    "loop (--concurrency conversations at once)"
                )


GSP_DEFAULTS = {k: getattr(GspParams(), k) for k in ("num_groups", "prompts_per_group",
                "system_prompt_len", "question_len", "output_len", "num_turns")}  # fmt: skip


def ordered_conversations(s: Any) -> list[Conversation]:
    """The conversations, shuffled by ``--seed`` (bench_serving shuffles unless ordered)."""
    convs = conversations(params(s))
    random.Random(s.seed).shuffle(convs)
    return convs


def requests(s: Any, model: str, tok: Any = None) -> list[Request]:
    """One request per conversation: its first turn's prompt, ``--gsp-output-len`` tokens."""
    return [build_request(s.api, c.prompt(), s.gsp_output_len, model, tok)
            for c in ordered_conversations(s)]  # fmt: skip


def warmup_requests(s: Any, model: str, tok: Any = None) -> list[Request]:
    """Warmup prompts sharing nothing with the workload (random ids, short): warming the
    connections must not fill the cache with a group's system prompt before level 1."""
    n = max(1, s.warmup)
    prompts = make_prompts(n, min(32, s.gsp_question_len), s.seed + 7919)
    return [build_request(s.api, p, min(8, s.gsp_output_len), model, tok) for p in prompts]


def flush_cache(base_url: str, tries: int = 10, wait: float = 0.2) -> dict[str, Any]:
    """``POST /flush_cache`` until 200 (a 400 means requests still run: retried a moment
    later); ``{"cache_flushed": bool, "cache_flush_error": str | None}``."""
    why = None
    for _ in range(tries):
        try:
            r = httpx.post(base_url + "/flush_cache", timeout=10.0)
        except httpx.HTTPError as exc:
            why = f"POST /flush_cache: {exc}"[:200]
            break
        if r.status_code == 200:
            return {"cache_flushed": True, "cache_flush_error": None}
        why = f"POST /flush_cache: HTTP {r.status_code} {r.text[:120].strip()}"
        if r.status_code != 400:
            break
        time.sleep(wait)
    return {"cache_flushed": False, "cache_flush_error": why}


def run_conversations(s: Any, slots: int, progress: Any, run: Any) -> None:
    """A multi-turn level: ``slots`` conversations at once, each turn's prompt carrying the
    server's reply to the last; records fill ``run.records`` in place (Ctrl-C keeps them)."""
    from glmserve.bench.client import make_client, stream_request
    from glmserve.bench.metrics import StreamRecord

    convs = ordered_conversations(s)
    perf = time.perf_counter
    t0 = perf()
    counts = {"n": 0, "err": 0, "tok": 0}

    async def main() -> None:
        client = make_client(slots, s.stall_timeout)
        todo = iter(convs)

        async def slot() -> None:
            for conv in todo:
                more = True
                while more and not s.aborted:
                    sent = conv.prompt()
                    req = build_request(s.api, sent, s.gsp_output_len, s.model or "default")
                    rec = StreamRecord(dispatch=perf(), output_ids=[])
                    run.records.append(rec)
                    await stream_request(client, s.base_url, req, s.api, rec, None,
                                         s.stall_timeout)  # fmt: skip
                    reply, rec.output_ids = rec.output_ids or [], None
                    if rec.ok and len(reply) != rec.n_tokens:
                        rec.error = (f"output_ids has {len(reply)} ids for {rec.n_tokens} "
                                     "tokens: the next turn cannot carry the reply")  # fmt: skip
                    counts["n"] += 1
                    counts["err"] += 0 if rec.ok else 1
                    counts["tok"] += rec.n_tokens
                    progress.update(counts["n"], counts["err"], counts["tok"], perf() - t0)
                    if not rec.ok:
                        if s.failed is not None:
                            s.failed.set()
                        break  # the rest of this conversation has no real reply to carry
                    more = conv.next_turn(sent, reply)
                    if more and s.think_time:
                        await asyncio.sleep(s.think_time)

        try:
            await asyncio.gather(*(slot() for _ in range(max(1, slots))))
        finally:
            await client.aclose()

    try:
        asyncio.run(main())
        if s.aborted:
            run.stopped = "aborted: the server stopped serving"
    except KeyboardInterrupt:
        run.stopped = "interrupted"
        raise
    finally:
        close_unfinished(run.records, perf())
