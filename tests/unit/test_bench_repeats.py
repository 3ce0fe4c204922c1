"""Repeats merged into medians with bootstrap intervals; gates on the median or the bound;
speedup intervals and "within noise" (pure)."""

from __future__ import annotations

import pytest

from glmserve.bench import stats
from glmserve.bench.repeats import gate_view, merge
from glmserve.bench.results import BenchResult, evaluate_gates


def result(decode: float, out: float, ttft: float) -> BenchResult:
    lv = {"concurrency": 1, "request_rate": None, "requests": 3, "completed": 3, "errors": 0,
          "max_concurrency_seen": 1, "output_tok_s": out, "decode_tok_s": {"p50": decode},
          "ttft_ms": {"p50": ttft}, "error_samples": []}  # fmt: skip
    return BenchResult("decode", True, [lv], decode_tok_s=decode, ttft_ms=ttft)


REPEATS = [result(d, d * 0.9, t) for d, t in ((10, 50), (12, 40), (11, 45), (9, 60), (13, 42))]


def test_merge_takes_medians_sums_counts_keeps_every_repeat():
    res = merge(REPEATS)
    assert res.decode_tok_s == 11 and res.ttft_ms == 45
    lv = res.levels[0]
    assert lv["requests"] == 15 and lv["decode_tok_s"]["p50"] == 11
    assert lv["output_tok_s"] == pytest.approx(9.9)
    assert len(res.repeats) == 5 and [r["decode_tok_s"] for r in res.repeats] == [10, 12, 11, 9, 13]
    assert res.ci["decode_tok_s"] == (9, 13)  # 5 repeats: the bootstrap interval is [min, max]
    assert res.ci["repeat_values"]["decode_tok_s"] == [10, 12, 11, 9, 13]


def test_gate_on_lower_reads_the_pessimistic_bounds():
    res = merge(REPEATS)
    med = evaluate_gates(gate_view(res, "median"), min_decode_tok_s=10.5, max_ttft_ms=50)
    low = evaluate_gates(gate_view(res, "lower"), min_decode_tok_s=10.5, max_ttft_ms=50)
    assert [g["ok"] for g in med] == [True, True]
    assert [g["ok"] for g in low] == [False, False]  # 9 < 10.5 and TTFT bound 60 > 50
    assert res.decode_tok_s == 11  # the view is a copy


def test_ratio_interval_and_within_noise():
    same = [100, 104, 98, 101, 103]
    sp, ci = stats.ratio_ci(same, same)
    assert sp == 1.0 and stats.within_noise(ci)
    faster = [x * 1.3 for x in same]
    sp, ci = stats.ratio_ci(faster, same)
    assert sp == pytest.approx(1.3) and ci[0] > 1.0 and not stats.within_noise(ci)
    assert stats.ratio_ci([100], same)[1] is None  # one run: no interval
    assert stats.within_noise(None) is None


def test_median_interval_needs_two_values():
    assert stats.median_ci([5.0]) is None
    lo, hi = stats.median_ci([1, 2, 3])
    assert (lo, hi) == (1, 3)
