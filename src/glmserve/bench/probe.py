"""Send the probe set to a live server and read its greedy outputs, or teacher-force a
reference's outputs through it: the I/O half of output agreement (``agreement`` is the pure
half).

Requests are non-streamed and greedy (``temperature: 0``) and go one at a time after the
bench, so they neither load the measured levels nor depend on batching. The native
``/generate`` is used when the server has it (every SGLang does): it returns the prompt's token
ids (``logprob_start_len: 0``), which teacher forcing needs. ``endpoint="openai"`` probes
``/v1/completions`` with ``logprobs`` instead; its excess NLL is then the agreed-prefix
estimate (OpenAI answers carry token texts, not ids, so nothing can be fed back exactly).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from glmserve.bench.agreement import ProbeOutput, forced_native, from_native, from_openai
from glmserve.bench.probes import ProbeSet
from glmserve.errors import TransportError

PROBE_TIMEOUT_S = 120.0


def _post(client: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        resp = client.post(url, json=body)
    except httpx.HTTPError as exc:
        raise TransportError(f"probe request to {url} failed: {type(exc).__name__}") from exc
    if resp.status_code != 200:
        raise TransportError(f"probe request to {url}: HTTP {resp.status_code} {resp.text[:200]}")
    try:
        doc = resp.json()
    except ValueError as exc:
        raise TransportError(f"probe answer from {url} is not JSON") from exc
    if not isinstance(doc, dict):
        raise TransportError(f"probe answer from {url} is not a JSON object")
    return doc


def run_probes(
    base_url: str, probes: ProbeSet, endpoint: str = "native", model: str | None = None
) -> list[ProbeOutput]:
    """Every probe's greedy output with logprobs."""
    outs: list[ProbeOutput] = []
    with httpx.Client(timeout=PROBE_TIMEOUT_S) as client:
        for p in probes.probes:
            if endpoint == "openai":
                body: dict[str, Any] = {
                    "model": model or "default",
                    "prompt": p.prompt,
                    "max_tokens": p.max_new_tokens,
                    "temperature": 0,
                    "logprobs": 1,
                }
                outs.append(from_openai(p.id, _post(client, base_url + "/v1/completions", body)))
            else:
                body = {
                    "text": p.prompt,
                    "sampling_params": {"temperature": 0, "max_new_tokens": p.max_new_tokens},
                    "return_logprob": True,
                    "logprob_start_len": 0,
                }
                outs.append(from_native(p.id, _post(client, base_url + "/generate", body)))
    return outs


def teacher_force(base_url: str, reference: Sequence[ProbeOutput]) -> dict[str, list[float]]:
    """The server's logprobs of each reference output, fed as input after its prompt
    (``input_ids = prompt_ids + reference``, ``logprob_start_len = len(prompt_ids) - 1``)."""
    forced: dict[str, list[float]] = {}
    with httpx.Client(timeout=PROBE_TIMEOUT_S) as client:
        for o in reference:
            if not o.prompt_ids or not o.tokens:
                continue
            body = {
                "input_ids": [*o.prompt_ids, *o.tokens],
                "sampling_params": {"temperature": 0, "max_new_tokens": 1},
                "return_logprob": True,
                "logprob_start_len": len(o.prompt_ids) - 1,
            }
            forced[o.probe_id] = forced_native(
                _post(client, base_url + "/generate", body), list(o.tokens)
            )
    return forced
