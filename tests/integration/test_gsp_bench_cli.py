"""``glmserve bench --dataset-name generated-shared-prefix`` against the simulator (issue 24
must-shows): the level's cache hit rate is the simulator's ground truth within 2%, TTFT is
lower with the radix cache than with ``--flush-cache`` and the cache disabled, and in a
multi-turn run the simulator's reply to turn 1 is verbatim inside turn 2's prompt as the
simulator received it. One simulator per cache setting, shared by the module."""

from __future__ import annotations

import json
import statistics

import httpx
import pytest
from tests.fixtures.cli import run_cli
from tests.fixtures.simulator import FAST, launch_simulator


def gsp(system: int = 2048) -> list[str]:
    return [
        "--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "2",
        "--gsp-prompts-per-group", "6", "--gsp-system-prompt-len", str(system),
        "--gsp-question-len", "32", "--gsp-output-len", "4",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def sims(tmp_path_factory):
    base = tmp_path_factory.mktemp("gsp")
    common = ("--tp-size", "2", "--disable-cuda-graph", "--sim-trace-ids", "--enable-metrics",
              *FAST)  # fmt: skip
    on = launch_simulator(*common, log_path=base / "on.log")
    off = launch_simulator(*common, "--disable-radix-cache", log_path=base / "off.log")
    yield on, off
    on.stop()
    off.stop()


def _trace(url: str) -> dict:
    return httpx.get(url + "/sim/trace", timeout=10).json()["requests"]


def _cached_total(url: str) -> float:
    from glmserve.bench.server_probe import parse_prometheus

    text = httpx.get(url + "/metrics", timeout=10).text
    return parse_prometheus(text)["sglang:cached_tokens_total"]


def _bench(capsys, url: str, *extra: str, system: int = 2048) -> dict:
    code, out, err = run_cli(
        capsys, "bench", "--url", url, "--warmup", "0", "--json", *gsp(system), *extra
    )
    assert code == 0, err
    return json.loads(out)


LEVEL = ("--mode", "concurrency", "--concurrency", "2")


def test_hit_rate_is_ground_truth_and_the_cache_lowers_ttft(sims, capsys):
    on, off = sims
    before, counter = set(_trace(on.url)), _cached_total(on.url)
    # an 8192-token system prompt: its prefill (what a hit skips) is well above the noise
    res = _bench(capsys, on.url, *LEVEL, "--flush-cache", system=8192)
    (lv,) = res["levels"]
    assert lv["completed"] == 12 and lv["cache_flushed"] is True
    assert res["settings"]["flush_cache"] is True
    new = [r for rid, r in _trace(on.url).items() if rid not in before]
    assert len(new) == 12
    truth = sum(r["cached_tokens"] for r in new) / sum(r["prompt_tokens"] for r in new)
    assert truth > 0.5  # 10 of 12 prompts share a 2048-token system prompt
    assert lv["cache_hit_rate"] == pytest.approx(truth, abs=0.02)
    assert lv["cached_tokens"] == sum(r["cached_tokens"] for r in new)
    assert _cached_total(on.url) - counter == lv["cached_tokens"]  # /metrics says the same
    cold = _bench(capsys, off.url, *LEVEL, "--flush-cache", system=8192)
    (lv_off,) = cold["levels"]
    assert lv_off["cache_flushed"] is True and lv_off["cache_hit_rate"] == 0.0
    assert lv["ttft_ms"]["p50"] < lv_off["ttft_ms"]["p50"]
    assert lv["ttft_ms"]["mean"] < lv_off["ttft_ms"]["mean"]


def test_turn_two_carries_the_servers_reply_to_turn_one(sims, capsys):
    on, _ = sims
    before = set(_trace(on.url))
    res = _bench(
        capsys, on.url, "--mode", "concurrency", "--concurrency", "3", "--gsp-num-turns", "2",
        "--think-time", "0.05",
    )  # fmt: skip
    (lv,) = res["levels"]
    assert lv["completed"] == 24 and lv["errors"] == 0
    new = [r for rid, r in _trace(on.url).items() if rid not in before]
    assert len(new) == 24
    first = [r for r in new if len(r["prompt_ids"]) == 2048 + 32]
    second = [r for r in new if len(r["prompt_ids"]) == 2048 + 32 + 4 + 32]
    assert len(first) == len(second) == 12
    replies = {tuple(r["output_ids"]) for r in first}
    assert len(replies) == 12  # distinct per conversation
    for r2 in second:
        # exactly one turn-1 request's prompt + reply begins this turn-2 prompt as received
        heads = [
            r1
            for r1 in first
            if r2["prompt_ids"][: 2048 + 32 + 4] == r1["prompt_ids"] + r1["output_ids"]
        ]
        assert len(heads) == 1
    assert lv["cache_hit_rate"] == pytest.approx(
        sum(r["cached_tokens"] for r in new) / sum(r["prompt_tokens"] for r in new), abs=0.02
    )


TRACE_MS = [0, 40, 95, 180, 200, 330, 415, 600]


def _trace_file(tmp_path) -> str:
    # short prompts, one token out: the server's loop is idle when the next one arrives, so
    # its arrival stamp is the client's timing, not the server's own step in progress
    rows = [{"timestamp": t, "input_length": 60 if i % 2 else 110, "output_length": 1,
             "hash_ids": [0, 1, i + 2] if i % 2 == 0 else [0, i + 2]}
            for i, t in enumerate(TRACE_MS)]  # fmt: skip
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("speedup", [1, 2])
def test_trace_replay_arrives_on_the_trace_timestamps(sims, capsys, tmp_path, speedup):
    on, _ = sims
    before = set(_trace(on.url))
    code, out, err = run_cli(
        capsys, "bench", "--url", on.url, "--warmup", "0", "--json", "--dataset-name",
        "mooncake", "--dataset-path", _trace_file(tmp_path), "--trace-speedup", str(speedup),
        "--metrics-interval", "0",  # a /metrics parse on the bench's thread costs ms here
    )  # fmt: skip
    assert code == 0, err
    (lv,) = json.loads(out)["levels"]
    assert lv["completed"] == len(TRACE_MS)
    new = sorted((r for rid, r in _trace(on.url).items() if rid not in before),
                 key=lambda r: r["arrival"])  # fmt: skip
    assert len(new) == len(TRACE_MS)
    # the server's arrival stamps against the trace's due times; the server's clock has its
    # own zero, so one constant (the median difference) is taken out, not the first request's
    diff = [r["arrival"] - t / 1000 / speedup for r, t in zip(new, TRACE_MS, strict=True)]
    zero = statistics.median(diff)
    assert max(abs(d - zero) for d in diff) < 0.005, [round((d - zero) * 1000, 1) for d in diff]
    assert [r["prompt_tokens"] for r in new] == [60 if i % 2 else 110 for i in range(8)]


def test_a_bad_trace_line_is_one_line_naming_file_and_line(capsys, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": []}\n'
                    '{"timestamp": 5, "input_length": "x", "output_length": 2}\n')  # fmt: skip
    code, _, err = run_cli(capsys, "bench", "--url", "http://127.0.0.1:9", "--dataset-name",
                           "mooncake", "--dataset-path", str(path))  # fmt: skip
    assert code == 2 and f"{path}:2: input_length must be an integer" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
