"""``BenchResult``: the versioned outcome of one ``glmserve bench``, and what consumes it.

Measurement ends here; the table, ``--json``, ``--output FILE``, the run store row and
``glmserve compare`` all read this object (or its dict), so a stored result re-renders without
re-running (``glmserve.cli.views`` draws the table). ``version`` changes whenever a field's
meaning changes. Gates are pure checks on it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from glmserve.bench.metrics import PERCENTILES, level_metrics, percentile
from glmserve.bench.ratesweep import completion_rate, e2e_trend, ttft_growth
from glmserve.errors import ConfigError

RESULT_VERSION = 1


@dataclass
class BenchResult:
    mode: str  # "decode" | "concurrency"
    complete: bool
    levels: list[dict[str, Any]]
    decode_tok_s: float | None = None  # decode mode headline: median over streams of 1/TPOT
    ttft_ms: float | None = None  # decode mode: median TTFT
    stopped: str | None = None  # why the run is incomplete
    settings: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    gates: list[dict[str, Any]] = field(default_factory=list)
    sweep: dict[str, Any] | None = None  # --rate-sweep: rates tried, saturation
    # What a reader must know before quoting a figure (a level that never filled its slots);
    # printed under the table. Added without a version bump: older results simply lack it.
    notes: list[str] = field(default_factory=list)
    # bench --probe: the probe set's outputs and, with a reference, the agreement verdict
    # (bench.probe.probe_step). Added without a version bump: older results lack it.
    probe: dict[str, Any] | None = None
    # bench --repeat N (N > 1): every repeat as measured, and the 95% intervals of the
    # medians the figures above are (bench.repeats). Older results lack them.
    repeats: list[dict[str, Any]] | None = None
    ci: dict[str, Any] | None = None
    version: int = RESULT_VERSION

    @property
    def errors(self) -> int:
        return sum(int(lv.get("errors") or 0) for lv in self.levels)

    def level(self, concurrency: int) -> dict[str, Any] | None:
        return next((lv for lv in self.levels if lv["concurrency"] == concurrency), None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["errors"] = self.errors
        return {"version": d.pop("version"), **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BenchResult:
        if d.get("version") != RESULT_VERSION:
            raise ConfigError(f"unsupported bench result version {d.get('version')!r}")
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in names})


def summarize_level(
    records: list[Any],
    concurrency: int,
    workers: int,
    server: dict[str, Any],
    stopped: str | None,
    settings: Any = None,
    rate: float | None = None,
    not_run: int = 0,
) -> dict[str, Any]:
    """One level's JSON-ready summary from raw records (metrics) and server readings.

    ``settings`` (a ``BenchSettings``) supplies percentiles, SLOs and the per-request opt-in;
    an open-loop level (``rate`` set) measures output tok/s over its full window.
    ``not_run``: requests of client workers that died (never run, or never recorded); the
    level's ``stopped`` says so.
    """
    lm = asdict(
        level_metrics(
            records,
            concurrency,
            percentiles=getattr(settings, "percentiles", None) or PERCENTILES,
            slo=getattr(settings, "slo", None) or {},
            per_request=bool(getattr(settings, "per_request", False)),
            window="steady" if rate is None else "full",
        )
    )
    if lm["per_request"] is None:
        del lm["per_request"]
    lm["load"] = "closed" if rate is None else "open"
    lm["request_rate"] = rate if rate is None or math.isfinite(rate) else "inf"
    lm["e2e_trend"] = e2e_trend(records)
    lm["burstiness"] = getattr(settings, "burstiness", 1.0) if rate is not None else None
    if rate is not None:  # what the rate sweep's saturation rule reads (bench.ratesweep)
        lm["completion_rate"] = completion_rate(records)
        lm["ttft_growth"] = ttft_growth(records)
    samples = [float(x) for x in server.get("last_gen_throughput_samples", [])]
    srv = {k: v for k, v in server.items() if k != "last_gen_throughput_samples"}
    srv["last_gen_throughput"] = percentile(samples, 50)
    srv["last_gen_throughput_max"] = max(samples) if samples else None
    from glmserve.bench.cache_report import cache_figures

    # the level's prefix-cache hit rate (bench.cache_report)
    lm.update(cache_figures(records, str(getattr(settings, "api", "native"))))
    if not lm["completed"]:
        lm["output_tok_s"] = None  # no stream finished: no window to measure throughput over
    lm.update(
        workers=workers,
        tokens_estimated=any(getattr(r, "tokens_estimated", False) for r in records),
        server=srv,
        stopped=stopped,
        not_run=not_run,
    )
    return lm


def build_result(
    mode: str,
    levels: list[dict[str, Any]],
    settings: dict[str, Any],
    server: dict[str, Any],
    meta: dict[str, Any],
    stopped: str | None,
) -> BenchResult:
    """Assemble the result; the decode headline comes from the single level of decode mode.

    A result with a failed request is never complete: ``stopped`` then says how many failed
    (unless the bench stopped early for another reason, which it names). A closed-loop level
    that never had its concurrency in flight (``--num-prompts`` below it, a short
    ``--duration``) gets a note: its figures are of a lower load than its label says, and
    ``compare``/``report`` show no speedup for it (``bench.comparable.underfilled``).
    """
    from glmserve.bench.comparable import underfilled

    requests = sum(int(lv.get("requests") or 0) for lv in levels)
    errors = sum(int(lv.get("errors") or 0) for lv in levels)
    if stopped is None and errors:
        stopped = f"{errors} of {requests} requests failed"
    res = BenchResult(
        mode=mode,
        complete=stopped is None,
        stopped=stopped,
        levels=levels,
        settings=settings,
        server=server,
        meta=meta,
    )
    for lv in levels:
        why = underfilled(lv)
        if why:
            res.notes.append(
                f"{why} (send at least {lv['concurrency']} prompts): its figures are not a "
                f"c={lv['concurrency']} measurement"
            )
    if mode == "decode" and levels:
        res.decode_tok_s = levels[0]["decode_tok_s"]["p50"]
        res.ttft_ms = levels[0]["ttft_ms"]["p50"]
    return res


# -- gates ---------------------------------------------------------------------------------


def parse_output_gate(spec: str) -> tuple[int, float]:
    """``"C:X"`` -> (concurrency C, minimum output tok/s X); ConfigError names the flag."""
    try:
        c, x = spec.split(":", 1)
        level, floor = int(c), float(x)
    except ValueError as exc:
        raise ConfigError(
            f"--min-output-tok-s: expected CONCURRENCY:TOK_S like 64:500, got {spec!r}"
        ) from exc
    if level < 1 or not math.isfinite(floor) or floor <= 0:  # nan: "below the minimum nan"
        raise ConfigError(
            f"--min-output-tok-s: expected a level >= 1 and a finite tok/s > 0 like 64:500, "
            f"got {spec!r}"
        )
    return level, floor


def evaluate_gates(
    res: BenchResult,
    min_decode_tok_s: float | None = None,
    max_ttft_ms: float | None = None,
    min_output_tok_s: list[tuple[int, float]] | None = None,
) -> list[dict[str, Any]]:
    """Check each requested gate; returns one dict per gate with ``ok`` and a one-line reason.

    ``--min-decode-tok-s`` reads the decode headline (concurrency mode: the lowest level's
    median per-stream decode tok/s); ``--max-ttft-ms`` reads median TTFT of every level.
    """
    out: list[dict[str, Any]] = []
    if min_decode_tok_s is not None:
        value = res.decode_tok_s
        if value is None and res.levels:
            low = min(res.levels, key=lambda lv: lv["concurrency"])
            value = low["decode_tok_s"]["p50"]
        g = _gate("min-decode-tok-s", value, min_decode_tok_s, "decode tok/s", True)
        if value is None and any(lv.get("completed") for lv in res.levels):
            # requests succeeded, yet no decode figure: each had one token (no decode step)
            g["reason"] = "decode tok/s: no decode step measured (one output token per request)"
        out.append(g)
    if max_ttft_ms is not None:
        for lv in res.levels or [{"concurrency": None, "ttft_ms": {"p50": None}}]:
            label = f"TTFT p50 at concurrency {lv['concurrency']} (ms)"
            out.append(_gate("max-ttft-ms", lv["ttft_ms"]["p50"], max_ttft_ms, label, False))
    for c, x in min_output_tok_s or []:
        lv = res.level(c)
        value = lv["output_tok_s"] if lv else None
        label = f"output tok/s at concurrency {c}"
        g = _gate("min-output-tok-s", value, x, label, True)
        if lv is None:
            g["reason"] = f"{label}: level {c} was not measured (add it to --concurrency)"
        out.append(g)
    return out


def _gate(name: str, value: float | None, bound: float, label: str, minimum: bool) -> dict:
    if value is None:
        return {"gate": name, "ok": False, "value": None, "bound": bound,
                "reason": f"{label}: no measurement (no request succeeded)"}  # fmt: skip
    ok = value >= bound if minimum else value <= bound
    if ok:
        reason = f"{label} {value:,.2f} {'>=' if minimum else '<='} {bound:g} (ok)"
    else:
        side = "below the minimum" if minimum else "above the maximum"
        reason = f"{label} {value:,.2f} is {side} {bound:g} (--{name})"
    return {"gate": name, "ok": ok, "value": value, "bound": bound, "reason": reason}


# -- labels and lines under the table ------------------------------------------------------


def level_label(lv: dict[str, Any]) -> str:
    """ "64" for a closed-loop level; "r=20" or "r=20 c<=64" for an open-loop one."""
    rate = lv.get("request_rate")
    if rate is None:
        return str(lv["concurrency"])
    cap = f" c<={lv['concurrency']}" if lv.get("concurrency") else ""
    return f"r={rate:g}{cap}" if isinstance(rate, (int, float)) else f"r={rate}{cap}"


def render_plain(res: BenchResult) -> list[str]:
    """Notes, error samples and gate verdicts, as lines printed under the table."""
    lines = [f"note: {n}" for n in res.notes]
    for lv in res.levels:
        for e in lv.get("error_samples") or []:
            where = (
                f"concurrency {lv['concurrency']}"
                if lv.get("request_rate") is None
                else f"level {level_label(lv)}"
            )
            lines.append(f"{where}: error: {e}")
    from glmserve.bench.cache_report import hit_rate_text

    for lv in res.levels:
        text = hit_rate_text(lv)
        flushed = " (cache flushed before it)" if lv.get("cache_flushed") else ""
        if text:
            lines.append(f"level {level_label(lv)}: {text}{flushed}")
    for g in res.gates:
        lines.append(f"gate {g['gate']}: {g['reason']}")
    return lines
