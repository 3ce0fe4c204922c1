"""Send the probe set to a live server and read its greedy outputs, or teacher-force a
reference's outputs through it: the I/O half of output agreement (``agreement`` is the pure
half).

Requests are non-streamed and greedy (``temperature: 0``) and go one at a time after the
bench, so they neither load the measured levels nor depend on batching.

The probe goes through SGLang's native ``/generate`` whatever ``--api`` the bench used, and
says so (``endpoint``, ``bench_api`` in the stored probe; every line and note that shows a
verdict names it). Only ``/generate`` returns token ids, of the prompt
(``logprob_start_len: 0``) and of the output, and teacher forcing feeds the reference's ids
back exactly. The OpenAI endpoints return token texts only (0.5.9
``entrypoints/openai/utils.py:14-26`` ``to_openai_style_logprobs``), and chat never computes
the prompt's logprobs (``serving_chat.py:290``, ``logprob_start_len=-1``): through them the
excess NLL could only be estimated over the agreed prefix, which is blind where it matters: a
server wrong at a tenth of its positions diverges exactly there, so the estimate over what
agrees reads 0.000 nats/token and greedy agreement 0.29 clears its floor (simulated
``garble=0.1``: teacher forced, 0.626 nats/token, WRONG_OUTPUT). What is judged, the engine's
computation (attention backend, KV cache dtype, kernels: what profiles change), is the same
behind every endpoint: ``/generate``, ``/v1/completions`` and ``/v1/chat/completions`` all
call ``TokenizerManager.generate_request`` (``http_server.py:677``,
``serving_completions.py:376``, ``serving_chat.py:873``). The chat template and the
reasoning/tool parsers, which only the OpenAI endpoints apply, are not probed.
``endpoint="openai"`` (``run_probes``) remains for the parsers' tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from glmserve.bench.agreement import (
    WRONG_OUTPUT,
    ProbeOutput,
    Thresholds,
    agree,
    forced_native,
    from_native,
    from_openai,
    unconfirmed,
)
from glmserve.bench.probes import ProbeSet, load_probe_set
from glmserve.errors import ConfigError, TransportError

PROBE_TIMEOUT_S = 120.0
PATHS = {"native": "/generate", "openai": "/v1/completions", "chat": "/v1/chat/completions"}
_T = TypeVar("_T")


def _post(client: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        resp = client.post(url, json=body)
    except httpx.HTTPError as exc:
        raise TransportError(f"probe request to {url} failed: {type(exc).__name__}") from exc
    if resp.status_code != 200:
        raise TransportError(f"probe request to {url}: HTTP {resp.status_code} {resp.text[:200]}")
    try:
        doc = resp.json()
    except RecursionError as exc:
        raise TransportError(f"probe answer from {url} is nested too deeply to read") from exc
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
                url = base_url + "/v1/completions"
                outs.append(_read(url, from_openai, p.id, _post(client, url, body)))
            else:
                body = {
                    "text": p.prompt,
                    "sampling_params": {"temperature": 0, "max_new_tokens": p.max_new_tokens},
                    "return_logprob": True,
                    "logprob_start_len": 0,
                }
                url = base_url + "/generate"
                outs.append(_read(url, from_native, p.id, _post(client, url, body)))
    return outs


_SHAPE_ERRORS = (TypeError, ValueError, OverflowError, KeyError, IndexError, AttributeError)


def _read(url: str, parse: Callable[..., _T], *args: Any) -> _T:
    """``parse(*args)`` of a server's probe answer; a value of the wrong type inside it (a
    token id "abc", a logprob null or 1e400, an item that is no object) is the server's
    fault: a failed probe naming the URL (recorded, the gate fails), never exit 70 after a
    measured bench that would then not be stored."""
    try:
        return parse(*args)
    except _SHAPE_ERRORS as exc:
        raise TransportError(
            f"probe answer from {url} is malformed ({type(exc).__name__}: {str(exc)[:120]})"
        ) from exc


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
            url = base_url + "/generate"
            forced[o.probe_id] = _read(url, forced_native, _post(client, url, body), list(o.tokens))
    return forced


@dataclass
class ProbeSpec:
    """What ``bench --probe`` does after the levels: probe, and judge against a reference."""

    reference: list[ProbeOutput] | None = None
    reference_id: Any = None  # a bench result id, or a sweep/tune's profile name
    thresholds: Thresholds = field(default_factory=Thresholds)
    endpoint: str = "native"


def reference_outputs(result: dict[str, Any], what: str) -> list[ProbeOutput]:
    """A stored result's probe outputs as a reference; ConfigError when it has none or was
    probed with another probe set (its sha256 differs from the shipped one)."""
    probe = result.get("probe") or {}
    if not probe.get("outputs"):
        raise ConfigError(f"{what} has no probe outputs (bench it with --probe)")
    current = load_probe_set().sha256
    if probe.get("sha256") != current:
        raise ConfigError(
            f"{what} was probed with another probe set (sha256 {str(probe.get('sha256'))[:12]}, "
            f"this glmserve ships {current[:12]})"
        )
    return [ProbeOutput.from_dict(o) for o in probe["outputs"]]


def load_reference(result_id: int) -> list[ProbeOutput]:
    """``--reference N``: bench result N's probe outputs."""
    from glmserve.store import RunStore

    with RunStore.open() as store:
        row = store.get_bench_result(result_id)
    return reference_outputs(row["result"], f"--reference {result_id}")


def probe_step(
    base_url: str, spec: ProbeSpec, model: str | None = None, api: str | None = None
) -> dict[str, Any]:
    """Probe the server; with a reference, teacher-force it and judge. The dict is stored in
    the result as ``probe``; a failed probe is recorded (``error``), never a crash of the bench.
    ``api``: the bench's ``--api``, recorded beside the probe's own endpoint when they differ
    (the probe stays on ``/generate``: module doc)."""
    ps = load_probe_set()
    d: dict[str, Any] = {"set": ps.name, "sha256": ps.sha256, "endpoint": spec.endpoint}
    if api and api != spec.endpoint:
        d["bench_api"] = api
    try:
        outs = run_probes(base_url, ps, spec.endpoint, model)
        d["outputs"] = [o.to_dict() for o in outs]
        if spec.reference is not None:
            forced = teacher_force(base_url, spec.reference) if spec.endpoint == "native" else None
            a = agree(spec.reference, outs, forced, spec.thresholds)
            d["agreement"] = {**a.to_dict(), "reference": spec.reference_id}
    except TransportError as exc:
        d["error"] = str(exc)
        if "bench_api" in d:  # a URL serving only the OpenAI API (a gateway) has no /generate
            d["error"] += (
                f" (the output probe uses SGLang's native {PATHS[spec.endpoint]}, whatever "
                f"--api; the bench used --api {d['bench_api']})"
            )
    return d


def via(probe: dict[str, Any]) -> str:
    """Which API a stored probe went through, and the bench's when it differs: said wherever
    a verdict is shown, so an agreement is never read as the bench's API's."""
    endpoint = str(probe.get("endpoint") or "native")
    text = f"probed through {PATHS.get(endpoint, endpoint)}"
    api = probe.get("bench_api")
    if api and api != endpoint:
        text += f"; benched through --api {api}, whose chat template and parsers are not probed"
    return text


def probe_gate(probe: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``output-agreement`` gate of a probed result with a reference (or a failed probe)."""
    if not probe:
        return None
    if probe.get("error"):
        return {"gate": "output-agreement", "ok": False, "value": None, "bound": None,
                "reason": f"output probe failed: {probe['error']}"}  # fmt: skip
    a = probe.get("agreement")
    if not a:
        return None
    ok = a["verdict"] != WRONG_OUTPUT
    reason = (
        f"output agrees with reference {a.get('reference')}"
        if ok
        else f"{WRONG_OUTPUT} vs reference {a.get('reference')}: " + "; ".join(a["reasons"])
    )
    return {"gate": "output-agreement", "ok": ok, "value": a.get("excess_nll"),
            "bound": a.get("max_excess_nll"), "reason": reason}  # fmt: skip


def probe_lines(probe: dict[str, Any] | None) -> list[str]:
    """What ``bench`` prints under its table about the probe."""
    if not probe:
        return []
    if probe.get("error"):
        return [f"output probe failed: {probe['error']}"]
    lines = [
        f"output probed: {len(probe.get('outputs') or [])} prompts of {probe['set']} "
        f"(sha256 {probe['sha256'][:12]}, {via(probe)})"
    ]
    a = probe.get("agreement")
    if a:
        lines.append(describe_agreement(a))
    return lines


def describe_agreement(a: dict[str, Any]) -> str:
    """One line for a verdict (or why there is none), naming the API the probe went through
    where it is known (``via``)."""
    xn = a.get("excess_nll")
    where = f" ({a['via']})" if a.get("via") else ""
    if a.get("verdict") is None:
        return str(a.get("note") or "output not judged") + where
    figures = f"greedy agreement {a['greedy_agreement']:.2f}, excess NLL " + (
        f"{xn:.3f} nats/token ({a['nll_method']})" if xn is not None else "n/a"
    )
    if a["verdict"] == WRONG_OUTPUT:
        return (
            f"{WRONG_OUTPUT} vs reference {a.get('reference')}: " + "; ".join(a["reasons"]) + where
        )
    return f"output agrees with reference {a.get('reference')}: {figures}{where}"


def thresholds(max_excess_nll: float | None, min_greedy: float | None) -> Thresholds:
    """The agreement thresholds from options; a value out of range is a one-line ConfigError."""
    th = Thresholds()
    if max_excess_nll is not None:
        if not (max_excess_nll >= 0 and max_excess_nll < float("inf")):
            raise ConfigError(f"--max-excess-nll: expected nats/token >= 0, got {max_excess_nll}")
        th = Thresholds(max_excess_nll, th.min_greedy_agreement)
    if min_greedy is not None:
        if not (0 <= min_greedy <= 1):
            raise ConfigError(f"--min-greedy-agreement: expected 0..1, got {min_greedy}")
        th = Thresholds(th.max_excess_nll, min_greedy)
    return th


def probe_spec(
    probe: bool, reference: int | None, max_excess_nll: float | None, min_greedy: float | None
) -> ProbeSpec | None:
    """``bench``'s probe options -> a ProbeSpec (None without --probe or --reference)."""
    th = thresholds(max_excess_nll, min_greedy)
    if not probe and reference is None:
        if max_excess_nll is not None or min_greedy is not None:
            raise ConfigError("--max-excess-nll/--min-greedy-agreement need --reference")
        return None
    ref = load_reference(reference) if reference is not None else None
    return ProbeSpec(ref, reference, th)


def compare_agreement(base: dict[str, Any], row: dict[str, Any]) -> dict[str, Any] | None:
    """``compare``: a stored row's output agreement with the baseline row, when both were
    probed with the same set. The row's own teacher-forced verdict is used when it was probed
    against that very baseline; else the agreed-prefix estimate from the two stored outputs. A
    row judged WRONG_OUTPUT against any reference at bench time stays so."""
    bp = base["result"].get("probe") or {}
    rp = row["result"].get("probe") or {}
    own = rp.get("agreement")
    if own and str(own.get("reference")) == str(base["id"]):
        return {**own, "via": via(rp)}
    if bp.get("outputs") and rp.get("outputs"):
        if bp.get("sha256") != rp.get("sha256"):
            return {"verdict": None, "note": "probed with different probe sets: not compared"}
        if (bp.get("endpoint") or "native") != (rp.get("endpoint") or "native"):
            return {"verdict": None, "note": "probed through different APIs: not compared"}
        a = agree(
            [ProbeOutput.from_dict(o) for o in bp["outputs"]],
            [ProbeOutput.from_dict(o) for o in rp["outputs"]],
        )
        return {**unconfirmed(a.to_dict(), base["id"]), "reference": base["id"], "via": via(rp)}
    if own and own.get("verdict") == WRONG_OUTPUT:
        return {**own, "via": via(rp)}
    return None


def probe_run(run_id: str, spec: ProbeSpec) -> dict[str, Any]:
    """``probe_step`` on a run's own server (found and verified from the store, as ``bench
    RUN`` does)."""
    from glmserve.bench.session import endpoint

    with endpoint(run_id, None) as target:
        return probe_step(target.base, spec)
