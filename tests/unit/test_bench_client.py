"""The bench client and runner against a tiny scripted SSE server (fault cases the simulator
does not script: HTTP errors, cut streams, stalls, in-stream errors, OpenAI token spreading)."""

from __future__ import annotations

import asyncio
import time

import pytest
from tests.fixtures.sse_server import FakeServer

from glmserve.bench.client import make_client, stream_request
from glmserve.bench.metrics import StreamRecord, stream_metrics
from glmserve.bench.progress import Progress
from glmserve.bench.runner import prepare_requests, run_level
from glmserve.bench.server_probe import metrics_delta, parse_prometheus, probe_server
from glmserve.bench.settings import BenchSettings, LevelRun
from glmserve.bench.workload import build_request
from glmserve.errors import TransportError


def _one(fake: FakeServer, api: str = "native", stall: float = 5.0) -> StreamRecord:
    async def go() -> StreamRecord:
        client = make_client(1, stall)
        req = build_request(api, [1, 2, 3, 4], fake.n_tokens, "m")
        rec = StreamRecord(dispatch=time.perf_counter())
        try:
            return await stream_request(client, fake.url, req, api, rec)
        finally:
            await client.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("per_chunk", [1, 4])
def test_native_stream_uses_server_counts(fake, per_chunk):
    fake.per_chunk, fake.n_tokens = per_chunk, 12
    rec = _one(fake)
    assert rec.ok, rec.error
    assert rec.completion_tokens == 12
    assert rec.prompt_tokens == 4
    assert len(rec.chunk_times) == 12 // per_chunk
    assert rec.send is not None and rec.dispatch <= rec.send <= rec.chunk_times[0]
    assert stream_metrics(rec).n_tokens == 12


@pytest.mark.parametrize("api", ["openai", "chat"])
def test_openai_streams_spread_usage_total_over_chunks(fake, api):
    fake.per_chunk, fake.n_tokens = 4, 16
    rec = _one(fake, api)
    assert rec.ok, rec.error
    assert rec.completion_tokens == 16
    assert rec.chunk_tokens == [4, 8, 12, 16]
    assert rec.tokens_estimated


def test_http_error_is_recorded(fake):
    fake.behaviour = "http500"
    rec = _one(fake)
    assert rec.error is not None and rec.error.startswith("HTTP 500")


def test_cut_stream_keeps_partial_tokens(fake):
    fake.behaviour, fake.n_tokens = "cut", 10
    rec = _one(fake)
    assert rec.error is not None and rec.error.startswith("stream cut")
    assert rec.chunk_tokens[-1] == 5  # what arrived before the cut is kept


def test_in_stream_error_is_recorded(fake):
    fake.behaviour = "error"
    rec = _one(fake)
    assert rec.error is not None and "out of memory" in rec.error


def test_stall_deadline_abandons_stuck_stream(fake):
    fake.behaviour = "stall"
    t0 = time.perf_counter()
    rec = _one(fake, stall=0.3)
    assert rec.error is not None and rec.error.startswith("stalled")
    assert time.perf_counter() - t0 < 5.0


def test_unreachable_server_names_url():
    with pytest.raises(TransportError, match=r"127\.0\.0\.1:9"):
        probe_server("http://127.0.0.1:9", timeout=2.0)


def test_probe_reads_version(fake):
    assert probe_server(fake.url)["version"] == "0.5.9"


@pytest.mark.parametrize("workers", [1, 2])
def test_level_runs_all_requests_with_bounded_concurrency(fake, workers):
    fake.n_tokens = 6
    s = BenchSettings(fake.url, mode="concurrency", concurrency=[4], output_len=6,
                      num_prompts=10, warmup=0, workers=workers)  # fmt: skip
    run = LevelRun(4, workers)
    run_level(s, 4, prepare_requests(s, "m"), Progress(), run)
    assert len(run.records) == 10
    assert all(r.ok for r in run.records), [r.error for r in run.records]
    # never more than 4 in flight at once
    events = sorted([(r.send, 1) for r in run.records] + [(r.end, -1) for r in run.records])
    live = peak = 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    assert peak <= 4
    assert run.server["last_gen_throughput_samples"] is not None


def test_prometheus_parsing_and_deltas():
    before = parse_prometheus(
        '# HELP x\nsglang:generation_tokens_total{model="a"} 100\n'
        "sglang:time_to_first_token_seconds_sum 1.0\nsglang:time_to_first_token_seconds_count 10\n"
    )
    after = parse_prometheus(
        'sglang:generation_tokens_total{model="a"} 300\nsglang:gen_throughput 55.5\n'
        "sglang:time_to_first_token_seconds_sum 3.0\nsglang:time_to_first_token_seconds_count 20\n"
    )
    d = metrics_delta(before, after, 2.0)
    assert d["generation_tokens"] == 200
    assert d["generation_tok_s"] == pytest.approx(100.0)
    assert d["ttft_mean_ms"] == pytest.approx(200.0)
    assert d["gen_throughput_gauge"] == 55.5
    assert metrics_delta({}, after, 1.0) == {}


@pytest.mark.parametrize("workers", [1, 2])
def test_duration_mode_stops_at_the_deadline(fake, workers):
    fake.n_tokens, fake.itl = 4, 0.01
    s = BenchSettings(fake.url, mode="concurrency", concurrency=[2], output_len=4,
                      duration=0.6, warmup=0, workers=workers)  # fmt: skip
    run = LevelRun(2, workers)
    t0 = time.perf_counter()
    run_level(s, 2, prepare_requests(s, "m"), Progress(), run)
    took = time.perf_counter() - t0
    assert run.stopped is None
    assert len(run.records) >= 4  # kept sending for the whole duration
    assert all(r.ok for r in run.records)
    last_send = max(r.send for r in run.records if r.send is not None)
    first_send = min(r.send for r in run.records if r.send is not None)
    assert last_send - first_send <= 0.6 + 0.05  # nothing sent after the deadline
    assert took < 5.0
