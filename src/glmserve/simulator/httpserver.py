"""A lean HTTP/1.1 server on asyncio.Protocol: keep-alive, Content-Length bodies, chunked
streaming responses.

Why not a framework: the simulator must push >= 20,000 SSE chunks/s to >= 1,000 streams on a
2-core box while its pacing stays within 2% of the cost model; a Protocol that writes straight
to the transport from the engine's step callback costs a few microseconds per chunk, with no
dependency. Streaming responses use ``Transfer-Encoding: chunked`` like uvicorn's
StreamingResponse, so aiohttp/httpx clients see the same framing as against SGLang.
"""

from __future__ import annotations

import asyncio
import json
import queue
import socket
import threading
import time
from collections.abc import Awaitable, Callable, MutableSequence
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any
from urllib.parse import parse_qsl, urlsplit

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
MAX_BODY = 64 << 20
# SGLang 0.5.9 starts uvicorn with ``timeout_keep_alive=5`` (srt/entrypoints/http_server.py,
# both ``uvicorn.run`` calls; 5 is also uvicorn's default, uvicorn/config.py Config.__init__):
# once a response is complete, uvicorn's ``on_response_complete`` arms
# ``loop.call_later(timeout_keep_alive, timeout_keep_alive_handler)``, which closes the
# connection unless a new request arrives first (``data_received`` cancels it). Wall-clock
# seconds: HTTP idling is not GPU time, so --sim-speed does not scale it.
KEEP_ALIVE_S = 5.0


@dataclass
class HttpRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    client: str

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, data: Any, status: int = 200) -> Response:
        return cls(status, json.dumps(data, separators=(",", ":")).encode())

    @classmethod
    def text(cls, text: str, status: int = 200) -> Response:
        return cls(status, text.encode(), "text/plain; charset=utf-8")


Handler = Callable[[HttpRequest, "Connection"], Awaitable["Response | None"]]


class Connection(asyncio.Protocol):
    """One client connection. Handlers either return a Response or stream via ``start_stream``
    / ``write_chunk`` / ``end_stream`` and return None."""

    def __init__(self, dispatch: Handler, on_response: Callable | None = None) -> None:
        self.dispatch = dispatch
        self.on_response = on_response
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False
        self.closed = False
        self.keep_alive = True
        self.on_close: list[Callable[[], None]] = []
        self.peer = "127.0.0.1:0"
        self.sock: socket.socket | None = None
        self.slow = False  # set once the kernel refused bytes: the rest goes via the loop
        self.lane = 0
        self.idle_timer: asyncio.TimerHandle | None = None
        self.response_started = False  # this request's status line is on the wire

    # -- asyncio.Protocol --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        # the raw socket, for the streaming fast path (asyncio keeps it as ``_sock``)
        raw = getattr(transport, "_sock", None)
        self.sock = raw if isinstance(raw, socket.socket) else None
        if SEND_POOL is not None:
            SEND_POOL.assign(self)
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"

    def data_received(self, data: bytes) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        self.buf += data
        if not self.busy:
            self._next_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        callbacks, self.on_close = self.on_close, []
        for cb in callbacks:
            cb()

    # -- parsing -----------------------------------------------------------------------
    def _next_request(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > 65536:
                self._fail(413)
            return
        head = bytes(self.buf[:end]).decode("latin-1")
        lines = head.split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            self._fail(400)
            return
        headers: dict[str, str] = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            headers[k.strip().lower()] = v.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body_start = end + 4
            body = self._dechunk(body_start)
            if body is None:
                return
            data, consumed = body
            del self.buf[: body_start + consumed]
        else:
            length = int(headers.get("content-length", "0") or 0)
            if length > MAX_BODY:
                self._fail(413)
                return
            if len(self.buf) < end + 4 + length:
                return
            data = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
        conn_hdr = headers.get("connection", "").lower()
        self.keep_alive = not (
            conn_hdr == "close" or (version == "HTTP/1.0" and conn_hdr != "keep-alive")
        )
        parts = urlsplit(target)
        req = HttpRequest(
            method=method.upper(),
            path=parts.path,
            query=dict(parse_qsl(parts.query)),
            headers=headers,
            body=data,
            client=self.peer,
        )
        self.busy = True
        asyncio.get_running_loop().create_task(self._handle(req))

    def _dechunk(self, start: int) -> tuple[bytes, int] | None:
        out = bytearray()
        pos = start
        buf = self.buf
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
            if size == 0:
                if len(buf) < eol + 4:
                    return None
                return bytes(out), eol + 4 - start
            if len(buf) < eol + 2 + size + 2:
                return None
            out += buf[eol + 2 : eol + 2 + size]
            pos = eol + 2 + size + 2

    async def _handle(self, req: HttpRequest) -> None:
        self.response_started = False
        try:
            resp = await self.dispatch(req, self)
        except Exception as exc:  # a handler bug must not kill the server
            if self.response_started:  # no second status line: uvicorn closes the connection
                # (0.35 run_asgi: protocols/http/httptools_impl.py:407-418, h11_impl.py:401-412)
                if self.transport is not None:
                    self.transport.close()
                self.busy = False
                return
            resp = Response.json({"error": {"message": f"{type(exc).__name__}: {exc}"}}, 500)
        if resp is not None:
            self.send(resp, req)
        self.busy = False
        if self.closed:
            return
        if not self.keep_alive:
            assert self.transport is not None
            self.transport.close()
        elif self.buf:
            self._next_request()
        else:
            loop = asyncio.get_running_loop()
            self.idle_timer = loop.call_later(KEEP_ALIVE_S, self._close_idle)

    def _close_idle(self) -> None:
        """uvicorn's ``timeout_keep_alive_handler``: close a connection left idle."""
        self.idle_timer = None
        if self.transport is not None and not self.closed and not self.busy:
            self.transport.close()

    def _fail(self, status: int) -> None:
        if self.transport is not None:
            self.transport.write(
                f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\ncontent-length: 0\r\n"
                "connection: close\r\n\r\n".encode()
            )
            self.transport.close()

    # -- responses ---------------------------------------------------------------------
    def _head(
        self, status: int, content_type: str, extra: dict[str, str], length: int | None
    ) -> bytes:
        lines = [
            f"HTTP/1.1 {status} {REASONS.get(status, '')}",
            f"date: {formatdate(usegmt=True)}",
            "server: uvicorn",
            f"content-type: {content_type}",
        ]
        if length is None:
            lines.append("transfer-encoding: chunked")
        else:
            lines.append(f"content-length: {length}")
        if not self.keep_alive:
            lines.append("connection: close")
        lines.extend(f"{k}: {v}" for k, v in extra.items())
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def send(self, resp: Response, req: HttpRequest) -> None:
        if self.closed or self.transport is None:
            return
        head = self._head(resp.status, resp.content_type, resp.headers, len(resp.body))
        self.response_started = True
        self.transport.write(head + (resp.body if req.method != "HEAD" else b""))
        if self.on_response:
            self.on_response(req, resp.status)

    def start_stream(
        self, req: HttpRequest, content_type: str = "text/event-stream; charset=utf-8"
    ) -> None:
        if self.closed or self.transport is None:
            return
        self.response_started = True
        self.transport.write(self._head(200, content_type, {}, None))
        if self.on_response:
            self.on_response(req, 200)

    def write_chunk(
        self,
        data: bytes,
        emit_times: MutableSequence[float] | None = None,
        ntokens: int = 0,
        at: float | None = None,
        gap: float = 0.0,
    ) -> None:
        """One HTTP chunk; ``emit_times`` gets its emission time ``ntokens`` times (ground
        truth): ``at``, the engine's hand-over stamp (the send follows at once), else now.

        With a SendPool the chunk is sent from a sender thread (in order per connection),
        which records its own send time, not before ``gap`` seconds after the request's
        previous chunk (the engine's pacing floor, simulator/engine.py); otherwise directly
        when asyncio has nothing buffered, else through the transport."""
        if self.closed or not data:
            return
        msg = b"%x\r\n%b\r\n" % (len(data), data)
        pool = SEND_POOL
        if pool is not None and self.sock is not None:
            pool.add(self, msg, emit_times, ntokens, gap)
            return
        t = time.perf_counter() if at is None else at
        self._send_inline(msg)
        if emit_times is not None:
            emit_times.extend([t] * ntokens)

    def _send_inline(self, msg: bytes) -> None:
        t = self.transport
        sock = self.sock
        if sock is not None and not t.get_write_buffer_size():  # type: ignore[union-attr]
            try:
                sent = sock.send(msg)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                sent = 0  # let the transport see (and report) the broken connection
            if sent == len(msg):
                return
            msg = msg[sent:]
        t.write(msg)  # type: ignore[union-attr]

    def write_from_thread(self, msg: bytes) -> None:
        """Loop-thread half of the slow path (called via call_soon_threadsafe, in order)."""
        if not self.closed and self.transport is not None:
            self.transport.write(msg)

    def end_stream(self) -> None:
        if self.closed:
            return
        if SEND_POOL is not None and self.sock is not None:
            SEND_POOL.add(self, b"0\r\n\r\n", None, 0)
        else:
            self.transport.write(b"0\r\n\r\n")  # type: ignore[union-attr]


class SendPool:
    """Sender threads for streaming chunks (``--sim-send-threads N``; off by default).

    Why: on loopback most of a chunk's cost is the kernel's TCP work inside ``send()``, which
    runs with the GIL released; threads can spread it over cores while the event loop builds
    the next step (raw sends on the 2-core box: ~28k/s from one thread, ~53k/s from two). In
    the full simulator on the same box it did not beat sending on the loop (server CPU per
    token 15 vs 16-17 us), hence off by default; kept for hosts with more cores.

    Each connection has one lane (thread), so its chunks stay in order; when the kernel
    does not take a whole chunk the connection turns "slow" and everything after goes through
    the transport on the loop thread, still in order. Items added during one loop callback
    (one engine step) are handed over together."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int) -> None:
        self.loop = loop
        self.n = max(1, threads)
        self.queues: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(self.n)]
        self.batches: list[list[tuple]] = [[] for _ in range(self.n)]
        self.scheduled = False
        self._next_lane = 0
        for q in self.queues:
            threading.Thread(target=self._worker, args=(q,), daemon=True).start()

    def assign(self, conn: Connection) -> None:
        conn.lane = self._next_lane % self.n
        self._next_lane += 1

    def add(
        self,
        conn: Connection,
        msg: bytes,
        times: MutableSequence[float] | None,
        n: int,
        gap: float = 0.0,
    ) -> None:
        if conn.transport is not None and conn.transport.get_write_buffer_size():
            conn.slow = True  # bytes already queued in asyncio: keep them first
        self.batches[conn.lane].append((conn, msg, times, n, gap))
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        for i, batch in enumerate(self.batches):
            if batch:
                self.queues[i].put(batch)
                self.batches[i] = []

    def _worker(self, q: queue.SimpleQueue) -> None:
        clock = time.perf_counter
        while True:
            for conn, msg, times, n, gap in q.get():
                if conn.closed:
                    continue
                t = clock()
                if times:  # the pacing floor (engine.py): the previous chunk's send + gap
                    ready = times[-1] + gap
                    while t < ready:
                        t = clock()
                if not conn.slow:
                    try:
                        sent = conn.sock.send(msg)  # type: ignore[union-attr]
                    except (BlockingIOError, InterruptedError, OSError):
                        sent = 0
                    if sent < len(msg):
                        conn.slow = True
                        msg = msg[sent:]
                    else:
                        msg = b""
                if msg:
                    try:
                        self.loop.call_soon_threadsafe(conn.write_from_thread, msg)
                    except RuntimeError:  # loop closed: the process is exiting
                        return
                if times is not None:
                    times.extend([t] * n)


SEND_POOL: SendPool | None = None


def start_send_pool(threads: int) -> None:
    """Use ``threads`` sender threads for streaming chunks (0: send on the loop thread)."""
    global SEND_POOL
    SEND_POOL = SendPool(asyncio.get_running_loop(), threads) if threads > 0 else None


async def serve(
    host: str, port: int, dispatch: Handler, on_response: Callable | None = None
) -> asyncio.Server:
    """Bind and start serving (raises OSError when the port is taken, like uvicorn's bind)."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: Connection(dispatch, on_response),
        host=host,
        port=port,
        backlog=4096,
        reuse_address=True,
    )
