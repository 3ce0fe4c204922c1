"""A broken ``/server_info`` or ``/metrics`` answer from a server whose streams are honest
(tests/fixtures/hostile_server.py): the bench measures, stores the result and says in one
note what was wrong, naming the URL; no figure is made of NaN, infinities, negative counts
or a counter that went back.

Before: bad HTTP framing on ``/server_info`` ended the bench with exit 5 ("cannot reach
server") and nothing stored; NaN in ``/metrics`` became a NaN server tok/s (and
``int(nan)`` killed the contention sampler's thread); one garbage line lost the whole scrape.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from tests.fixtures.cli import run_cli
from tests.fixtures.hostile_server import HostileServer

from glmserve.bench.server_probe import metrics_delta, parse_prometheus
from glmserve.bench.telemetry import parse_metrics_noted, summary
from glmserve.store import RunStore


def _bench(capsys: pytest.CaptureFixture[str], url: str, *extra: str) -> tuple[int, dict, str]:
    code, out, err = run_cli(
        capsys, "bench", "--url", url, "--json", "--warmup", "0", "--num-prompts", "4",
        "--output-len", "8", "--mode", "concurrency", "--concurrency", "2", *extra,
    )  # fmt: skip
    assert "Traceback" not in err and "internal error" not in err, err
    return code, (json.loads(out) if out.strip() else {}), err


def _numbers(doc: Any) -> list[float]:
    if isinstance(doc, dict):
        return [x for v in doc.values() for x in _numbers(v)]
    if isinstance(doc, list):
        return [x for v in doc for x in _numbers(v)]
    return [float(doc)] if isinstance(doc, (int, float)) and not isinstance(doc, bool) else []


@pytest.mark.parametrize(
    ("case", "what"),
    [
        ("server_info_cut", "bad HTTP framing: peer closed connection without sending complete"),
        ("server_info_chunk", "bad HTTP framing: illegal chunk header"),
        ("server_info_status", "bad HTTP framing: illegal status line"),
        ("server_info_deep", "a JSON body nested too deeply to read"),
    ],
)
def test_a_malformed_server_info_is_a_note_naming_the_url_and_the_bench_is_stored(
    capsys, case, what
):
    with HostileServer(case) as srv:
        code, data, err = _bench(capsys, srv.url)
        url = srv.url + "/server_info"
    assert code == 0, err
    assert data["complete"] is True and data["levels"][0]["completed"] == 4
    note = next(n for n in data["notes"] if n.startswith(url))
    assert what in note and "version, model and flags are unknown" in note, note
    assert "\n" not in note
    assert data["server"]["version"] is None and data["server"]["info_problem"] == note
    with RunStore.open() as store:
        assert store.get_bench_result(data["id"])["result"]["notes"] == data["notes"]


def test_a_run_identity_check_reads_a_too_deep_server_info_as_no_answer():
    """``bench RUN``/``status`` ask /server_info to verify the run's server: a body nested
    past Python's parser is no answer (an identity problem, exit 5), not exit 70."""
    from glmserve.deploy.identity import fetch_server_info

    with HostileServer("server_info_deep") as srv:
        assert fetch_server_info(srv.url) is None


def test_server_info_closed_without_an_answer_is_still_unreachable(capsys):
    with HostileServer("server_info_gone") as srv:
        code, _data, err = _bench(capsys, srv.url)
    assert code == 5, err
    assert err.strip().splitlines()[-1].startswith(f"error: cannot reach server at {srv.url}")


@pytest.mark.parametrize(
    ("case", "ignored", "server_rate"),
    [
        ("metrics_nan", "NaN values (sglang:", False),
        ("metrics_inf", "infinite values (sglang:", True),
        ("metrics_negative", "negative counts (sglang:", False),
        ("metrics_garbage", "unparsable lines", True),
        ("metrics_reset", "went back", False),
    ],
)
def test_hostile_metrics_make_no_figure_and_say_what_was_ignored(
    capsys, case, ignored, server_rate
):
    with HostileServer(case) as srv:
        code, data, err = _bench(capsys, srv.url, "--metrics-interval", "0.2")
    assert code == 0, err
    assert data["complete"] is True
    assert all(math.isfinite(x) for x in _numbers(data)), "a non-finite figure"
    lv = data["levels"][0]
    srv_doc = lv["server"]
    assert srv_doc.get("gen_throughput_gauge") in (None, 100.0)
    assert all(v >= 0 for v in _numbers(srv_doc)), srv_doc
    if server_rate:  # the honest counters still give the level's server-side rate
        assert srv_doc["generation_tokens"] == 32 and srv_doc["generation_tok_s"] > 0
    else:
        assert "generation_tok_s" not in srv_doc and "generation_tokens" not in srv_doc
    tel = lv["telemetry"]["server"]
    assert tel["samples"] >= 1 or case in ("metrics_nan", "metrics_negative"), tel
    assert all(v is None or v >= 0 for v in tel.get("generation_tok_s") or []), tel
    assert any(ignored in n for n in data["notes"]), data["notes"]


def test_a_malformed_probe_answer_fails_the_probe_and_the_bench_is_stored(capsys):
    """``--probe`` after the levels: token ids that are strings or null were a ValueError /
    TypeError out of the bench (exit 70) before the measured result was stored."""
    with HostileServer("probe_bad_ids") as srv:
        code, data, err = _bench(capsys, srv.url, "--probe")
    assert code == 1, err  # the output-agreement gate fails: the probe failed
    assert data["complete"] is True and data["id"] is not None
    assert data["probe"]["error"].startswith(
        f"probe answer from {srv.url}/generate is malformed (ValueError: invalid literal"
    )
    assert "output probe failed: probe answer from" in err.strip().splitlines()[-1]


# -- the parsers themselves ------------------------------------------------------------------
def test_prometheus_special_values_and_garbage_lines_are_ignored_and_counted():
    text = (
        "# TYPE sglang:generation_tokens_total counter\n"
        'sglang:generation_tokens_total{model_name="m"} NaN\n'
        'sglang:generation_tokens_total{model_name="n"} 10\n'
        'sglang:num_running_reqs{model_name="m"} +Inf\n'
        'sglang:num_queue_reqs{model_name="m"} -2\n'
        'sglang:time_to_first_token_seconds_bucket{le="+Inf"} 3\n'  # a label, kept
        "not a metric line at all\n"
        'sglang:gen_throughput{model_name="m"} 7\n'
        'sglang:gen_throughput{model_name="m"} 7\n'  # the same series twice
        "other_gauge -4\n"  # not a count: a gauge may be negative
    )
    m = parse_prometheus(text)
    assert m == {
        "sglang:generation_tokens_total": 10.0,
        "sglang:time_to_first_token_seconds_bucket": 3.0,
        "sglang:gen_throughput": 7.0,
        "other_gauge": -4.0,
    }
    assert m.ignored == (
        "ignored in /metrics: 1 NaN values (sglang:generation_tokens_total); 1 infinite "
        "values (sglang:num_running_reqs); 1 negative counts (sglang:num_queue_reqs); "
        "1 repeated series (sglang:gen_throughput); 1 unparsable lines"
    )
    parsed, reading = parse_metrics_noted(text)
    assert parsed == {"generation_tokens_total": 10.0, "gen_throughput": 7.0}
    assert sum(reading.ignored.values()) == 5


def test_a_counter_lower_after_the_level_gives_no_delta_and_a_note():
    before = parse_prometheus("sglang:generation_tokens_total 500\n")
    after = parse_prometheus("sglang:generation_tokens_total 20\n")
    d = metrics_delta(before, after, 2.0)
    assert "generation_tok_s" not in d and "generation_tokens" not in d
    assert d["metrics_notes"] == [
        "/metrics counters went back during the level (a restarted server?), no server-side "
        "figure from them: sglang:generation_tokens_total 500 -> 20"
    ]


def test_cache_hit_rate_is_not_made_across_a_counter_reset():
    series = {"prompt_tokens_total": [100.0, 10.0, 200.0], "cached_tokens_total": [50.0, 0.0, 60.0]}
    out = summary(series)
    assert "cache_hit_rate_counters" not in out and out["counters_reset"] is True
