"""The server's counters against the client's, per level (pure)."""

from __future__ import annotations

from glmserve.bench import contention as ct

# sglang 0.5.9 scheduler_metrics_mixin.py:366 format, as the simulator writes it
LOG = """\
[2026-12-04 10:00:00] Prefill batch, #new-seq: 1, #new-token: 32, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0,
[2026-12-04 10:00:01] Decode batch, #running-req: 1, #token: 40, token usage: 0.00, cuda graph: False, gen throughput (token/s): 3.10, #queue-req: 0,
[2026-12-04 10:00:02] Decode batch, #running-req: 7, #token: 900, token usage: 0.01, cuda graph: False, gen throughput (token/s): 70.50, #queue-req: 0,
[2026-12-04 10:00:03] Decode batch, #running-req: 7, #token: 960, token usage: 0.01, cuda graph: False, gen throughput (token/s): 71.50, #queue-req: 0,
"""  # noqa: E501


def level(c: int = 1, seen: int = 1, tok_s: float = 10.0) -> dict:
    return {"concurrency": c, "max_concurrency_seen": seen, "output_tok_s": tok_s}


def test_decode_lines_are_parsed():
    assert ct.parse_decode_lines(LOG) == [(1, 3.1), (7, 70.5), (7, 71.5)]


def test_more_running_than_in_flight_is_contended_with_a_throughput_warning():
    lv = level()
    ct.judge({"source": "log", "running": [7, 7], "gen_tok_s": [70.5, 71.5]}, lv)
    assert "ran 7 requests while this bench had at most 1" in lv["contended"]
    assert lv["server_view"]["server_max_running"] == 7
    assert any("71.0 gen tok/s" in w for w in lv["warnings"])
    assert any("not comparable" in n for n in ct.notes([lv]))


def test_alone_and_agreeing_is_neither():
    lv = level(c=4, seen=4, tok_s=40.0)
    ct.judge({"source": "log", "running": [4, 3], "gen_tok_s": [41.0, 43.0]}, lv)
    assert "contended" not in lv and "warnings" not in lv
    assert lv["server_view"]["server_over_client"] == 1.05


def test_no_view_judges_nothing():
    lv = level()
    ct.judge({}, lv)
    assert lv == level()


def test_a_contended_level_gets_no_speedup_in_compare():
    from glmserve.bench.comparable import unfit

    lv = {**level(), "contended": "contended: the server ran 7 requests ..."}
    row = {"result": {"levels": [lv], "settings": {}}}
    assert unfit(row)["levels"] == {1: lv["contended"]}
