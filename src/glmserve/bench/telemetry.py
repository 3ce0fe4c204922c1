"""Server telemetry: SGLang's Prometheus ``/metrics`` scraped every ``--metrics-interval``.

Why: a level's end-to-end numbers say *that* a config lost, the server's own gauges over the
level (queue depth, KV usage, cache hit rate, generation throughput) say *why*. SGLang serves
them with ``--enable-metrics``; names and types from ``srt/metrics/collector.py``:

- 0.5.9 (site-packages): ``sglang:num_running_reqs`` (line 307), ``sglang:num_used_tokens``
  (313), ``sglang:token_usage`` (319), ``sglang:gen_throughput`` (349),
  ``sglang:num_queue_reqs`` (355), ``sglang:cache_hit_rate`` (373), counters
  ``sglang:prompt_tokens_total`` (1105), ``sglang:generation_tokens_total`` (1111),
  ``sglang:cached_tokens_total`` (1168), histograms ``sglang:time_to_first_token_seconds``
  (1267), ``sglang:inter_token_latency_seconds`` (1274), ``sglang:e2e_request_latency_seconds``
  (1281), ``sglang:queue_time_seconds`` (530);
- sgl-project/sglang main at commit 00ae9c15 (after 0.5.23): the same names, types and
  documentation strings in ``SchedulerMetricsCollector.__init__``.

The text is parsed by ``prometheus_client.parser.text_string_to_metric_families`` (the
Prometheus project's own Python client), not by hand, through ``bench.prom_text``: a line it
refuses, a NaN or infinite value, a negative count or a repeated series is ignored and counted
(the level's ``telemetry.server.ignored`` and note say what), never a failed scrape or a false
figure. Gauges are summed over label sets
(one scheduler per TP/DP rank) except ratios (``token_usage``, ``cache_hit_rate``), which are
averaged. Each sample's time is ``time.perf_counter`` when its response arrived: on one host
this is the simulator's clock too, which is how the tests hold the series against its ground
truth.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from itertools import pairwise
from typing import Any

import httpx

from glmserve.bench.prom_text import MetricsText, ignored_note, read_metrics

# Series kept per sample: short key -> Prometheus name (gauges and counters).
GAUGES = {
    "num_running_reqs": "sglang:num_running_reqs",
    "num_queue_reqs": "sglang:num_queue_reqs",
    "num_used_tokens": "sglang:num_used_tokens",
    "token_usage": "sglang:token_usage",
    "cache_hit_rate": "sglang:cache_hit_rate",
    "gen_throughput": "sglang:gen_throughput",
}
COUNTERS = {
    "prompt_tokens_total": "sglang:prompt_tokens_total",
    "generation_tokens_total": "sglang:generation_tokens_total",
    "cached_tokens_total": "sglang:cached_tokens_total",
}
HISTOGRAMS = {
    "ttft_s": "sglang:time_to_first_token_seconds",
    "itl_s": "sglang:inter_token_latency_seconds",
    "e2e_s": "sglang:e2e_request_latency_seconds",
    "queue_time_s": "sglang:queue_time_seconds",
}
RATIOS = {"token_usage", "cache_hit_rate"}
RANK_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank")
MAX_POINTS = 600  # per series per level: ten minutes at 1 s, then evenly thinned
DEFAULT_INTERVAL_S = 1.0


def _rank(v: str | None) -> int:
    try:
        return int(v) if v is not None else 0
    except ValueError:
        return 0


def parse_metrics(text: str) -> dict[str, float]:
    """``/metrics`` text -> {short key: value}; histograms as ``<key>_sum``/``<key>_count``
    (what was ignored: ``parse_metrics_noted``)."""
    return parse_metrics_noted(text)[0]


def parse_metrics_noted(text: str) -> tuple[dict[str, float], MetricsText]:
    """``parse_metrics`` and the reading it came from (its ``ignored`` counts).

    One reading per DP rank: label sets that differ only in ``tp_rank``/``pp_rank``/
    ``moe_ep_rank`` are one scheduler group seen from several ranks, and the lowest rank's
    is kept. SGLang reports from ``attn_tp_rank == 0`` only unless
    ``--enable-metrics-for-all-schedulers`` (0.5.9 ``scheduler_metrics_mixin.py:100``), where
    summing every rank would count each request TP times. DP ranks are then summed."""
    reading = read_metrics(text)
    # name -> {labels without the rank labels: (rank tuple, value)}: one reading per DP rank
    per: dict[str, dict[tuple, tuple[tuple, float]]] = {}
    for s in reading.samples:
        if s.name.endswith("_bucket") or s.name.endswith("_created"):
            continue
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k not in RANK_LABELS))
        rank = tuple(_rank(s.labels.get(k)) for k in RANK_LABELS)
        have = per.setdefault(s.name, {}).get(key)
        if have is None or rank < have[0]:
            per[s.name][key] = (rank, s.value)
    by_name = {n: [v for _, v in d.values()] for n, d in per.items()}
    out: dict[str, float] = {}
    for key, name in {**GAUGES, **COUNTERS}.items():
        vals = by_name.get(name)
        if vals:
            out[key] = sum(vals) / len(vals) if key in RATIOS else sum(vals)
    for key, name in HISTOGRAMS.items():
        for part in ("sum", "count"):
            vals = by_name.get(f"{name}_{part}")
            if vals:
                out[f"{key}_{part}"] = sum(vals)
    return out, reading


def downsample(n: int, limit: int = MAX_POINTS) -> list[int]:
    """Indices of at most ``limit`` of ``n`` samples, evenly spread, first and last kept.
    Whole samples are kept (never averaged), so each stored point is a real reading."""
    if n <= limit:
        return list(range(n))
    step = (n - 1) / (limit - 1)
    return sorted({round(i * step) for i in range(limit)})


class MetricsSampler:
    """Scrapes ``/metrics`` on a thread every ``interval`` seconds during one level.

    Never blocks or fails the level: a scrape that errors is counted, not raised. A server
    without ``--enable-metrics`` (404) stops the sampler after the first try with a note."""

    def __init__(self, base_url: str, interval: float = DEFAULT_INTERVAL_S) -> None:
        self.base_url = base_url.rstrip("/")
        self.interval = interval
        self.times: list[float] = []
        self.samples: list[dict[str, float]] = []
        self.errors = 0
        self.note: str | None = None
        # samples ignored over the level's scrapes, by reason (bench.prom_text)
        self.ignored: Counter[str] = Counter()
        self.ignored_examples: dict[str, list[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="metrics-sampler")
        self.t0 = 0.0

    def scrape_once(self, client: httpx.Client) -> bool:
        """One scrape; False when there is nothing to scrape (no ``--enable-metrics``)."""
        try:
            r = client.get(self.base_url + "/metrics")
        except httpx.HTTPError:
            self.errors += 1
            return True
        t = time.perf_counter()
        if r.status_code == 404:
            self.note = "the server does not serve /metrics (start it with --enable-metrics)"
            return False
        if r.status_code != 200:
            self.errors += 1
            return True
        parsed, reading = parse_metrics_noted(r.text)
        self.ignored.update(reading.ignored)
        for reason, names in reading.examples.items():
            have = self.ignored_examples.setdefault(reason, [])
            have.extend(n for n in names if n not in have and len(have) < 3)
        if not reading.samples:  # nothing usable at all: a failed scrape, not a zero reading
            self.errors += 1
            self.note = "a /metrics answer held no usable sample"
            return True
        self.times.append(t)
        self.samples.append(parsed)
        return True

    def _loop(self) -> None:
        with httpx.Client(timeout=max(2.0, self.interval)) as c:
            nxt = time.perf_counter()
            while not self._stop.is_set():
                if not self.scrape_once(c):
                    return
                nxt += self.interval
                self._stop.wait(max(0.0, nxt - time.perf_counter()))

    def __enter__(self) -> MetricsSampler:
        self.t0 = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=max(3.0, self.interval + 2.0))

    def _rate(self, key: str, i: int) -> float | None:
        """A counter's rate over the raw interval ending at sample ``i`` (None for the first
        sample, a missing reading or a counter reset): computed before any thinning."""
        if i == 0:
            return None
        a, b = self.samples[i - 1].get(key), self.samples[i].get(key)
        dt = self.times[i] - self.times[i - 1]
        if a is None or b is None or b < a or dt <= 0:
            return None
        return (b - a) / dt

    def series(self) -> dict[str, Any]:
        """The level's series (JSON-ready): ``t`` in seconds from the level's start, one list
        per key; ``t0_perf`` is the level start on ``time.perf_counter`` (for ground truth)."""
        keep = downsample(len(self.samples))
        keys = sorted({k for s in self.samples for k in s})
        doc: dict[str, Any] = {
            "interval_s": self.interval,
            "t0_perf": self.t0,
            "samples": len(self.samples),
            "kept": len(keep),
            "errors": self.errors,
            "t": [round(self.times[i] - self.t0, 4) for i in keep],
        }
        for k in keys:
            doc[k] = [self.samples[i].get(k) for i in keep]
        if "generation_tokens_total" in keys:
            doc["generation_tok_s"] = [self._rate("generation_tokens_total", i) for i in keep]
        # over the raw samples: thinning could hide a counter that went back
        resets = [k for k in COUNTERS if not _never_decreases([x.get(k) for x in self.samples])]
        if resets:
            doc["counter_resets"] = resets
        reset_note = (
            f"{', '.join(resets)} went back during the level (a restarted server?): no rate "
            "across the reset"
            if resets
            else None
        )
        notes = [
            n
            for n in (self.note, ignored_note(self.ignored, self.ignored_examples), reset_note)
            if n
        ]
        if self.ignored:
            doc["ignored"] = dict(sorted(self.ignored.items()))
        if notes:
            doc["note"] = "; ".join(notes)
        return doc


def summary(series: dict[str, Any]) -> dict[str, Any]:
    """Per-level figures from a series: peaks and means of the gauges, the level's cache hit
    rate from the counters' deltas (cached / prompt tokens) when the server reports them."""
    out: dict[str, Any] = {}
    for k in ("num_running_reqs", "num_queue_reqs", "token_usage"):
        vals = [v for v in series.get(k) or [] if v is not None]
        if vals:
            out[f"{k}_max"] = max(vals)
            out[f"{k}_mean"] = sum(vals) / len(vals)
    pt, ct = series.get("prompt_tokens_total") or [], series.get("cached_tokens_total") or []
    if len(pt) >= 2 and len(ct) >= 2 and None not in (pt[0], pt[-1], ct[0], ct[-1]):
        dp, dc = pt[-1] - pt[0], ct[-1] - ct[0]
        reset = {"prompt_tokens_total", "cached_tokens_total"} & set(
            series.get("counter_resets") or []
        )
        if reset or not (_never_decreases(pt) and _never_decreases(ct)):
            # a counter went back (a restarted server): the end-to-end delta is not the level's
            out["counters_reset"] = True
        elif dp > 0 and 0 <= dc <= dp:
            out["cache_hit_rate_counters"] = dc / dp
    return out


def _never_decreases(values: list[float | None]) -> bool:
    seen = [v for v in values if v is not None]
    return all(b >= a for a, b in pairwise(seen))


# -- the bench's hooks (session.py) ------------------------------------------------------


def gpu_transport(run_id: str | None, base_url: str) -> tuple[Any, str | None]:
    """The server's host's transport for ``nvidia-smi``: the run's host, else this machine
    when ``--url`` is a loopback address; (None, why) when the host is unknown."""
    from urllib.parse import urlsplit

    from glmserve.remote.hosts import LOCAL, HostConfig
    from glmserve.remote.transport import LocalTransport

    if run_id is not None:
        from glmserve.remote.process import transport_for_run
        from glmserve.store import RunStore

        with RunStore.open() as store:
            run = store.get_run(run_id)
        return transport_for_run(run), None
    host = (urlsplit(base_url).hostname or "").lower()
    if host in ("localhost", "127.0.0.1", "::1") or host.startswith("127."):
        return LocalTransport(HostConfig(name=LOCAL)), None
    return None, f"no GPU telemetry for --url {base_url}: its host is unknown (bench a RUN id)"


class LevelTelemetry:
    """Both samplers around one level; ``attach`` puts their series and figures on it."""

    def __init__(self, base_url: str, interval: float, gpu: Any = None) -> None:
        from glmserve.bench.gpu_telemetry import LevelGpu

        self.metrics = MetricsSampler(base_url, interval) if interval > 0 else None
        self.gpu = LevelGpu(gpu) if gpu is not None else None

    def __enter__(self) -> LevelTelemetry:
        if self.gpu is not None:
            self.gpu.__enter__()
        if self.metrics is not None:
            self.metrics.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.metrics is not None:
            self.metrics.__exit__()
        if self.gpu is not None:
            self.gpu.__exit__()

    def attach(self, level: dict[str, Any]) -> None:
        doc: dict[str, Any] = {}
        if self.metrics is not None:
            s = self.metrics.series()
            doc["server"] = s
            doc["server_summary"] = summary(s)
            _drop_figures_across_a_reset(level, s.get("counter_resets") or [])
        if self.gpu is not None:
            out_tokens = int(level.get("output_tokens") or 0)
            g = self.gpu.doc(out_tokens)
            if g is not None:
                doc["gpu"] = g
                if level.get("completed") == 0 and g.get("output_tok_per_j") is not None:
                    # Tokens of failed streams only: no output tok/s is shown for such a
                    # level, so no tok/J either (the energy is still in telemetry.gpu).
                    g["output_tok_per_j"] = None
                    g["note"] = "no request completed in this level: no tokens per joule"
                if g.get("output_tok_per_j") is not None:
                    level["output_tok_per_j"] = g["output_tok_per_j"]
                    level["power_w_mean"] = g["power_w_mean"]
                    level["energy_j"] = g["energy_j"]
                    level["gpu_throttled"] = g["throttled"]
        if doc:
            level["telemetry"] = doc


# The level's before/after figures (bench.server_probe.metrics_delta) per counter they use.
_DELTA_FIGURES = {"generation_tokens_total": ("generation_tokens", "generation_tok_s")}


def _drop_figures_across_a_reset(level: dict[str, Any], resets: list[str]) -> None:
    """A counter the series saw go back and grow past its start again: the two scrapes
    around the level cannot see that restart, and their delta undercounts. Its figures go,
    with a note (the before/after check drops them itself when the counter ended lower)."""
    srv = level.get("server")
    if not isinstance(srv, dict):
        return
    for key in resets:
        gone = [f for f in _DELTA_FIGURES.get(key, ()) if srv.pop(f, None) is not None]
        if gone:
            srv.setdefault("metrics_notes", []).append(
                f"sglang:{key} went back during the level (a restarted server?): no "
                f"{', '.join(gone)} from the scrapes before and after it"
            )


def series_lines(result_id: Any, result: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored result's telemetry as one JSON object per sample (``results export --format
    series``): ``source`` "server" (one /metrics scrape, every series key) or "gpu" (one
    nvidia-smi line: ``gpu`` index, ``power_w``, ``sm_mhz``); ``t`` is seconds from the
    level's start. Long format, so a script (pandas.read_json(lines=True)) needs no schema."""
    out: list[dict[str, Any]] = []
    for n, lv in enumerate(result.get("levels") or []):
        tel = lv.get("telemetry") or {}
        head = {"id": result_id, "level": n, "concurrency": lv.get("concurrency"),
                "request_rate": lv.get("request_rate")}  # fmt: skip
        srv = tel.get("server") or {}
        ts = srv.get("t") or []
        keys = [k for k, v in srv.items() if isinstance(v, list) and k != "t" and len(v) == len(ts)]
        for i, t in enumerate(ts):
            out.append({**head, "source": "server", "t": t, **{k: srv[k][i] for k in keys}})
        for idx, g in sorted(((tel.get("gpu") or {}).get("series") or {}).items()):
            for i, t in enumerate(g.get("t") or []):
                out.append({**head, "source": "gpu", "gpu": int(idx), "t": t,
                            "power_w": g["power_w"][i], "sm_mhz": g["sm_mhz"][i]})  # fmt: skip
    return out
