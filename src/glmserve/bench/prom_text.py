"""The samples of a ``/metrics`` answer that can carry a figure, and what was ignored.

Why not the Prometheus parser alone: ``prometheus_client.parser`` (used here, line by line
when it must) refuses a whole scrape for one line it cannot read, and hands back what the
text format allows but no bench figure can use: ``NaN``, ``+Inf``/``-Inf``, and (from a
broken or hostile server) negative counters. A figure built on those is false (a NaN rate,
an infinite queue), so each such sample is dropped here, counted by reason, and the caller
says what was ignored. The ``le="+Inf"`` bucket *label* is a label, not a value: kept.

Negative values are refused for counters (``_total``, ``_count``, ``_sum``, ``_bucket``,
``_created``) and every ``sglang:`` series (queue lengths, token counts, ratios and
throughputs, none of which can be below zero: 0.5.9 ``srt/metrics/collector.py``).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

NON_NEGATIVE_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created")
_PARSER_ERRORS = (ValueError, IndexError, KeyError, TypeError)


@dataclass
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class MetricsText:
    """One ``/metrics`` answer: usable samples, and ignored ones by reason."""

    samples: list[Sample] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)
    # reason -> the first few series names it hit (for the note)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def ignore(self, reason: str, name: str = "") -> None:
        self.ignored[reason] += 1
        names = self.examples.setdefault(reason, [])
        if name and name not in names and len(names) < 3:
            names.append(name[:80])

    def note(self) -> str | None:
        """``ignored in /metrics: 2 NaN values (sglang:gen_throughput), ...``; None if none."""
        return ignored_note(self.ignored, self.examples)


def ignored_note(ignored: Counter[str], examples: dict[str, list[str]]) -> str | None:
    if not ignored:
        return None
    parts = []
    for reason, n in sorted(ignored.items()):
        names = examples.get(reason) or []
        parts.append(f"{n} {reason}" + (f" ({', '.join(names)})" if names else ""))
    return "ignored in /metrics: " + "; ".join(parts)


def _families(text: str) -> list[Sample]:
    from prometheus_client.parser import text_string_to_metric_families

    return [
        Sample(s.name, dict(s.labels), float(s.value))
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    ]


def read_metrics(text: str) -> MetricsText:
    """Every usable sample of ``text``; never raises. A line the Prometheus parser refuses,
    a NaN or infinite value, a negative counter and a repeated series are ignored (counted)."""
    out = MetricsText()
    try:
        raw = _families(text)
    except _PARSER_ERRORS:  # one bad line: read the others one by one
        raw = []
        for line in text.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                raw.extend(_families(line + "\n"))
            except _PARSER_ERRORS:
                out.ignore("unparsable lines")
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for s in raw:
        if math.isnan(s.value):
            out.ignore("NaN values", s.name)
        elif math.isinf(s.value):
            out.ignore("infinite values", s.name)
        elif s.value < 0 and (
            s.name.startswith("sglang:") or s.name.endswith(NON_NEGATIVE_SUFFIXES)
        ):
            out.ignore("negative counts", s.name)
        else:
            key = (s.name, tuple(sorted(s.labels.items())))
            if key in seen:
                out.ignore("repeated series", s.name)
                continue
            seen.add(key)
            out.samples.append(s)
    return out
