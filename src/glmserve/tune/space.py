"""What ``glmserve tune`` searches and how it scores: pure parsing and arithmetic, no I/O.

A *config* is one assignment of the searched server flags (``{"mem-fraction-static": "0.9"}``);
a *trial* is a config at one load (concurrency). Values stay the strings the user typed, so a
config renders back into ``--set server.KEY=VALUE`` and into a profile exactly as given.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from glmserve.commalist import comma_list
from glmserve.errors import ConfigError

OBJECTIVES = ("output_tok_s", "goodput", "decode_tok_s")
SLO_KEYS = ("ttft_p99_ms", "tpot_p99_ms", "itl_p99_ms", "e2e_p99_ms")
_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
# Server flags that say which server it is or where it runs, not how fast: a value of one is
# no configuration to compare (a local trial takes a free port whatever --search says; another
# model is another tune). Refused in --search; the tune's --help lists them (keep in sync).
UNTUNABLE = (
    "port",
    "host",
    "model-path",
    "tokenizer-path",
    "served-model-name",
    "nnodes",
    "node-rank",
    "dist-init-addr",
    "nccl-init-addr",
)


@dataclass(frozen=True)
class Budget:
    """``--budget``: a number of trials, or a wall-clock duration in seconds."""

    trials: int | None = None
    seconds: float | None = None

    def describe(self) -> str:
        return f"{self.trials} trials" if self.trials is not None else f"{self.seconds:g} s"


def parse_search(items: list[str]) -> list[tuple[str, list[str]]]:
    """``server.KEY=v1,v2`` (repeatable) -> ``[(KEY, [v1, v2]), ...]`` in the given order."""
    out: list[tuple[str, list[str]]] = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.startswith("server."):
            raise ConfigError(
                f"--search {item!r}: expected server.KEY=V1,V2,... "
                "e.g. server.mem-fraction-static=0.88,0.92"
            )
        name = key[len("server.") :]
        if not _KEY_RE.match(name):
            raise ConfigError(f"--search {item!r}: {name!r} is not a server flag name")
        if name in UNTUNABLE:
            raise ConfigError(
                f"--search {item!r}: server.{name} names the server or where it runs, not a "
                f"setting to tune (not searched: {', '.join(UNTUNABLE)})"
            )
        if not raw.strip():
            raise ConfigError(f"--search {item!r}: give at least one value")
        values = comma_list(raw, f"--search {item!r}")  # "8,,32": a typo, refused
        if len(set(values)) != len(values):
            raise ConfigError(f"--search {item!r}: a value is listed twice")
        if any(name == k for k, _ in out):
            raise ConfigError(f"--search: server.{name} is given twice")
        out.append((name, values))
    if not out:
        raise ConfigError("--search is required, e.g. --search server.max-running-requests=8,32")
    return out


def parse_slo(text: str | None) -> dict[str, float]:
    """``ttft_p99_ms=2000,tpot_p99_ms=50`` -> dict; keys from ``SLO_KEYS``."""
    if not text:
        return {}
    out: dict[str, float] = {}
    for part in comma_list(text, "--slo", "ttft_p99_ms=2000,tpot_p99_ms=50"):
        key, sep, raw = part.partition("=")
        if not sep or key not in SLO_KEYS:
            raise ConfigError(
                f"--slo {part.strip()!r}: expected KEY=MS with KEY one of {', '.join(SLO_KEYS)}"
            )
        try:
            val = float(raw)
        except ValueError as exc:
            raise ConfigError(f"--slo {part.strip()!r}: {raw!r} is not a number") from exc
        if not math.isfinite(val) or val <= 0:
            raise ConfigError(f"--slo {part.strip()!r}: must be a positive number of ms")
        out[key] = val
    return out


def parse_budget(text: str | None) -> Budget | None:
    """``40`` (trials) or ``90s`` / ``15m`` / ``2h`` (duration); None = no budget (full grid)."""
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(
            f"--budget {text!r}: expected a trial count (40) or a duration (90s, 15m)"
        )
    if not m.group(2):
        if "." in m.group(1):
            raise ConfigError(f"--budget {text!r}: a trial count is a whole number")
        return Budget(trials=int(m.group(1)))
    return Budget(seconds=float(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)])


def config_key(config: dict[str, str]) -> str:
    """Stable id of a config: ``k1=v1,k2=v2`` in search order."""
    return ",".join(f"{k}={v}" for k, v in config.items())


def grid(space: list[tuple[str, list[str]]]) -> list[dict[str, str]]:
    """Every combination, the first key varying slowest."""
    configs: list[dict[str, str]] = [{}]
    for key, values in space:
        configs = [{**c, key: v} for c in configs for v in values]
    return configs


def starting_config(
    space: list[tuple[str, list[str]]], profile_server: dict[str, Any]
) -> dict[str, str]:
    """The profile's own value where it is one of the searched values, else the first value."""
    out: dict[str, str] = {}
    for key, values in space:
        current = profile_server.get(key)
        text = _yaml_text(current) if current is not None else None
        out[key] = text if text in values else values[0]
    return out


def _yaml_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------- scoring


def level_metrics(level: dict[str, Any], slo: dict[str, float], scale: float = 1.0) -> dict:
    """The figures a trial keeps from one bench level (times in ms, rates in tok/s).

    ``scale`` converts a simulator running ``sim.speed`` times faster back to the modelled
    box (rates / scale, times * scale) so SLOs are in the box's units. ``goodput`` is the
    bench's own figure when it reports one (``goodput_tok_s``); otherwise output tok/s when
    every SLO holds at p99 (all requests within it, at this resolution), else 0.
    """

    def p(name: str, q: str = "p99") -> float | None:
        v = (level.get(name) or {}).get(q)
        return None if v is None else float(v) * scale

    out_tok = level.get("output_tok_s")
    m: dict[str, Any] = {
        "output_tok_s": None if out_tok is None else float(out_tok) / scale,
        "decode_tok_s": None,
        "ttft_p50_ms": p("ttft_ms", "p50"),
        "ttft_p99_ms": p("ttft_ms"),
        "tpot_p99_ms": p("tpot_ms"),
        "itl_p99_ms": p("itl_ms"),
        "e2e_p99_ms": p("e2e_ms"),
        "completed": int(level.get("completed") or 0),
        "errors": int(level.get("errors") or 0),
    }
    dec = (level.get("decode_tok_s") or {}).get("p50")
    m["decode_tok_s"] = None if dec is None else float(dec) / scale
    m["slo_violations"] = slo_violations(m, slo)
    m["meets_slo"] = not m["slo_violations"] and m["completed"] > 0 and not m["errors"]
    good = level.get("goodput_tok_s")
    if good is not None:
        m["goodput"] = float(good) / scale
    else:
        m["goodput"] = (m["output_tok_s"] or 0.0) if m["meets_slo"] else 0.0
    if level.get("repeat_values"):  # --repeat: per-repeat values (unscaled: ratios only)
        m["repeat_values"] = {
            "output_tok_s": list(level["repeat_values"].get("output_tok_s") or []),
            "decode_tok_s": list(level["repeat_values"].get("decode_tok_s") or []),
        }
    return m


def slo_violations(metrics: dict[str, Any], slo: dict[str, float]) -> list[str]:
    """``["tpot_p99_ms 61.2 > 50"]`` for each SLO the trial misses (a missing figure misses)."""
    bad = []
    for key, limit in slo.items():
        v = metrics.get(key)
        if v is None or v > limit:
            bad.append(f"{key} {'-' if v is None else f'{v:.1f}'} > {limit:g}")
    return bad


def pareto_front(points: list[tuple[float, float, Any]]) -> list[Any]:
    """Items not dominated in (higher throughput, lower latency): ``(tput, lat, item)``."""
    front = []
    for t, lat, item in points:
        dominated = any((t2 >= t and l2 <= lat) and (t2 > t or l2 < lat) for t2, l2, _ in points)
        if not dominated:
            front.append((t, lat, item))
    return [item for _, _, item in sorted(front, key=lambda x: x[0])]
