"""Idle keep-alive (issue 10 #7): SGLang's uvicorn closes a connection idle for 5 s
(``timeout_keep_alive=5`` in 0.5.9 ``srt/entrypoints/http_server.py``); the simulator does the
same, and the bench transport's pooled connections survive it."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest

from glmserve.bench import fasthttp as bench_transport
from glmserve.bench.client import make_client

KEEP_ALIVE_S = 5.0  # SGLang 0.5.9 http_server.py: uvicorn.run(..., timeout_keep_alive=5)

GENERATE = {"input_ids": [11, 12, 13], "sampling_params": {"max_new_tokens": 4}, "stream": True}


def _request(sock: socket.socket) -> bytes:
    sock.sendall(b"GET /model_info HTTP/1.1\r\nhost: x\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n")
                      if ln.lower().startswith(b"content-length")))  # fmt: skip
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_simulator_closes_a_connection_idle_for_five_seconds(simulator):
    port = int(simulator.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=KEEP_ALIVE_S + 10) as sock:
        assert _request(sock).startswith(b"HTTP/1.1 200")
        time.sleep(KEEP_ALIVE_S / 2)
        assert _request(sock).startswith(b"HTTP/1.1 200")  # a request in time re-arms it
        t0 = time.monotonic()
        assert sock.recv(1) == b""  # then the server closes it (EOF), as uvicorn does
        idle = time.monotonic() - t0
    assert KEEP_ALIVE_S - 0.5 <= idle <= KEEP_ALIVE_S + 5


@pytest.mark.parametrize("expiry", ["default", "never"])
def test_bench_transport_survives_the_server_closing_an_idle_pooled_connection(
    simulator, monkeypatch, expiry
):
    """The close lands while the client's event loop is busy (here: blocked), so the pooled
    connection still looks open when the next request is written to it. ``default``: it is
    not reused (idle past KEEPALIVE_EXPIRY_S); ``never``: it is, the server's close crosses
    the request, and the request is retried once on a fresh connection."""
    if expiry == "never":
        monkeypatch.setattr(bench_transport, "KEEPALIVE_EXPIRY_S", 3600.0, raising=False)

    async def main() -> list[int]:
        client = make_client(1, stall_timeout=30)
        statuses = []
        try:
            for i in range(2):
                if i:
                    time.sleep(KEEP_ALIVE_S + 1.0)  # block the loop: the FIN is not read yet
                async with client.stream("POST", simulator.url + "/generate", json=GENERATE) as r:
                    body = b"".join([c async for c in r.aiter_raw()])
                    assert b"data: [DONE]" in body
                    statuses.append(r.status_code)
        finally:
            await client.aclose()
        return statuses

    assert asyncio.run(main()) == [200, 200]


def test_fresh_connection_closed_before_any_response_is_a_connect_failure():
    """What an ssh -L forward does once nothing listens on the far side: accept, then close.
    That is a server gone (connect failed), not a stream cut short."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]

        async def main() -> None:
            loop = asyncio.get_running_loop()

            def accept_and_close() -> None:
                conn, _ = srv.accept()
                conn.close()

            fut = loop.run_in_executor(None, accept_and_close)
            client = make_client(1, stall_timeout=10)
            try:
                with pytest.raises(httpx.ConnectError, match="closed the connection"):
                    await client.post(f"http://127.0.0.1:{port}/generate", content=b"{}")
            finally:
                await client.aclose()
                await fut

        asyncio.run(main())
