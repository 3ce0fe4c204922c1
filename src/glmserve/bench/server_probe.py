"""What the bench asks the server outside the measured streams: ``/server_info`` (version,
model, ``last_gen_throughput``), ``/v1/models`` and ``/metrics`` counters around a level,
and a background sampler of ``/server_info`` during a level."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import httpx

from glmserve.bench.prom_text import read_metrics
from glmserve.errors import TransportError


def probe_server(base_url: str, timeout: float = 10.0) -> dict[str, Any]:
    """``/server_info`` (or ``/get_server_info``) as a dict; TransportError if unreachable."""
    return probe_server_noted(base_url, timeout)[0]


def probe_server_noted(base_url: str, timeout: float = 10.0) -> tuple[dict[str, Any], str | None]:
    """``(info, problem)``: ``/server_info`` (or ``/get_server_info``) as a dict, and what was
    wrong with a malformed answer (None if nothing).

    No answer at all (refused, reset before a byte, timed out) is TransportError (exit 5, or
    the run's crash verdict): nothing can be measured. An answer that is there but broken
    (bad HTTP framing, a body that is not a JSON object) is the server's fault and says
    nothing of its streams: the bench goes on without the server's version and flags, and
    the problem, naming the URL, becomes a note of the stored result."""
    url = base_url + "/server_info"
    try:
        with httpx.Client(timeout=timeout) as c:
            for path in ("/server_info", "/get_server_info"):
                url = base_url + path
                r = c.get(url)
                if r.status_code == 200:
                    return _info_object(r, url)
            url = base_url + "/health"
            r = c.get(url)
            if r.status_code >= 500:
                raise TransportError(f"server at {base_url} is not healthy (HTTP {r.status_code})")
            return {}, None
    except (httpx.RemoteProtocolError, httpx.DecodingError) as exc:
        if "without sending a response" in str(exc):  # h11: closed before a byte came back
            raise TransportError(f"cannot reach server at {base_url}: {exc}") from exc
        return {}, _unknown(url, f"bad HTTP framing: {exc}")
    except httpx.HTTPError as exc:
        raise TransportError(f"cannot reach server at {base_url}: {exc}") from exc


def _info_object(r: httpx.Response, url: str) -> tuple[dict[str, Any], str | None]:
    try:
        data = r.json()
    except RecursionError:
        return {}, _unknown(url, "a JSON body nested too deeply to read")
    except ValueError as exc:  # not JSON (or not UTF-8)
        return {}, _unknown(url, f"a body that is not JSON ({str(exc)[:120]})")
    if not isinstance(data, dict):
        return {}, _unknown(url, f"a JSON {type(data).__name__}, not an object")
    return data, None


def _unknown(url: str, what: str) -> str:
    return (
        f"{url} answered with {what}; the server's version, model and flags are unknown "
        "for this result"
    )


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


class MetricsTotals(dict[str, float]):
    """One ``/metrics`` scrape summed per name, and what was ignored reading it (a note, or
    None): a dict, so a scrape compares and prints like the figures it holds."""

    ignored: str | None = None


def parse_prometheus(text: str) -> MetricsTotals:
    """Prometheus text -> {metric name: value summed over label sets} (pure). Never raises:
    what cannot carry a figure (a line the parser refuses, NaN, +-Inf, a negative count, a
    repeated series) is left out and named in ``.ignored`` (``bench.prom_text``)."""
    reading = read_metrics(text)
    out = MetricsTotals()
    for s in reading.samples:
        out[s.name] = out.get(s.name, 0.0) + s.value
    out.ignored = reading.note()
    return out


def _metric(m: dict[str, float], *names: str) -> float | None:
    for n in names:
        if n in m:
            return m[n]
    return None


def metrics_delta(before: dict[str, float], after: dict[str, float], seconds: float) -> dict:
    """Server-side figures over a level from two ``/metrics`` scrapes (pure).

    A counter lower after the level than before it was reset (the server restarted): no
    delta and no rate is reported for it, and ``metrics_notes`` says so, as it says what
    either scrape ignored."""
    out: dict[str, Any] = {}
    # each scrape's note once (a server that always sends NaN says so in both)
    notes = list(dict.fromkeys(n for n in (getattr(before, "ignored", None),
                                            getattr(after, "ignored", None)) if n))  # fmt: skip
    if not before or not after:
        if notes:
            out["metrics_notes"] = notes
        return out
    went_back: list[str] = []

    def delta(*names: str) -> float | None:
        a, b = _metric(after, *names), _metric(before, *names)
        if a is None or b is None:
            return None
        if a < b:
            went_back.append(f"{names[0]} {b:g} -> {a:g}")
            return None
        return a - b

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
    if went_back:
        notes.append(
            "/metrics counters went back during the level (a restarted server?), no "
            "server-side figure from them: " + ", ".join(went_back)
        )
    if notes:
        out["metrics_notes"] = notes
    return out


def metrics_notes(levels: list[dict[str, Any]]) -> list[str]:
    """The result's notes for what the levels' ``/metrics`` scrapes ignored or refused."""
    out: list[str] = []
    for lv in levels:
        for note in (lv.get("server") or {}).get("metrics_notes") or []:
            out.append(f"level {lv.get('concurrency')}: {note}")
    return out


def scrape_metrics(base_url: str, timeout: float = 5.0) -> MetricsTotals:
    """``/metrics`` parsed, or empty when the server runs without ``--enable-metrics``."""
    try:
        r = httpx.get(base_url + "/metrics", timeout=timeout)
    except httpx.HTTPError:
        return MetricsTotals()
    if r.status_code != 200:
        return MetricsTotals()
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
