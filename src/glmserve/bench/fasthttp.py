"""A lean HTTP/1.1 transport for httpx, built on ``asyncio.Protocol``.

Why: at high concurrency the per-chunk cost of httpx's default stack (httpcore + h11 + anyio,
~110 us per SSE chunk on a 2-core CI box) is what limits a benchmark client, not the server.
This transport keeps the httpx API (``httpx.AsyncClient(transport=FastTransport())``, same
exceptions, same timeouts) but parses status line, headers and chunked/Content-Length bodies
by hand inside ``data_received`` and hands body bytes to the reader with one future wake-up,
a few microseconds per chunk. Plain ``http://`` only (the bench talks to a local port or an
ssh forward); other schemes fall back to httpx's default transport.

Idle keep-alive: SGLang runs uvicorn with ``timeout_keep_alive=5`` (0.5.9
``srt/entrypoints/http_server.py``, both ``uvicorn.run`` calls; also uvicorn's own default,
``uvicorn/config.py`` ``Config.__init__``), so a pooled connection idle for 5 s is closed by the
server, and the close can cross a request written to it. Like httpcore's ``keepalive_expiry``,
a connection idle longer than ``KEEPALIVE_EXPIRY_S`` is not reused; a reused connection that
the server closes before any byte of the response is retried once on a fresh connection (the
server never read that request: uvicorn only closes a connection with no request in flight). A
fresh connection closed before any byte of the response (what an ssh ``-L`` forward does when
nothing listens on the far side any more) is reported as ``httpx.ConnectError``: the server is
gone, not a stream cut short.

The time the request bytes were handed to the socket is returned in
``response.extensions["glmserve.sent_at"]`` (``time.perf_counter``), so TTFT starts at the
send, and waiting for a connection counts as client queue time. The arrival time of each body
piece is in ``response.extensions["glmserve.arrival"].last`` while iterating.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httpx

SENT_AT = "glmserve.sent_at"
ARRIVAL = "glmserve.arrival"


class FramingError(httpx.RemoteProtocolError):
    """The response's HTTP framing is malformed (not a connection that merely ended)."""


class ArrivalClock:
    """``last``: perf_counter time the socket delivered the bytes last yielded by the body.

    Taken in ``data_received``, before any coroutine runs, so a busy event loop delays the
    client's processing of a chunk but not the time recorded for it.
    """

    __slots__ = ("deadline", "last")

    def __init__(self) -> None:
        self.last = 0.0
        self.deadline: float | None = None  # perf_counter; None: the read timeout alone


_MAX_HEAD = 64 * 1024
_MAX_SIZE_LINE = 1024  # a chunk-size line (hex size and extensions) longer than this is junk
KEEPALIVE_EXPIRY_S = 4.0  # below uvicorn's 5 s timeout_keep_alive, so it closes nothing we use


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection carrying one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.head: asyncio.Future[tuple[int, bytes, list[tuple[bytes, bytes]]]] | None = None
        self.pieces: deque[tuple[float, bytes]] = deque()
        self.t_recv = 0.0  # perf_counter of the current data_received call
        self.waiter: asyncio.Future[Any] | None = None
        self.mode = "idle"  # idle | head | chunked | length | close | done
        self.remaining = 0  # length mode: bytes left; chunked: bytes left in the chunk
        self.in_chunk = False
        self.lost: Exception | None = None
        self.closed = False
        self.keep_alive = True
        self.idle_since = time.monotonic()
        self.used = False  # carried a request before: the server may close it when idle
        self.got_bytes = False  # any byte of the current response arrived

    # -- protocol callbacks --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.t_recv = time.perf_counter()
        self.got_bytes = True
        self.buf += data
        try:
            self._parse()
        except Exception as exc:  # any parse failure is this response's error
            self._framing_error(f"bad response framing: {type(exc).__name__}: {exc}")

    def _framing_error(self, why: str) -> None:
        """End this response with a protocol error and drop the connection."""
        err = FramingError(why[:200])
        if self.head is not None and not self.head.done():
            self.head.set_exception(err)
        self.lost = err
        self.keep_alive = False
        self.buf.clear()
        if self.transport is not None:
            self.transport.close()
        self._wake()

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.mode == "close":
            self.mode = "done"
        elif self.mode != "done" and self.mode != "idle" and self.lost is None:
            self.lost = exc or ConnectionResetError("server closed the connection")
        if self.head is not None and not self.head.done():
            self.head.set_exception(
                httpx.RemoteProtocolError("server disconnected without sending a response")
            )
        self._wake()

    # -- parsing -------------------------------------------------------------------------
    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _parse(self) -> None:
        if self.mode == "head":
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                if len(self.buf) > _MAX_HEAD and self.head and not self.head.done():
                    self.head.set_exception(httpx.RemoteProtocolError("response head too large"))
                return
            raw = bytes(self.buf[:i])
            del self.buf[: i + 4]
            lines = raw.split(b"\r\n")
            parts = lines[0].split(b" ", 2)
            try:
                status = int(parts[1])
            except (IndexError, ValueError):
                if self.head and not self.head.done():
                    self.head.set_exception(
                        httpx.RemoteProtocolError(f"bad status line {raw[:80]!r}")
                    )
                return
            headers = []
            chunked = False
            length: int | None = None
            for line in lines[1:]:
                k, _, v = line.partition(b":")
                k, v = k.strip(), v.strip()
                headers.append((k, v))
                lk = k.lower()
                if lk == b"transfer-encoding" and b"chunked" in v.lower():
                    chunked = True
                elif lk == b"content-length":
                    # RFC 9110 8.6: 1*DIGIT; a list of equal values may be folded into one
                    values = {x.strip() for x in v.split(b",")}
                    if (
                        len(values) != 1
                        or not v
                        or not next(iter(values)).isdigit()
                        or (length is not None and int(next(iter(values))) != length)
                    ):
                        self._framing_error(f"bad Content-Length {v[:40]!r}")
                        return
                    length = int(next(iter(values)))
                elif lk == b"connection" and v.lower() == b"close":
                    self.keep_alive = False
            if chunked:
                self.mode, self.in_chunk = "chunked", False
            elif length is not None:
                self.mode, self.remaining = ("length", length) if length else ("done", 0)
            else:
                self.mode, self.keep_alive = "close", False
            if self.head and not self.head.done():
                self.head.set_result((status, parts[2] if len(parts) > 2 else b"", headers))
        if self.mode == "length":
            take = min(self.remaining, len(self.buf))
            if take:
                self.pieces.append((self.t_recv, bytes(self.buf[:take])))
                del self.buf[:take]
                self.remaining -= take
            if self.remaining == 0:
                self.mode = "done"
        elif self.mode == "chunked":
            self._parse_chunked()
        elif self.mode == "close" and self.buf:
            self.pieces.append((self.t_recv, bytes(self.buf)))
            self.buf.clear()
        if self.pieces or self.mode == "done":
            self._wake()

    def _parse_chunked(self) -> None:
        buf = self.buf
        pos = 0
        n = len(buf)
        while True:
            if self.in_chunk:
                take = min(self.remaining, n - pos)
                if take:
                    self.pieces.append((self.t_recv, bytes(buf[pos : pos + take])))
                    pos += take
                    self.remaining -= take
                if self.remaining:
                    break
                if n - pos < 2:
                    break
                pos += 2  # CRLF after the chunk data
                self.in_chunk = False
            i = buf.find(b"\r\n", pos, pos + _MAX_SIZE_LINE)
            if i < 0:
                if n - pos >= _MAX_SIZE_LINE:
                    self._framing_error(f"chunk size line longer than {_MAX_SIZE_LINE} bytes")
                    return
                break
            size_line = bytes(buf[pos:i]).split(b";", 1)[0].strip()
            if not size_line or size_line.strip(b"0123456789abcdefABCDEF"):
                self._framing_error(f"bad chunk size {size_line[:20]!r}")
                return
            size = int(size_line, 16)
            if size == 0:
                # the last chunk; optional trailers end with an empty line
                j = buf.find(b"\r\n\r\n", i)
                if j < 0:
                    break  # wait for the rest; the size line is parsed again
                pos = j + 4
                self.mode = "done"
                break
            pos = i + 2
            self.in_chunk, self.remaining = True, size
        del buf[:pos]

    # -- reading -------------------------------------------------------------------------
    async def wait_piece(self, timeout: float | None) -> tuple[float, bytes] | None:
        """Next (arrival time, body bytes) as received, or None at the end of the body."""
        while True:
            if self.pieces:
                return self.pieces.popleft()
            if isinstance(self.lost, FramingError):
                raise self.lost
            if self.lost is not None:
                raise httpx.RemoteProtocolError(
                    f"peer closed connection without sending complete message body ({self.lost})"
                )
            if self.mode == "done":
                return None
            if self.closed:
                if self.mode == "close":
                    return None
                raise httpx.RemoteProtocolError("connection closed mid-response")
            loop = asyncio.get_running_loop()
            waiter = self.waiter = loop.create_future()
            # a plain timer instead of asyncio.wait_for: this runs once per chunk
            timer = loop.call_later(timeout, _expire, waiter) if timeout is not None else None
            try:
                await waiter
            finally:
                self.waiter = None
                if timer is not None:
                    timer.cancel()
            if waiter.result() is _TIMED_OUT:
                raise httpx.ReadTimeout("no data within the read timeout")

    def reusable(self) -> bool:
        return self.mode == "done" and self.keep_alive and not self.closed and not self.buf

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True


_TIMED_OUT = object()


class _ClosedBeforeResponse(Exception):
    """The connection ended before the first byte of the response."""


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(_TIMED_OUT)


class _Body(httpx.AsyncByteStream):
    def __init__(
        self, transport: FastTransport, key: tuple, conn: _Conn, read_timeout: float | None
    ) -> None:
        self.clock = ArrivalClock()
        self.transport = transport
        self.key = key
        self.conn = conn
        self.read_timeout = read_timeout
        self.released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        clock = self.clock
        while True:
            timeout = self.read_timeout
            if clock.deadline is not None:
                left = max(0.0, clock.deadline - time.perf_counter())
                timeout = left if timeout is None else min(timeout, left)
            piece = await self.conn.wait_piece(timeout)
            if piece is None:
                return
            self.clock.last = piece[0]
            yield piece[1]

    async def aclose(self) -> None:
        if not self.released:
            self.released = True
            self.transport._release(self.key, self.conn)


class FastTransport(httpx.AsyncBaseTransport):
    """httpx transport with a keep-alive pool of ``_Conn`` protocols (see module docstring)."""

    def __init__(self, max_keepalive: int = 1024) -> None:
        self.max_keepalive = max_keepalive
        self.idle: dict[tuple, list[_Conn]] = {}
        self.fallback: httpx.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            if self.fallback is None:
                self.fallback = httpx.AsyncHTTPTransport()
            return await self.fallback.handle_async_request(request)
        timeouts: dict[str, Any] = request.extensions.get("timeout") or {}
        key = (url.host, url.port or 80)
        body = await request.aread()
        target = url.raw_path or b"/"
        head = [request.method.encode() + b" " + target + b" HTTP/1.1"]
        head += [k + b": " + v for k, v in request.headers.raw]
        payload = b"\r\n".join(head) + b"\r\n\r\n" + body
        conn = await self._acquire(key, timeouts.get("connect"))
        try:
            sent_at, (status, reason, headers) = await self._exchange(conn, payload, timeouts)
        except _ClosedBeforeResponse as exc:
            if not conn.used:
                raise httpx.ConnectError(
                    f"{key[0]}:{key[1]} closed the connection before answering: {exc}",
                    request=request,
                ) from exc
            # an idle keep-alive connection the server closed as we wrote: once, afresh
            conn = await self._connect(key, timeouts.get("connect"))
            try:
                sent_at, (status, reason, headers) = await self._exchange(conn, payload, timeouts)
            except _ClosedBeforeResponse as exc2:
                raise httpx.ConnectError(
                    f"{key[0]}:{key[1]} closed the connection before answering: {exc2}",
                    request=request,
                ) from exc2
        except asyncio.TimeoutError as exc:
            raise httpx.ReadTimeout("no response within the read timeout", request=request) from exc
        conn.used = True
        stream = _Body(self, key, conn, timeouts.get("read"))
        ext = {"http_version": b"HTTP/1.1", "reason_phrase": reason, SENT_AT: sent_at,
               ARRIVAL: stream.clock}  # fmt: skip
        return httpx.Response(
            status, headers=headers, stream=stream, extensions=ext, request=request
        )

    async def _exchange(
        self, conn: _Conn, payload: bytes, timeouts: dict[str, Any]
    ) -> tuple[float, tuple[int, bytes, list[tuple[bytes, bytes]]]]:
        """Write the request, wait for the response head; (send time, head).

        ``_ClosedBeforeResponse`` when the connection ended before any response byte."""
        if conn.closed:  # closed by the peer before we could write (its EOF came first)
            raise _ClosedBeforeResponse("connection closed before the request was sent")
        loop = asyncio.get_running_loop()
        conn.head = loop.create_future()
        conn.mode = "head"
        conn.got_bytes = False
        sent_at = time.perf_counter()
        assert conn.transport is not None
        conn.transport.write(payload)
        try:
            head = await asyncio.wait_for(conn.head, timeouts.get("read"))
        except httpx.HTTPError as exc:
            conn.close()
            if not conn.got_bytes:
                raise _ClosedBeforeResponse(str(exc)) from exc
            raise
        except asyncio.TimeoutError:
            conn.close()
            raise
        finally:
            conn.head = None
        return sent_at, head

    async def _acquire(self, key: tuple, connect_timeout: float | None) -> _Conn:
        idle = self.idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.closed:
                continue
            if now - conn.idle_since >= KEEPALIVE_EXPIRY_S:
                conn.close()  # the server may be closing it right now: do not race it
                continue
            conn.mode = "idle"
            conn.pieces.clear()
            return conn
        return await self._connect(key, connect_timeout)

    async def _connect(self, key: tuple, connect_timeout: float | None) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(_Conn, key[0], key[1]), connect_timeout
            )
        except asyncio.TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connect to {key[0]}:{key[1]} timed out") from exc
        except OSError as exc:
            raise httpx.ConnectError(f"{exc.strerror or exc} ({key[0]}:{key[1]})") from exc
        return conn

    def _release(self, key: tuple, conn: _Conn) -> None:
        idle = self.idle.setdefault(key, [])
        if conn.reusable() and len(idle) < self.max_keepalive:
            conn.mode = "idle"
            conn.idle_since = time.monotonic()
            idle.append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        for conns in self.idle.values():
            for c in conns:
                c.close()
        self.idle.clear()
        if self.fallback is not None:
            await self.fallback.aclose()
