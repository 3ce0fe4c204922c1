"""Stream one request over httpx and record what arrived when (``metrics.StreamRecord``).

Kept lean on purpose: at high concurrency the client's per-chunk cost is what limits the
measurement, so SSE lines are split by hand from raw bytes and parsed with orjson when present.
Send time comes from httpcore's trace hook (request headers written), so connection-pool waits
and connects count as client queue time, not TTFT.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from glmserve.bench.fasthttp import ARRIVAL, SENT_AT, FastTransport
from glmserve.bench.metrics import StreamRecord, spread_total
from glmserve.bench.workload import Request
from glmserve.errors import ServerStreamError

try:  # orjson is ~5x faster on the cumulative native chunks; plain json works too
    import orjson

    _loads: Any = orjson.loads
    _dumps: Any = orjson.dumps
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()


_SEND_EVENTS = ("http11.send_request_headers.started", "http2.send_request_headers.started")


def make_client(
    concurrency: int, stall_timeout: float, connect_timeout: float = 10.0, fast: bool = True
) -> httpx.AsyncClient:
    """A keep-alive pool sized to the concurrency, with a timeout on every phase.

    ``fast`` uses ``FastTransport`` (same httpx API, ~10x less CPU per streamed chunk);
    ``fast=False`` is httpx's default httpcore transport, kept for comparison.

    The read timeout is the per-request stall deadline: a stream that sends no byte for
    ``stall_timeout`` seconds is abandoned and counted as an error.
    """
    limits = httpx.Limits(
        max_connections=concurrency + 4,
        max_keepalive_connections=concurrency + 4,
        keepalive_expiry=60.0,
    )
    timeout = httpx.Timeout(
        connect=connect_timeout, read=stall_timeout, write=connect_timeout, pool=stall_timeout
    )
    if fast:
        return httpx.AsyncClient(transport=FastTransport(concurrency + 4), timeout=timeout)
    return httpx.AsyncClient(limits=limits, timeout=timeout, http1=True, http2=False)


class _Parser:
    """Turns SSE ``data:`` payloads of one API into (chunk time, cumulative tokens)."""

    def __init__(self, api: str, rec: StreamRecord) -> None:
        self.api = api
        self.rec = rec
        self.chunks = 0  # openai/chat: token-carrying chunks seen (counts come at the end)
        self.logprob_tokens = 0  # openai/chat: exact per-chunk counts when logprobs are on
        self.done = False

    def feed(self, payload: bytes, now: float) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        obj = _loads(payload)
        if not isinstance(obj, dict):
            return
        if obj.get("error"):
            e = obj["error"]
            msg = e.get("message", e) if isinstance(e, dict) else e
            raise ServerStreamError(f"server error in stream: {str(msg)[:200]}")
        if self.api == "native":
            self._native(obj, now)
        else:
            self._openai(obj, now)

    def _native(self, obj: dict[str, Any], now: float) -> None:
        meta = obj.get("meta_info") or {}
        count = meta.get("completion_tokens")
        if count is None:  # older releases: cumulative output_ids
            ids = obj.get("output_ids")
            count = len(ids) if isinstance(ids, list) else None
        if meta.get("prompt_tokens") is not None:
            self.rec.prompt_tokens = int(meta["prompt_tokens"])
        if count is None:
            return
        count = int(count)
        last = self.rec.chunk_tokens[-1] if self.rec.chunk_tokens else 0
        if count > last:
            self.rec.chunk_times.append(now)
            self.rec.chunk_tokens.append(count)
        if meta.get("finish_reason") is not None:
            self.rec.completion_tokens = count

    def _openai(self, obj: dict[str, Any], now: float) -> None:
        usage = obj.get("usage")
        if usage:
            if usage.get("completion_tokens") is not None:
                self.rec.completion_tokens = int(usage["completion_tokens"])
            if usage.get("prompt_tokens") is not None:
                self.rec.prompt_tokens = int(usage["prompt_tokens"])
        for choice in obj.get("choices") or []:
            if self.api == "chat":
                delta = choice.get("delta") or {}
                text = delta.get("content") or delta.get("reasoning_content")
                lp = (choice.get("logprobs") or {}).get("content")
            else:
                text = choice.get("text")
                lp = (choice.get("logprobs") or {}).get("tokens")
            n_lp = len(lp) if isinstance(lp, list) else 0
            if not text and not n_lp:
                continue
            self.chunks += 1
            self.logprob_tokens += n_lp
            self.rec.chunk_times.append(now)
            self.rec.chunk_tokens.append(self.logprob_tokens if n_lp else self.chunks)

    def finish(self) -> None:
        """OpenAI streams: replace chunk counts by the server's total when no logprobs."""
        if self.api == "native" or self.logprob_tokens:
            return
        total = self.rec.completion_tokens
        if total is not None and self.chunks:
            self.rec.chunk_tokens = spread_total(self.chunks, total)
            self.rec.tokens_estimated = total != self.chunks


def prepare_request(client: httpx.AsyncClient, base_url: str, req: Request) -> httpx.Request:
    """Build the httpx request once (JSON encoded, headers merged): dispatch stays cheap."""
    body = _dumps(req.body)
    headers = {"content-type": "application/json"}
    return client.build_request("POST", base_url + req.path, content=body, headers=headers)


async def stream_request(
    client: httpx.AsyncClient,
    base_url: str,
    req: Request,
    api: str,
    rec: StreamRecord,
    prepared: httpx.Request | None = None,
) -> StreamRecord:
    """Send ``req`` and record every chunk into ``rec``; never raises for request failures.

    Failures become ``rec.error`` (one line) so a run counts them and carries on; the caller
    decides whether a connect failure means the server is gone. ``rec`` is filled in place so
    a cancelled (Ctrl-C) request still leaves what it measured. ``prepared`` (from
    ``prepare_request``) may be sent many times; without it the request is built here, with
    httpcore's trace hook to time the send on httpx's default transport.
    """
    parser = _Parser(api, rec)
    perf = time.perf_counter

    async def trace(name: str, info: dict[str, Any]) -> None:
        if rec.send is None and name in _SEND_EVENTS:
            rec.send = perf()

    try:
        request = prepared
        if request is None:
            request = client.build_request(
                "POST", base_url + req.path, json=req.body, extensions={"trace": trace}
            )
        resp = await client.send(request, stream=True)
        try:
            if rec.send is None:
                rec.send = resp.extensions.get(SENT_AT)
            if resp.status_code != 200:
                body = (await resp.aread())[:200].decode("utf-8", "replace").strip()
                rec.error = f"HTTP {resp.status_code}: {body}"
                return rec
            buf = b""
            clock = resp.extensions.get(ARRIVAL)  # socket arrival times (FastTransport)
            async for raw in resp.aiter_raw():
                if parser.done:
                    continue  # drain to the end of the body so the connection is reused
                now = clock.last if clock is not None else perf()
                buf += raw
                while True:
                    i = buf.find(b"\n")
                    if i < 0:
                        break
                    line, buf = buf[:i].rstrip(b"\r"), buf[i + 1 :]
                    if line.startswith(b"data:"):
                        parser.feed(line[5:].strip(), now)
                        if parser.done:
                            rec.end = now
                            break
        finally:
            await resp.aclose()
        parser.finish()
        if not parser.done and rec.completion_tokens is None:
            rec.error = "stream cut: ended without [DONE]"
    except httpx.ConnectError as exc:
        rec.error = f"connect failed: {exc}"[:200]
    except httpx.ReadTimeout:
        if not parser.done:
            rec.error = "stalled: no data within the stall timeout"
    except httpx.TimeoutException as exc:
        rec.error = f"timeout: {type(exc).__name__}"
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        rec.error = f"stream cut: {type(exc).__name__}: {exc}"[:200]
    except httpx.HTTPError as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:200]
    except ServerStreamError as exc:
        rec.error = str(exc)
    except ValueError as exc:  # bad JSON in a data: line
        rec.error = f"bad stream payload: {exc}"[:200]
    except BaseException:  # cancelled (Ctrl-C, run stopped): keep what arrived
        rec.error = rec.error or "interrupted"
        raise
    finally:
        if rec.end is None:
            rec.end = perf()
    return rec
