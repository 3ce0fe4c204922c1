"""The built-in probe set for output agreement: a few dozen greedy prompts shipped as data.

The set is package data (``glmserve/data/probes/probes_v1.json``) so every install probes with
the same prompts; its sha256 is recorded in each probed result, and two results are compared
only when their probe sets hash the same (a changed set is a different measurement).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources

PROBE_SET_FILE = "probes_v1.json"


@dataclass(frozen=True)
class Probe:
    """One prompt of the set: sent greedy (temperature 0) with ``max_new_tokens``."""

    id: str
    kind: str
    prompt: str
    max_new_tokens: int


@dataclass(frozen=True)
class ProbeSet:
    name: str
    sha256: str
    probes: tuple[Probe, ...]


def _raw() -> bytes:
    return resources.files("glmserve").joinpath("data", "probes", PROBE_SET_FILE).read_bytes()


def load_probe_set() -> ProbeSet:
    """The shipped probe set with the sha256 of its file's bytes."""
    raw = _raw()
    doc = json.loads(raw)
    probes = tuple(
        Probe(str(p["id"]), str(p["kind"]), str(p["prompt"]), int(p["max_new_tokens"]))
        for p in doc["probes"]
    )
    return ProbeSet(str(doc["name"]), hashlib.sha256(raw).hexdigest(), probes)
