"""The bench client and runner against a tiny scripted SSE server (fault cases the simulator
does not script: HTTP errors, cut streams, stalls, in-stream errors, OpenAI token spreading)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator

import pytest

from glmserve.bench.client import make_client, stream_request
from glmserve.bench.metrics import StreamRecord, stream_metrics
from glmserve.bench.runner import (
    BenchSettings,
    LevelRun,
    Progress,
    metrics_delta,
    parse_prometheus,
    prepare_requests,
    probe_server,
    run_level,
)
from glmserve.bench.workload import build_request
from glmserve.errors import TransportError


class FakeServer:
    """asyncio HTTP/1.1 server on a thread; behaviour chosen by ``self.behaviour``."""

    def __init__(self) -> None:
        self.behaviour = "ok"
        self.n_tokens = 8
        self.per_chunk = 1
        self.itl = 0.005
        self.port = 0
        self.requests = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                length = 0
                for h in lines[1:]:
                    if h.lower().startswith("content-length:"):
                        length = int(h.split(":", 1)[1])
                body = json.loads(await reader.readexactly(length)) if length else {}
                self.requests += 1
                if path == "/server_info":
                    payload = {
                        "version": "0.5.9",
                        "internal_states": [{"last_gen_throughput": 42.0}],
                    }
                    await self._json(writer, 200, payload)
                elif path.startswith("/metrics"):
                    await self._json(writer, 404, {})
                elif method == "POST":
                    await self._stream(writer, path, body)
                    return
                else:
                    await self._json(writer, 404, {})
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _json(self, writer: asyncio.StreamWriter, status: int, obj: object) -> None:
        data = json.dumps(obj).encode()
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
            f"content-length: {len(data)}\r\n\r\n".encode()
            + data
        )
        await writer.drain()

    async def _stream(self, writer: asyncio.StreamWriter, path: str, body: dict) -> None:
        self.posts = getattr(self, "posts", 0) + 1
        if self.behaviour == "http500" or (self.behaviour == "http500_once" and self.posts == 1):
            await self._json(writer, 500, {"error": "boom"})
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        )
        # never more than asked, as a real server (the client fails a request that got more)
        sp = body.get("sampling_params") or {}
        asked = sp.get("max_new_tokens") or body.get("max_tokens") or self.n_tokens
        n = min(self.n_tokens, asked)
        for c in range(self.per_chunk, n + self.per_chunk, self.per_chunk):
            c = min(c, n)
            await asyncio.sleep(self.itl * self.per_chunk)
            if self.behaviour == "cut" and c > n // 2:
                writer.transport.abort()
                return
            if self.behaviour == "stall" and c > n // 2:
                await asyncio.sleep(30)
            if self.behaviour == "error" and c > n // 2:
                writer.write(b'data: {"error": {"message": "out of memory"}}\n\n')
                await writer.drain()
                return
            done = c == n
            if path == "/generate":
                obj = {
                    "text": "x" * c,
                    "output_ids": list(range(c)),
                    "meta_info": {
                        "completion_tokens": c,
                        "prompt_tokens": 4,
                        "finish_reason": {"type": "length"} if done else None,
                    },
                }
                writer.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            elif path == "/v1/chat/completions":
                # the last chunk carries finish_reason "length", as SGLang's does
                fin = "length" if done else None
                obj = {"choices": [{"index": 0, "delta": {"content": "ab" * self.per_chunk},
                                    "finish_reason": fin}]}  # fmt: skip
                writer.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            else:
                fin = "length" if done else None
                obj = {"choices": [{"index": 0, "text": "ab" * self.per_chunk,
                                    "finish_reason": fin}]}  # fmt: skip
                writer.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            await writer.drain()
        if path != "/generate":
            usage = {"choices": [], "usage": {"completion_tokens": n, "prompt_tokens": 4}}
            writer.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop)
        self.thread.join(timeout=5)


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    srv = FakeServer()
    srv.thread.start()
    assert srv.ready.wait(5)
    yield srv
    srv.stop()


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
