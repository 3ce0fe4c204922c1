"""What makes two stored bench results comparable, and which field differs when they are not.

A speedup means something only between results measured the same way: the same workload
(lengths, dataset, API), the same load shape (closed-loop levels or open-loop rates,
burstiness, concurrency cap) and, for the simulator, the same ``--sim-speed`` (a speed-10
simulator is 10x "faster" by construction). Those are the *settings* checked here.
What a comparison is meant to vary (profile, its argv, SGLang version, host, GPUs) is recorded
as *context* and shown, never refused. Pure: stored rows in, dicts out (``compare`` and
``report`` both use it, so they agree).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Settings that must be equal for a speedup to mean anything (key in result["settings"]).
SETTING_FIELDS: tuple[str, ...] = ("mode", "api", "input_len", "output_len", "random_range_ratio",
                                   "dataset_path", "request_rate", "burstiness",
                                   "max_concurrency")  # fmt: skip
# Older results lack the newer settings: these are what they implicitly used.
DEFAULTS: dict[str, Any] = {
    "random_range_ratio": 1.0,
    "dataset_path": None,
    "request_rate": None,
    "burstiness": 1.0,
    "max_concurrency": None,
}
CONTEXT_FIELDS: tuple[str, ...] = ("profile", "argv_hash", "sglang_version", "host", "gpu_model",
                                   "gpu_count")  # fmt: skip


def argv_hash(argv: Any) -> str | None:
    """A short stable hash of a rendered server argv (list or string), None without one."""
    if not argv:
        return None
    text = json.dumps(argv, sort_keys=True) if not isinstance(argv, str) else argv
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def gpu_summary(gpus: Any) -> tuple[str | None, int | None]:
    """(model, count) from ``nvidia-smi`` lines "NAME, MEM, DRIVER"; (None, None) without."""
    if not gpus or not isinstance(gpus, list):
        return None, None
    names = sorted({str(g).split(",")[0].strip() for g in gpus})
    return " + ".join(names), len(gpus)


def sim_speed(row: dict[str, Any]) -> float | None:
    """The simulator's ``--sim-speed`` a result was measured against; None for a real server."""
    res = row.get("result") or {}
    for src in (res.get("server") or {}, row.get("meta") or {}, res.get("meta") or {}):
        v = src.get("sim_speed")
        if v is not None:
            return float(v)
    return None


def comparable_key(row: dict[str, Any]) -> dict[str, Any]:
    """The settings of a stored row that must match (see the module docstring)."""
    res = row.get("result") or {}
    st = res.get("settings") or {}
    key = {f: st.get(f, DEFAULTS.get(f)) for f in SETTING_FIELDS}
    key["sim_speed"] = sim_speed(row)
    return key


def context(row: dict[str, Any]) -> dict[str, Any]:
    """What a comparison is meant to vary: profile, argv hash, version, host, GPUs."""
    res = row.get("result") or {}
    meta = {**(res.get("meta") or {}), **(row.get("meta") or {})}
    model, count = gpu_summary(meta.get("gpus"))
    return {
        "profile": meta.get("profile"),
        "argv_hash": meta.get("argv_hash") or argv_hash(meta.get("argv")),
        "sglang_version": meta.get("sglang_version") or (res.get("server") or {}).get("version"),
        "host": meta.get("host") or meta.get("client_host"),
        "gpu_model": model,
        "gpu_count": count,
    }


def levels_of(row: dict[str, Any]) -> list[Any]:
    """The concurrency levels (closed loop) or rates (open loop) a result measured."""
    lvs = (row.get("result") or {}).get("levels") or []
    return [lv.get("request_rate") or lv.get("concurrency") for lv in lvs]


def differences(base: dict[str, Any], row: dict[str, Any]) -> list[dict[str, Any]]:
    """Settings in which ``row`` differs from ``base``: ``[{field, baseline, value}]``."""
    a, b = comparable_key(base), comparable_key(row)
    out = [{"field": f, "baseline": a[f], "value": b[f]} for f in a if a[f] != b[f]]
    if (a["sim_speed"] is None) != (b["sim_speed"] is None):
        out = [d for d in out if d["field"] != "sim_speed"]
        out.append({"field": "simulated", "baseline": a["sim_speed"] is not None,
                    "value": b["sim_speed"] is not None})  # fmt: skip
    return out


def describe(diffs: list[dict[str, Any]]) -> str:
    """``sim_speed 10 vs 1, output_len 64 vs 128`` (value vs baseline)."""
    return ", ".join(f"{d['field']} {_v(d['value'])} vs {_v(d['baseline'])}" for d in diffs)


def _v(x: Any) -> str:
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    if isinstance(x, list):
        return ",".join(_v(i) for i in x)
    return "-" if x is None else str(x)


def comparable_block(row: dict[str, Any]) -> dict[str, Any]:
    """Everything stored with a result that decides what it may be compared with."""
    return {"settings": comparable_key(row), **context(row)}
