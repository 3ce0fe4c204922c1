"""The simulator's radix cache over HTTP: a second turn that repeats the first turn's prompt
and the server's real reply is served mostly from cache (``meta_info.cached_tokens``, the
ground truth in ``/sim/trace``, and a cheaper prefill); flush and ``--disable-radix-cache``
give no hits."""

from __future__ import annotations

import httpx
from tests.fixtures.simulator import FAST

SYSTEM = "You are a helpful assistant. " * 40  # ~280 tokens at 4 bytes a token


def _gen(c: httpx.Client, text: str, n: int = 16) -> dict:
    r = c.post("/generate", json={"text": text, "sampling_params": {"max_new_tokens": n}})
    assert r.status_code == 200, r.text
    return r.json()


def _turns(c: httpx.Client) -> tuple[dict, dict, str]:
    t1 = SYSTEM + "Question one?"
    a1 = _gen(c, t1)
    t2 = t1 + a1["text"] + " Question two?"
    return a1, _gen(c, t2), t2


def test_second_turn_hits_cache_and_matches_ground_truth(start_simulator):
    sim = start_simulator("--tp-size", "2", "--disable-cuda-graph", *FAST)
    with httpx.Client(base_url=sim.url, timeout=20) as c:
        a1, a2, t2 = _turns(c)
        assert a1["text"]  # the reply is real text and went into turn 2's prompt
        m1, m2 = a1["meta_info"], a2["meta_info"]
        assert m1["cached_tokens"] == 0
        # turn 2 reuses turn 1's prompt and reply, whole 16-token blocks of it
        reused = m1["prompt_tokens"] + m1["completion_tokens"]
        assert reused - 16 - 4 <= m2["cached_tokens"] <= reused
        truth = c.get("/sim/trace").json()["requests"]
        assert truth[m2["id"]]["cached_tokens"] == m2["cached_tokens"]
        prefills = [s for s in c.get("/sim/trace").json()["steps"] if s["kind"] == "prefill"]
        assert prefills[-1]["ctx_tokens"] == m2["prompt_tokens"] - m2["cached_tokens"]
        assert c.post("/flush_cache").status_code == 200
        again = _gen(c, t2)["meta_info"]
        assert again["cached_tokens"] == 0
    assert f"#cached-token: {m2['cached_tokens']}, " in sim.log_text()


def test_disabled_radix_cache_never_hits(start_simulator):
    sim = start_simulator("--tp-size", "2", "--disable-cuda-graph", "--disable-radix-cache", *FAST)
    with httpx.Client(base_url=sim.url, timeout=20) as c:
        _, a2, t2 = _turns(c)
        assert a2["meta_info"]["cached_tokens"] == 0
        assert _gen(c, t2)["meta_info"]["cached_tokens"] == 0
