"""What the bench asks the server outside the measured streams: ``/server_info`` (version,
model, ``last_gen_throughput``), ``/v1/models`` and ``/metrics`` counters around a level,
and a background sampler of ``/server_info`` during a level."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import httpx

from glmserve.errors import TransportError


def probe_server(base_url: str, timeout: float = 10.0) -> dict[str, Any]:
    """``/server_info`` (or ``/get_server_info``) as a dict; TransportError if unreachable."""
    try:
        with httpx.Client(timeout=timeout) as c:
            for path in ("/server_info", "/get_server_info"):
                r = c.get(base_url + path)
                if r.status_code == 200:
                    data = r.json()
                    return data if isinstance(data, dict) else {}
            r = c.get(base_url + "/health")
            if r.status_code >= 500:
                raise TransportError(f"server at {base_url} is not healthy (HTTP {r.status_code})")
            return {}
    except httpx.HTTPError as exc:
        raise TransportError(f"cannot reach server at {base_url}: {exc}") from exc
    except (ValueError, RecursionError):  # not JSON, or nested past Python's parser
        return {}


def resolve_model(base_url: str, timeout: float = 10.0) -> str:
    """The served model name for OpenAI requests (first of ``/v1/models``), else "default"."""
    try:
        with httpx.Client(timeout=timeout) as c:
            data = c.get(base_url + "/v1/models").json()
        return str(data["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError, RecursionError):
        return "default"


def last_gen_throughput(info: Any) -> float | None:
    """``internal_states[0].last_gen_throughput`` (top level in older releases); None where
    the server's answer has another shape (a list, a string or an object for the number)."""
    if not isinstance(info, dict):
        return None
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        v = _finite_number(states[0].get("last_gen_throughput"))
        if v is not None:
            return v
    return _finite_number(info.get("last_gen_throughput"))


def _finite_number(v: Any) -> float | None:
    """``v`` as a float when it is a finite JSON number (not a bool, string or object)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer past a double
        return None
    return f if math.isfinite(f) else None


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text -> {metric name: value summed over label sets} (pure)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, rest = line.rpartition(" ")
        if not head:
            continue
        if rest and head and not head.endswith("}") and " " in head:  # "name value timestamp"
            head, _, rest = head.rpartition(" ")
        name = head.split("{", 1)[0].strip()
        try:
            out[name] = out.get(name, 0.0) + float(rest)
        except ValueError:
            continue
    return out


def _metric(m: dict[str, float], *names: str) -> float | None:
    for n in names:
        if n in m:
            return m[n]
    return None


def metrics_delta(before: dict[str, float], after: dict[str, float], seconds: float) -> dict:
    """Server-side figures over a level from two ``/metrics`` scrapes (pure)."""
    out: dict[str, Any] = {}
    if not before or not after:
        return out

    def delta(*names: str) -> float | None:
        a, b = _metric(after, *names), _metric(before, *names)
        return None if a is None or b is None else a - b

    gen = delta("sglang:generation_tokens_total")
    if gen is not None:
        out["generation_tokens"] = gen
        if seconds > 0:
            out["generation_tok_s"] = gen / seconds
    for key, base in (
        ("ttft_mean_ms", "sglang:time_to_first_token_seconds"),
        ("itl_mean_ms", "sglang:inter_token_latency_seconds"),
        ("tpot_mean_ms", "sglang:time_per_output_token_seconds"),
        ("e2e_mean_ms", "sglang:e2e_request_latency_seconds"),
    ):
        s, c = delta(base + "_sum"), delta(base + "_count")
        if s is not None and c:
            out[key] = 1000.0 * s / c
    gauge = _metric(after, "sglang:gen_throughput")
    if gauge is not None:
        out["gen_throughput_gauge"] = gauge
    return out


def scrape_metrics(base_url: str, timeout: float = 5.0) -> dict[str, float]:
    """``/metrics`` parsed, or {} when the server runs without ``--enable-metrics``."""
    try:
        r = httpx.get(base_url + "/metrics", timeout=timeout)
    except httpx.HTTPError:
        return {}
    if r.status_code != 200:
        return {}
    return parse_prometheus(r.text)


class ServerSampler:
    """Polls ``/server_info`` once a second on a thread during a level (never blocks it)."""

    def __init__(self, base_url: str, interval: float = 1.0) -> None:
        self.base_url = base_url
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        with httpx.Client(timeout=2.0) as c:
            while not self._stop.wait(self.interval):
                try:
                    r = c.get(self.base_url + "/server_info")
                    v = last_gen_throughput(r.json()) if r.status_code == 200 else None
                except (httpx.HTTPError, ValueError, RecursionError):
                    v = None
                if v is not None:
                    self.samples.append((time.perf_counter(), v))

    def __enter__(self) -> ServerSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=3.0)
