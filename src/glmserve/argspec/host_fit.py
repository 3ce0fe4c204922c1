"""Which profiles can run on one host's GPU and SGLang release, and why not: the backend
facts table (backend_table.py) applied to each profile's attention backends, plus the
profile's own ``sglang:`` range. Pure; ``glmserve profiles --for-host`` reads the host."""

from __future__ import annotations

from typing import Any

from glmserve.argspec.backend_facts import GATHER_CAST_PATCH
from glmserve.argspec.validation import spec_backends, spec_kv_dtype, version_in_range
from glmserve.config.spec import LaunchSpec


def profile_fit(spec: LaunchSpec, arch: str, version: str) -> dict[str, Any]:
    """``{"runs": bool | None, "reasons": [...]}`` for ``spec`` on ``arch`` with ``version``.
    ``runs`` is None when the table has no fact for one of its backends there (unverified),
    False when a fact says it is refused or crashes, or the release is outside the profile's
    range."""
    from glmserve.argspec.backend_facts import verdict

    reasons: list[str] = []
    runs: bool | None = True
    if not version_in_range(version, spec.sglang_range):
        runs = False
        reasons.append(f"sglang {version} is outside the profile's range {spec.sglang_range}")
    backends = spec_backends(spec) or {"prefill": "flashinfer", "decode": "flashinfer"}
    found = verdict(backends, arch, version, spec_kv_dtype(spec))
    for row in found.rows.values():
        if row is None or row.outcome == "unverified":
            runs = None if runs else runs
        elif row.outcome != "runs":
            runs = False
    reasons.extend(found.reasons())
    if not reasons:
        notes = [r.caveat for r in found.rows.values() if r is not None and r.caveat]
        if GATHER_CAST_PATCH in spec.patches:  # the patch casts the batch's rows only
            notes = [n for n in notes if "whole" not in n] + [
                f"patch {GATHER_CAST_PATCH}: casts only the batch's KV rows; CUDA graphs off"
            ]
        reasons.extend(dict.fromkeys(notes))  # the trade-offs worth knowing, once each
    return {"runs": runs, "reasons": reasons}


def compute_cap_arch(text: str) -> str | None:
    """``nvidia-smi --query-gpu=compute_cap`` output (``12.0`` per GPU) -> ``sm120``; None
    when the GPUs differ or none is listed."""
    from glmserve.argspec.backend_facts import normalize_arch

    caps = {ln.strip() for ln in text.splitlines() if ln.strip()}
    if len(caps) != 1:
        return None
    return normalize_arch(caps.pop())
