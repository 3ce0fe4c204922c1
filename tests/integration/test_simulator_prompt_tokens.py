"""Prompt lengths (issue 10 #9): with a local tokenizer the simulator counts a text prompt as
SGLang does (tokenized), so a prompt of 64 random token ids decoded to text by the client
(what ``bench_serving --dataset-name random`` sends) counts 64, not ``bytes / 4``; without
one, ``/sim/config`` says how it counts."""

from __future__ import annotations

import random

import httpx
from tests.fixtures.simulator import FAST
from tests.fixtures.tokenizer import VOCAB


def _prompt_tokens(url: str, text: str) -> int:
    body = {"text": text, "sampling_params": {"max_new_tokens": 1}}
    return httpx.post(url + "/generate", json=body, timeout=30).json()["meta_info"]["prompt_tokens"]


def test_text_prompt_is_counted_with_the_local_tokenizer(start_simulator, tokenizer_dir):
    from transformers import AutoTokenizer

    sim = start_simulator("--tokenizer-path", str(tokenizer_dir), "--disable-cuda-graph",
                          *FAST, timeout=90)  # fmt: skip
    client_tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    rng = random.Random(0)
    ids = [rng.randrange(1, len(VOCAB)) for _ in range(64)]
    text = client_tok.decode(ids)
    assert len(text.encode()) // 4 != 64  # what the old bytes/4 rule would have said
    assert _prompt_tokens(sim.url, text) == 64
    cfg = httpx.get(sim.url + "/sim/config", timeout=10).json()["prompt_tokens"]
    assert cfg["tokenizer"] == str(tokenizer_dir)


def test_without_a_tokenizer_sim_config_states_the_counting_rule(simulator):
    cfg = httpx.get(simulator.url + "/sim/config", timeout=10).json()["prompt_tokens"]
    assert cfg["tokenizer"] is None and "bytes // 4" in cfg["rule"]
    assert _prompt_tokens(simulator.url, "x" * 400) == 100
