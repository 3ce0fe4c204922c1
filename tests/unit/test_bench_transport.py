"""FastTransport's HTTP/1.1 response parser, fed byte by byte and in odd splits."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from glmserve.bench.fasthttp import FastTransport, _Conn


class _FakeTransport:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _chunked(*parts: bytes, trailers: bytes = b"") -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)
    return body + b"0\r\n" + trailers + b"\r\n"


HEAD_CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


async def _feed(conn: _Conn, wire: bytes, split: int) -> tuple[int, list[tuple], bytes]:
    loop = asyncio.get_running_loop()
    conn.connection_made(_FakeTransport())  # type: ignore[arg-type]
    conn.head = loop.create_future()
    conn.mode = "head"
    for i in range(0, len(wire), split):
        conn.data_received(wire[i : i + split])
    status, _, headers = await conn.head
    body = b""
    while (piece := await conn.wait_piece(1.0)) is not None:
        body += piece[1]
    return status, headers, body


@pytest.mark.parametrize("split", [1, 2, 3, 7, 64, 10_000])
def test_chunked_body_survives_any_split(split):
    parts = [b'data: {"a": 1}\n\n', b"x" * 300, b"data: [DONE]\n\n"]
    wire = HEAD_CHUNKED + _chunked(*parts)
    conn = _Conn()
    status, headers, body = asyncio.run(_feed(conn, wire, split))
    assert status == 200
    assert (b"content-type", b"text/event-stream") in headers
    assert body == b"".join(parts)
    assert conn.reusable()  # keep-alive, nothing left over


def test_chunked_with_trailers_and_extensions():
    wire = HEAD_CHUNKED + b"5;ext=1\r\nhello\r\n" + b"0\r\nx-trailer: 1\r\n\r\n"
    conn = _Conn()
    _, _, body = asyncio.run(_feed(conn, wire, 4))
    assert body == b"hello"
    assert conn.mode == "done"


@pytest.mark.parametrize("split", [1, 5, 1000])
def test_content_length_body(split):
    wire = b'HTTP/1.1 500 Internal Server Error\r\ncontent-length: 11\r\n\r\n{"error":1}'
    status, _, body = asyncio.run(_feed(_Conn(), wire, split))
    assert status == 500 and body == b'{"error":1}'


def test_close_delimited_body_ends_at_eof():
    async def go() -> bytes:
        conn = _Conn()
        loop = asyncio.get_running_loop()
        conn.connection_made(_FakeTransport())  # type: ignore[arg-type]
        conn.head = loop.create_future()
        conn.mode = "head"
        conn.data_received(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nabc")
        await conn.head
        first = await conn.wait_piece(1.0)
        conn.connection_lost(None)
        assert await conn.wait_piece(1.0) is None
        assert not conn.reusable()
        return first[1] if first else b""

    assert asyncio.run(go()) == b"abc"


def test_connection_lost_mid_chunked_body_is_a_protocol_error():
    async def go() -> None:
        conn = _Conn()
        loop = asyncio.get_running_loop()
        conn.connection_made(_FakeTransport())  # type: ignore[arg-type]
        conn.head = loop.create_future()
        conn.mode = "head"
        conn.data_received(HEAD_CHUNKED + b"5\r\nhel")
        await conn.head
        assert (await conn.wait_piece(1.0))[1] == b"hel"
        conn.connection_lost(ConnectionResetError("reset"))
        with pytest.raises(httpx.RemoteProtocolError):
            await conn.wait_piece(1.0)

    asyncio.run(go())


def test_read_timeout_when_nothing_arrives():
    async def go() -> None:
        conn = _Conn()
        conn.connection_made(_FakeTransport())  # type: ignore[arg-type]
        conn.mode = "chunked"
        with pytest.raises(httpx.ReadTimeout):
            await conn.wait_piece(0.05)

    asyncio.run(go())


def test_arrival_time_is_taken_when_bytes_arrive():
    async def go() -> tuple[float, float]:
        conn = _Conn()
        loop = asyncio.get_running_loop()
        conn.connection_made(_FakeTransport())  # type: ignore[arg-type]
        conn.head = loop.create_future()
        conn.mode = "head"
        conn.data_received(HEAD_CHUNKED + b"3\r\nabc\r\n")
        t_first = conn.t_recv
        await asyncio.sleep(0.05)  # the consumer is late; the recorded time must not move
        conn.data_received(b"3\r\ndef\r\n")
        await conn.head
        a = await conn.wait_piece(1.0)
        b = await conn.wait_piece(1.0)
        assert a is not None and b is not None
        assert a[0] == t_first
        return a[0], b[0]

    t1, t2 = asyncio.run(go())
    assert t2 - t1 >= 0.04


def test_connect_refused_is_httpx_connect_error():
    async def go() -> None:
        async with httpx.AsyncClient(transport=FastTransport(), timeout=2.0) as c:
            await c.get("http://127.0.0.1:9/health")

    with pytest.raises(httpx.ConnectError):
        asyncio.run(go())
