"""A negative max_new_tokens is refused as SGLang refuses it (SamplingParams.verify), not
answered with one token (issue 20, item 16: HTTP 200 and a token before)."""

from __future__ import annotations

import json

import httpx

MSG = "max_new_tokens must be at least 0, got -3."


def test_negative_max_new_tokens_is_sglangs_400_and_stream_error(simulator):
    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": -3}}
    r = httpx.post(simulator.url + "/generate", json=body, timeout=10)
    assert r.status_code == 400 and r.json() == {"error": {"message": MSG}}
    # streamed, SGLang tokenizes inside the stream: a 200 whose one event is the error
    with httpx.stream("POST", simulator.url + "/generate", json={**body, "stream": True},
                      timeout=10) as s:  # fmt: skip
        assert s.status_code == 200
        events = [ln for ln in s.iter_lines() if ln]
    assert events == ["data: " + json.dumps({"error": {"message": MSG}}, separators=(",", ":")),
                      "data: [DONE]"]  # fmt: skip
    chat = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": -3}
    r = httpx.post(simulator.url + "/v1/chat/completions", json=chat, timeout=10)
    assert r.status_code == 400 and r.json()["message"] == MSG
    r = httpx.post(simulator.url + "/generate", json={**body, "sampling_params": {
        "max_new_tokens": 4, "top_p": 0}}, timeout=10)  # fmt: skip
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "top_p must be in (0, 1], got 0."
