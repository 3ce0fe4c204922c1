"""generated-shared-prefix against the simulator (issue 24 must-show, driven here by a small
sequential client, not yet by ``glmserve bench``): the measured hit rate equals the
simulator's ground truth, TTFT is lower than with the cache disabled, and a multi-turn
prompt carrying the server's real reply is served from cache through that reply."""

from __future__ import annotations

import hashlib
import itertools
import time

import httpx
import pytest
from tests.fixtures.simulator import FAST

from glmserve.bench.datasets.shared_prefix import GspParams, conversations, hit_rate

P = GspParams(
    num_groups=2,
    prompts_per_group=4,
    system_prompt_len=2048,
    question_len=32,
    output_len=4,
    num_turns=2,
)


def _run(url: str) -> tuple[list[int], list[int], list[float], list[str], list[dict]]:
    prompts, cached, ttft, rids, turns = [], [], [], [], []
    with httpx.Client(base_url=url, timeout=30) as c:
        for conv in conversations(P):
            more = True
            while more:
                sent = conv.prompt()
                t0 = time.perf_counter()
                r = c.post(
                    "/generate",
                    json={"input_ids": sent, "sampling_params": {"max_new_tokens": P.output_len}},
                )
                ttft.append(time.perf_counter() - t0)
                body = r.json()
                meta = body["meta_info"]
                prompts.append(meta["prompt_tokens"])
                cached.append(meta["cached_tokens"])
                rids.append(meta["id"])
                turns.append(
                    {
                        "turn": conv.turn,
                        "sent": sent,
                        "rid": meta["id"],
                        "reply": body["output_ids"],
                        "cached": meta["cached_tokens"],
                    }
                )
                more = conv.next_turn(sent, body["output_ids"])
    return prompts, cached, ttft, rids, turns


def test_shared_prefix_hit_rate_ttft_and_multi_turn(start_simulator):
    on = start_simulator("--tp-size", "2", "--disable-cuda-graph", *FAST)
    prompts, cached, _, rids, turns = _run(on.url)
    truth = httpx.get(on.url + "/sim/trace").json()["requests"]
    t_cached = sum(truth[r]["cached_tokens"] for r in rids)
    t_prompt = sum(truth[r]["prompt_tokens"] for r in rids)
    measured = hit_rate(prompts, cached)
    assert measured is not None and measured > 0.5
    assert measured == pytest.approx(t_cached / t_prompt, abs=0.02)
    # turn 2 reuses turn 1's prompt and the reply ids the server returned (16-token blocks)
    for prev, cur in itertools.pairwise(turns):
        if cur["turn"] == 1:
            assert cur["cached"] >= len(prev["sent"]) + len(prev["reply"]) - 16
            # the server received turn 1's prompt, its real reply verbatim, then question 2
            assert cur["sent"][: len(prev["sent"]) + len(prev["reply"])] == (
                prev["sent"] + prev["reply"]
            )
            sha = hashlib.sha256(",".join(map(str, cur["sent"])).encode()).hexdigest()
            assert truth[cur["rid"]]["prompt_sha256"] == sha
    off = start_simulator("--tp-size", "2", "--disable-cuda-graph", "--disable-radix-cache", *FAST)
    _, cached_off, _, rids_off, _ = _run(off.url)
    assert sum(cached_off) == 0
    # TTFT from the server's own stamps (arrival to first token), free of client jitter
    truth_off = httpx.get(off.url + "/sim/trace").json()["requests"]
    on_s = sum(truth[r]["gen_times"][0] - truth[r]["arrival"] for r in rids)
    off_s = sum(truth_off[r]["gen_times"][0] - truth_off[r]["arrival"] for r in rids_off)
    assert on_s < 0.8 * off_s
