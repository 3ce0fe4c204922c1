"""The simulator with its log on a full disk (issue 20, item 15).

SGLang's log lines go through Python's ``logging``, whose ``StreamHandler.emit`` hands a failed
write to ``Handler.handleError``, which swallows it: the server keeps serving with the disk
full. uvicorn writes one status line per response and, when the app fails after it, closes the
connection rather than write a second one. The simulator raised on the failed write instead,
and its error path wrote ``HTTP/1.1 500`` into the 200 stream already open.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.fixtures.simulator import FAST, free_port, http_status, launch_simulator

REQUESTS = 40


def _stream(port: int, path: str = "/generate", body: dict | None = None) -> bytes:
    """One streaming request on its own connection, the raw bytes until the server closes."""
    sampling = {"max_new_tokens": 8, "ignore_eos": True}
    payload = json.dumps(body or {"text": "hi", "sampling_params": sampling, "stream": True})
    payload = payload.encode()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(
            b"POST %b HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (path.encode(), len(payload))
            + payload
        )
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def _assert_one_complete_stream(data: bytes) -> None:
    assert data.count(b"HTTP/1.1 ") == 1, data[-800:]
    assert data.startswith(b"HTTP/1.1 200 "), data[:200]
    assert b"data: [DONE]" in data and data.endswith(b"0\r\n\r\n"), data[-400:]
    assert b'"finish_reason":{"type":"length","length":8}' in data


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):
    """A 256 KiB tmpfs (root only; skipped where mounting is not allowed)."""
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    mnt = tmp_path / "full"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def test_a_log_disk_filling_up_after_ready_drops_lines_not_streams(tiny_tmpfs: Path):
    log = tiny_tmpfs / "server.log"
    sim = launch_simulator("--tp-size", "1", "--disable-cuda-graph", *FAST, log_path=log)
    try:
        # fill what is left of the filesystem
        with pytest.raises(OSError) as full, open(tiny_tmpfs / "filler", "wb") as fh:
            while True:
                fh.write(b"x" * 4096)
                fh.flush()
        assert full.value.errno == 28  # ENOSPC
        for _ in range(REQUESTS):
            _assert_one_complete_stream(_stream(sim.port))
        assert sim.proc.poll() is None and http_status(sim.url + "/health") == 200
        logged = log.read_text(errors="replace").count('"POST /generate HTTP/1.1" 200')
        assert logged < REQUESTS  # the disk did refuse log lines: the case was exercised
    finally:
        sim.stop()


def test_a_log_on_dev_full_from_the_start_still_serves(tmp_path: Path):
    """Without root: every log write fails with ENOSPC (``/dev/full``) from the first line."""
    port = free_port()
    with open("/dev/full", "wb") as full:
        proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "glmserve.simulator", "--model-path", "m",
             "--tp-size", "1", "--disable-cuda-graph", *FAST, "--port", str(port)],
            stdout=full, stderr=full, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while http_status(f"http://127.0.0.1:{port}/health") != 200:
            assert proc.poll() is None, f"the simulator died on its log: exit {proc.returncode}"
            assert time.monotonic() < deadline, "not ready in 60 s"
            time.sleep(0.05)
        for _ in range(3):
            _assert_one_complete_stream(_stream(port))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)  # the group this test started (its own session)
        proc.wait(timeout=10)


def test_a_handler_failing_after_the_status_line_closes_without_a_second_one():
    """uvicorn's run_asgi: a 500 only before the response started, else close."""
    from glmserve.simulator.httpserver import serve

    async def handler(req, conn):
        if req.path == "/boom-early":
            raise RuntimeError("before any byte")
        conn.start_stream(req)
        conn.write_chunk(b"data: 1\n\n")
        raise RuntimeError("after the head")

    async def main() -> tuple[bytes, bytes]:
        server = await serve("127.0.0.1", 0, handler)
        port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        try:
            late = await loop.run_in_executor(None, _stream, port, "/boom", {})
            early = await loop.run_in_executor(None, _stream, port, "/boom-early", {})
        finally:
            server.close()
        return late, early

    late, early = asyncio.run(main())
    assert late.count(b"HTTP/1.1 ") == 1 and late.startswith(b"HTTP/1.1 200 "), late
    assert b"500" not in late.split(b"\r\n\r\n", 1)[1]
    assert early.startswith(b"HTTP/1.1 500 ") and early.count(b"HTTP/1.1 ") == 1
