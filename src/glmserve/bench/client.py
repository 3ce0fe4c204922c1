"""Stream one request over httpx and record what arrived when (``metrics.StreamRecord``).

Kept lean on purpose: at high concurrency the client's per-chunk cost is what limits the
measurement, so SSE lines are split by hand from raw bytes (incrementally: each byte is looked
at once, whatever the line length) and parsed with orjson when present. Send time comes from
the transport (request bytes written), so connection-pool waits and connects count as client
queue time, not TTFT.

What counts as an ok request (README "Guarantees"): every request glmserve sends asks for
exactly N tokens (``ignore_eos`` with ``max_new_tokens``/``max_tokens`` N), so it is ok only
when its stream ends with finish_reason ``length`` and the server's count is exactly N. An
abort (SGLang's ``{"type": "abort", ...}`` finish_reason, 0.5.9
``managers/tokenizer_manager.py:1152-1187`` yields it and ``entrypoints/http_server.py:668``
then ``[DONE]``), fewer tokens, more tokens than asked, a count that is not a count, JSON of
the wrong shape, an over-long line or silence past ``--stall-timeout`` since the last token
each fail that request, with the reason.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from glmserve.bench.fasthttp import ARRIVAL, SENT_AT, FastTransport, FramingError
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
# An SSE line longer than this fails the request. Native chunks are cumulative (the whole
# text and output_ids so far), ~10-20 bytes a token with real tokenizers: 64 bytes a token
# asked leaves room, and 4 MiB covers every reply up to ~60k tokens.
LINE_CAP_BASE = 4 << 20
LINE_CAP_PER_TOKEN = 64
# Bytes read past [DONE] (the chunked terminator) before the connection is dropped instead.
DRAIN_CAP = 64 << 10
ERROR_BODY_CAP = 4096  # bytes of a non-200 body kept for the error message


class BadPayload(ValueError):
    """A ``data:`` payload of the wrong shape: that request fails ("bad stream payload")."""


class StreamVerdict(Exception):
    """A stream that fails its request for what it says, not its shape (too many tokens,
    a line past the cap, silence past the stall deadline); the message is the reason."""


def make_client(
    concurrency: int, stall_timeout: float, connect_timeout: float = 10.0, fast: bool = True
) -> httpx.AsyncClient:
    """A keep-alive pool sized to the concurrency, with a timeout on every phase.

    ``fast`` uses ``FastTransport`` (same httpx API, ~10x less CPU per streamed chunk);
    ``fast=False`` is httpx's default httpcore transport, kept for comparison.

    The read timeout bounds the wait for the response head; inside a stream the stall
    deadline counts from the last token (``stream_request``).
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


def expected_tokens(req: Request) -> int | None:
    """N when the request asks for exactly N tokens (``ignore_eos`` and a max of N), else None."""
    body = req.body
    if req.path == "/generate":
        sp = body.get("sampling_params")
        if not isinstance(sp, dict):
            return None
        n, eos = sp.get("max_new_tokens"), sp.get("ignore_eos")
    else:
        n = body.get("max_completion_tokens") or body.get("max_tokens")
        eos = body.get("ignore_eos")
    return n if eos is True and type(n) is int and n >= 0 else None


def line_cap(expected: int | None) -> int:
    return LINE_CAP_BASE + LINE_CAP_PER_TOKEN * (expected or 0)


_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}


def _kind(v: Any) -> str:
    """How a JSON value reads in an error: "a list", "the number 1e+300", "null"."""
    return "null" if v is None else _KINDS.get(type(v), f"the number {v!r}")


def _object(v: Any, what: str) -> dict[str, Any] | None:
    """``v`` when it is an object (or null: None); BadPayload names the field otherwise."""
    if v is None or isinstance(v, dict):
        return v
    raise BadPayload(f"{what} is {_kind(v)}, not an object"[:200])


def _count(v: Any, what: str) -> int | None:
    """A token count: a non-negative integer (or null: None)."""
    if v is None:
        return None
    if type(v) is not int or v < 0:
        raise BadPayload(f"{what} is {_kind(v)}, not a token count"[:200])
    return v


def _text(v: Any, what: str) -> str | None:
    if v is None or isinstance(v, str):
        return v
    raise BadPayload(f"{what} is {_kind(v)}, not a string"[:200])


class _Lines:
    """SSE lines from raw pieces, each byte scanned once: a piece is searched for newlines
    only from its own start, and the unfinished tail is kept as a list of pieces (joined
    once, when its newline arrives). ``StreamVerdict`` once a line passes ``cap`` bytes."""

    __slots__ = ("cap", "parts", "size")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.parts: list[bytes] = []
        self.size = 0

    def feed(self, raw: bytes) -> list[bytes]:
        out: list[bytes] = []
        start = 0
        while True:
            i = raw.find(b"\n", start)
            if i < 0:
                break
            if self.parts:
                self.parts.append(raw[start:i])
                line = b"".join(self.parts)
                self.parts, self.size = [], 0
            else:
                line = raw[start:i]
            if len(line) > self.cap:
                raise StreamVerdict(f"stream line longer than {self.cap >> 20} MiB")
            out.append(line)
            start = i + 1
        if start < len(raw):
            self.size += len(raw) - start
            if self.size > self.cap:
                raise StreamVerdict(
                    f"stream line longer than {self.cap >> 20} MiB without a newline"
                )
            self.parts.append(raw[start:] if start else raw)
        return out


class _Parser:
    """Turns SSE ``data:`` payloads of one API into (chunk time, cumulative tokens), and
    keeps what the verdict needs: the finish_reason and the server's final count."""

    def __init__(self, api: str, rec: StreamRecord, expected: int | None = None) -> None:
        self.api = api
        self.rec = rec
        self.expected = expected
        self.chunks = 0  # openai/chat: token-carrying chunks seen (counts come at the end)
        self.logprob_tokens = 0  # openai/chat: exact per-chunk counts when logprobs are on
        self.done = False
        self.finish_type: str | None = None  # finish_reason type
        self.finish_detail = ""  # an abort's message and status

    def feed(self, payload: bytes, now: float) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        obj = _loads(payload)
        if not isinstance(obj, dict):
            raise BadPayload(f"a data: payload is {_kind(obj)}, not an object"[:200])
        err = obj.get("error")
        if err:
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise ServerStreamError(f"server error in stream: {str(msg)[:200]}")
        if self.api == "native":
            self._native(obj, now)
        else:
            self._openai(obj, now)

    def _more_than_asked(self, count: int) -> None:
        if self.expected is not None and count > self.expected:
            raise StreamVerdict(
                f"more tokens than asked: the server sent {count}, max_new_tokens was "
                f"{self.expected}"
            )

    def _native(self, obj: dict[str, Any], now: float) -> None:
        meta = _object(obj.get("meta_info"), "meta_info") or {}
        count = _count(meta.get("completion_tokens"), "meta_info.completion_tokens")
        if count is None:  # older releases: cumulative output_ids
            ids = obj.get("output_ids")
            count = len(ids) if isinstance(ids, list) else None
        prompt = _count(meta.get("prompt_tokens"), "meta_info.prompt_tokens")
        if prompt is not None:
            self.rec.prompt_tokens = prompt
        # sglang 0.5.9 tokenizer_manager.py line 1530: meta_info.cached_tokens, every chunk
        cached = _count(meta.get("cached_tokens"), "meta_info.cached_tokens")
        if cached is not None:
            self.rec.cached_tokens = cached
        if self.rec.output_ids is not None:
            self._keep_ids(obj.get("output_ids"), count)
        reason = meta.get("finish_reason")
        if count is not None:
            self._more_than_asked(count)
            last = self.rec.chunk_tokens[-1] if self.rec.chunk_tokens else 0
            if count > last:
                self.rec.chunk_times.append(now)
                self.rec.chunk_tokens.append(count)
        if reason is not None:
            self._finished(reason)
            self.rec.completion_tokens = count

    def _keep_ids(self, ids: Any, count: int | None) -> None:
        """Keep the reply's ids: cumulative ``output_ids`` (SGLang's default) replace what
        was kept, incremental ones (``--incremental-streaming-output``) extend it."""
        if not isinstance(ids, list) or not all(type(i) is int for i in ids):
            return
        kept = self.rec.output_ids if self.rec.output_ids is not None else []
        if count is not None and len(ids) == count:
            self.rec.output_ids = list(ids)
        else:
            self.rec.output_ids = kept + list(ids)

    def _finished(self, reason: Any) -> None:
        """Keep a finish_reason: SGLang's dict (``{"type": ..., "message": ...}``) natively,
        a plain string in the OpenAI choices."""
        if isinstance(reason, str):
            self.finish_type = reason
            return
        reason = _object(reason, "finish_reason")
        assert reason is not None
        kind = reason.get("type")
        self.finish_type = kind if isinstance(kind, str) else repr(kind)[:40]
        detail = str(reason.get("message") or "").strip()[:160]
        status = reason.get("status_code")
        if status is not None:
            detail = f"{detail} (status {str(status)[:10]})".strip()
        self.finish_detail = detail

    def _openai(self, obj: dict[str, Any], now: float) -> None:
        usage = _object(obj.get("usage"), "usage")
        if usage:
            total = _count(usage.get("completion_tokens"), "usage.completion_tokens")
            if total is not None:
                self._more_than_asked(total)
                self.rec.completion_tokens = total
            prompt = _count(usage.get("prompt_tokens"), "usage.prompt_tokens")
            if prompt is not None:
                self.rec.prompt_tokens = prompt
            # sent with --enable-cache-report only (sglang 0.5.9 entrypoints/openai/
            # usage_processor.py lines 21-83: prompt_tokens_details={"cached_tokens": n})
            details = _object(usage.get("prompt_tokens_details"), "prompt_tokens_details")
            if details:
                cached = _count(details.get("cached_tokens"), "cached_tokens")
                if cached is not None:
                    self.rec.cached_tokens = cached
        choices = obj.get("choices")
        if choices is None:
            return
        if not isinstance(choices, list):
            raise BadPayload(f"choices is {_kind(choices)}, not a list"[:200])
        for choice in choices:
            if not isinstance(choice, dict):
                raise BadPayload(f"a choice is {_kind(choice)}, not an object"[:200])
            logprobs = _object(choice.get("logprobs"), "logprobs") or {}
            if self.api == "chat":
                delta = _object(choice.get("delta"), "delta") or {}
                text = _text(delta.get("content"), "delta.content") or _text(
                    delta.get("reasoning_content"), "delta.reasoning_content"
                )
                lp = logprobs.get("content")
            else:
                text = _text(choice.get("text"), "text")
                lp = logprobs.get("tokens")
            reason = choice.get("finish_reason")
            if reason is not None:
                self._finished(reason)
            n_lp = len(lp) if isinstance(lp, list) else 0
            if not text and not n_lp:
                continue
            self.chunks += 1
            self.logprob_tokens += n_lp
            # every content chunk carries at least one token
            self._more_than_asked(self.logprob_tokens if n_lp else self.chunks)
            self.rec.chunk_times.append(now)
            self.rec.chunk_tokens.append(self.logprob_tokens if n_lp else self.chunks)

    def finish(self) -> None:
        """OpenAI streams: replace chunk counts by the server's total when no logprobs."""
        if self.api == "native" or self.logprob_tokens:
            return
        total = self.rec.completion_tokens
        if total is not None and self.chunks:
            if total < self.chunks:
                # more content chunks than the total: the total cannot be spread over them
                self.rec.tokens_estimated = True
                return
            self.rec.chunk_tokens = spread_total(self.chunks, total)
            self.rec.tokens_estimated = total != self.chunks

    def verdict(self) -> str | None:
        """Why a stream that ended cleanly still failed its request; None when it is ok.

        With N asked exactly: ok only when the finish_reason is ``length`` and the server
        counted exactly N tokens. Without (a request that may stop early): only an abort
        fails it."""
        n = self.expected
        got = self.rec.completion_tokens
        if got is None and self.api == "native" and self.rec.chunk_tokens:
            got = self.rec.chunk_tokens[-1]
        shown = "?" if got is None else str(got)
        of = f"{shown} of {n}" if n is not None else shown
        if self.finish_type == "abort":
            why = f": {self.finish_detail}" if self.finish_detail else ""
            return f"aborted by the server after {of} tokens{why}"
        if n is None:
            return None
        if self.finish_type is None:
            return f"no finish_reason: the stream ended after {of} tokens"
        if self.finish_type != "length":
            return f"finish_reason {self.finish_type} after {of} tokens (ignore_eos asks for {n})"
        if got is None:
            where = "meta_info.completion_tokens" if self.api == "native" else "usage"
            return f"no token count from the server ({where}) with finish_reason length"
        if got != n:
            return f"finish_reason length after {got} of {n} tokens"
        return None


def prepare_request(client: httpx.AsyncClient, base_url: str, req: Request) -> httpx.Request:
    """Build the httpx request once (JSON encoded, headers merged): dispatch stays cheap."""
    body = _dumps(req.body)
    headers = {"content-type": "application/json"}
    return client.build_request("POST", base_url + req.path, content=body, headers=headers)


async def _error_body(resp: httpx.Response) -> str:
    """The first bytes of a non-200 body (a hostile one may never end)."""
    got = b""
    async for raw in resp.aiter_raw():
        got += raw
        if len(got) >= ERROR_BODY_CAP:
            break
    return got[:200].decode("utf-8", "replace").strip()


# Lines an event stream may hold besides data: (the SSE fields and a comment).
_SSE_FIELDS = (b"data:", b":", b"event:", b"id:", b"retry:")


def _ended_early(parser: _Parser, rec: StreamRecord, other: bytes, resp: httpx.Response) -> str:
    """Why a body that ended (cleanly) without ``data: [DONE]`` fails its request: SGLang's
    native and OpenAI streams always end with it (0.5.9 ``entrypoints/http_server.py:668``,
    ``serving_completions.py``/``serving_chat.py``), so a stream without it was cut short
    or is not SGLang's, even when a finish_reason and the full count came before."""
    if not rec.chunk_tokens and parser.finish_type is None and other:
        kind = resp.headers.get("content-type", "no content-type")[:60]
        text = other.decode("utf-8", "replace").strip()
        return f"not an event stream (HTTP 200, {kind}): {text}"[:300]
    if parser.finish_type is None:
        return "stream cut: ended without [DONE]"
    parser.finish()
    why = parser.verdict()  # an abort or a short count says more than the missing [DONE]
    if why is not None:
        return why
    got = rec.chunk_tokens[-1] if rec.chunk_tokens else 0
    return (
        f"stream cut: ended without [DONE] after finish_reason {parser.finish_type} ({got} tokens)"
    )


async def stream_request(
    client: httpx.AsyncClient,
    base_url: str,
    req: Request,
    api: str,
    rec: StreamRecord,
    prepared: httpx.Request | None = None,
    stall_timeout: float | None = None,
) -> StreamRecord:
    """Send ``req`` and record every chunk into ``rec``; never raises for request failures.

    Failures become ``rec.error`` (one line) so a run counts them and carries on; the caller
    decides whether a connect failure means the server is gone. ``rec`` is filled in place so
    a cancelled (Ctrl-C) request still leaves what it measured. ``prepared`` (from
    ``prepare_request``) may be sent many times; without it the request is built here, with
    httpcore's trace hook to time the send on httpx's default transport.

    ``stall_timeout``: the request fails when no token arrived for that long (from the send
    for the first token, then from the last token). Bytes that carry no token (SSE comments,
    keep-alive pings, a line that never ends) do not move that deadline.
    """
    expected = expected_tokens(req)
    parser = _Parser(api, rec, expected)
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
                rec.error = f"HTTP {resp.status_code}: {await _error_body(resp)}"
                return rec
            lines = _Lines(line_cap(expected))
            clock = resp.extensions.get(ARRIVAL)  # socket arrival times (FastTransport)
            deadline = None
            if stall_timeout is not None:
                deadline = (rec.send or perf()) + stall_timeout
            if clock is not None:
                clock.deadline = deadline  # the transport wakes us there if nothing comes
            seen = 0  # token chunks seen when the deadline was last moved
            drained = 0
            other = b""  # the first line that is no SSE field: a body that is no event stream
            async for raw in resp.aiter_raw():
                if parser.done:  # drain to the end of the body so the connection is reused
                    drained += len(raw)
                    if drained > DRAIN_CAP or (deadline is not None and perf() > deadline):
                        break  # not a body that ends: drop the connection instead
                    continue
                now = clock.last if clock is not None else perf()
                for line in lines.feed(raw):
                    if not other and line.strip() and not line.startswith(_SSE_FIELDS):
                        other = line[:200]
                    if line[:5] == b"data:":
                        try:
                            parser.feed(line[5:].strip(), now)
                        except (TypeError, AttributeError, KeyError, IndexError,
                                OverflowError, RecursionError) as exc:  # fmt: skip
                            # a shape no check above names: still that request's failure
                            raise BadPayload(f"{type(exc).__name__}: {exc}") from exc
                        if parser.done:
                            rec.end = now
                            break
                if deadline is not None:
                    if len(rec.chunk_times) > seen:  # a token arrived: the deadline moves
                        seen = len(rec.chunk_times)
                        deadline = rec.chunk_times[-1] + stall_timeout  # type: ignore[operator]
                        if clock is not None:
                            clock.deadline = deadline
                    elif not parser.done and perf() > deadline:
                        raise httpx.ReadTimeout("no token within the stall timeout")
        finally:
            await resp.aclose()
        if not parser.done:  # SGLang ends every stream with [DONE], errors and aborts too
            rec.error = _ended_early(parser, rec, other or b"".join(lines.parts)[:200], resp)
        else:
            parser.finish()
            rec.error = parser.verdict()
    except httpx.ConnectError as exc:
        rec.error = f"connect failed: {exc}"[:200]
    except httpx.ReadTimeout:
        if not parser.done:
            got = rec.chunk_tokens[-1] if rec.chunk_tokens else 0
            rec.error = (
                f"stalled: no token for {stall_timeout:g} s (after {got} tokens)"
                if stall_timeout is not None
                else "stalled: no data within the stall timeout"
            )
        else:
            parser.finish()
            rec.error = parser.verdict()
    except httpx.TimeoutException as exc:
        rec.error = f"timeout: {type(exc).__name__}"
    except FramingError as exc:
        rec.error = f"bad stream payload: {exc}"[:200]
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        rec.error = f"stream cut: {type(exc).__name__}: {exc}"[:200]
    except httpx.HTTPError as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:200]
    except ServerStreamError as exc:
        rec.error = str(exc)
    except StreamVerdict as exc:
        rec.error = str(exc)[:200]
    except ValueError as exc:  # bad JSON in a data: line, or JSON of the wrong shape
        rec.error = f"bad stream payload: {exc}"[:200]
    except BaseException:  # cancelled (Ctrl-C, run stopped): keep what arrived
        rec.error = rec.error or "interrupted"
        raise
    finally:
        if rec.end is None:
            rec.end = perf()
    return rec
