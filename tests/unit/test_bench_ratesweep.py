"""Issue 14 #1: the rate sweep's saturation rule (``bench.ratesweep``), on hand-built levels and
requests: each part of the rule saturates a level on its own, thresholds are strict, figures
that could not be measured decide nothing, and the level figures it reads are what they say."""

from __future__ import annotations

import pytest

from glmserve.bench.metrics import StreamRecord
from glmserve.bench.ratesweep import (
    SATURATION,
    completion_rate,
    e2e_trend,
    saturated_by,
    saturation,
    sweep_rates,
    ttft_growth,
)
from glmserve.bench.results import summarize_level


def kept_up(rate: float) -> dict:
    """An open-loop level the server kept up with: every figure well inside the rule."""
    return {"request_rate": rate, "achieved_request_rate": rate * 1.01,
            "completion_rate": rate * 0.98, "ttft_growth": 0.05, "e2e_trend": 1.05,
            "request_throughput": rate * 0.9}  # fmt: skip


def test_sweep_rates_lie_strictly_between():
    assert sweep_rates(1.0, 5.0, 3) == [2.0, 3.0, 4.0]
    assert sweep_rates(2.0, 2.0, 3) == [2.0]


def test_saturation_is_the_last_rate_before_queues_grow():
    levels = [{"request_rate": r, "e2e_trend": t, "request_throughput": 1.0}
              for r, t in ((2.0, 1.0), (4.0, 1.1), (6.0, 2.5), (8.0, 1.2))]  # fmt: skip
    levels.append({"request_rate": "inf", "e2e_trend": 4.0, "request_throughput": 7.0})
    sat = saturation(levels)
    assert sat["rate"] == 4.0 and sat["max_request_throughput"] == 7.0
    assert [m["saturated"] for m in sat["rates"]] == [False, False, True, False]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"achieved_request_rate": 8.0}, "behind"),  # sent at 80% of the offer
        ({"completion_rate": 8.5}, "backlog"),  # finished at 85% of it
        ({"ttft_growth": 0.8}, "ttft"),  # first tokens 0.8 service times later by the end
        ({"e2e_trend": 1.7}, "e2e"),
    ],
)
def test_each_part_of_the_rule_saturates_a_level_on_its_own(change, reason):
    assert saturated_by(kept_up(10.0)) == []
    assert saturated_by({**kept_up(10.0), **change}) == [reason]


def test_thresholds_are_strict_and_recorded():
    assert SATURATION == {"min_rate_fraction": 0.9, "max_ttft_growth": 0.5, "max_e2e_trend": 1.5}
    at = {"request_rate": 10.0, "achieved_request_rate": 9.0, "completion_rate": 9.0,
          "ttft_growth": 0.5, "e2e_trend": 1.5}  # fmt: skip
    assert saturated_by(at) == []
    below = {"request_rate": 10.0, "achieved_request_rate": 8.99, "completion_rate": 8.99,
             "ttft_growth": 0.51, "e2e_trend": 1.51}  # fmt: skip
    assert saturated_by(below) == ["behind", "backlog", "ttft", "e2e"]
    assert saturation([kept_up(2.0)])["rule"] == SATURATION


def test_unmeasured_figures_and_unbounded_levels_decide_nothing():
    blank = {"request_rate": 10.0, "achieved_request_rate": None, "completion_rate": None,
             "ttft_growth": None, "e2e_trend": None}  # fmt: skip
    assert saturated_by(blank) == []
    assert saturated_by({**kept_up(10.0), "request_rate": "inf", "completion_rate": 1.0}) == []
    assert saturated_by({**kept_up(10.0), "request_rate": None, "completion_rate": 1.0}) == []


def test_sweep_rate_is_the_highest_below_the_lowest_saturated_one():
    levels = [{"request_rate": None, "request_throughput": 2.0},  # synchronous
              {"request_rate": "inf", "request_throughput": 12.0}]  # fmt: skip
    # offered out of order; 9 is kept up with again by chance, but 6 already fell behind
    levels += [kept_up(9.0), {**kept_up(6.0), "completion_rate": 4.0}, kept_up(3.0)]
    sat = saturation(levels)
    assert [m["rate"] for m in sat["rates"]] == [3.0, 6.0, 9.0]
    assert [m["saturated_by"] for m in sat["rates"]] == [[], ["backlog"], []]
    assert sat["rate"] == 3.0 and sat["max_request_throughput"] == 12.0
    assert sat["rates"][1]["completion_rate"] == 4.0
    every = saturation([{**kept_up(r), "achieved_request_rate": r / 2} for r in (3.0, 6.0)])
    assert every["rate"] is None


def request(send: float, ttft: float, decode: float) -> StreamRecord:
    """One finished request: first token ``ttft`` after sending, the last ``decode`` later."""
    first, last = send + ttft, send + ttft + decode
    return StreamRecord(dispatch=send, send=send, chunk_times=[first, last],
                        chunk_tokens=[1, 2], completion_tokens=2, end=last)  # fmt: skip


def test_level_figures_from_hand_built_requests():
    # 12 requests sent 0.1 s apart; TTFT 10 ms for the first quarter, 710 ms for the last
    ttfts = [0.01] * 3 + [0.2] * 6 + [0.71] * 3
    recs = [request(0.1 * i, t, 1.0) for i, t in enumerate(ttfts)]
    # growth 0.7 s over a first-quarter median E2E of 1.01 s
    assert ttft_growth(recs) == pytest.approx(0.7 / 1.01)
    assert e2e_trend(recs) == pytest.approx(1.71 / 1.01)
    ends = sorted(r.end for r in recs)
    assert completion_rate(recs) == pytest.approx(11 / (ends[-1] - ends[0]))
    steady = [request(0.1 * i, 0.01, 1.0) for i in range(12)]
    assert ttft_growth(steady) == pytest.approx(0.0)
    assert completion_rate(steady) == pytest.approx(10.0)  # leave as they came: 10 req/s
    assert ttft_growth(steady[:7]) is None and e2e_trend(steady[:7]) is None
    failed = [*steady[:1], StreamRecord(dispatch=5.0, send=5.0, end=9.0, error="cut")]
    assert completion_rate(failed) is None  # one success: no rate


def test_only_open_loop_levels_carry_the_sweep_figures():
    recs = [request(0.1 * i, 0.01, 1.0) for i in range(12)]
    closed = summarize_level(recs, 4, 1, {}, None)
    assert "completion_rate" not in closed and "ttft_growth" not in closed
    opened = summarize_level(recs, 0, 1, {}, None, rate=10.0)
    assert opened["completion_rate"] == pytest.approx(10.0)
    assert opened["ttft_growth"] == pytest.approx(0.0)
