"""capture: the --load option and the load kept on the server while SGLang records."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from glmserve.errors import ConfigError
from glmserve.profiling.capture import PROMPT_TOKENS, _start_load, parse_load


@pytest.mark.parametrize(
    "load, parsed", [("decode", ("decode", 1)), ("concurrency:4", ("concurrency", 4))]
)
def test_load_option_is_decode_or_a_concurrency(load, parsed):
    assert parse_load(load) == parsed


@pytest.mark.parametrize("load", ["burst", "concurrency:0", "concurrency:x", "concurrency"])
def test_other_loads_are_a_config_error(load):
    with pytest.raises(ConfigError, match="--load: expected decode or concurrency:C"):
        parse_load(load)


class _Generate(BaseHTTPRequestHandler):
    """A native /generate that streams one chunk after a short think, counting concurrency."""

    protocol_version = "HTTP/1.1"
    lock = threading.Lock()
    bodies: ClassVar[list[dict]] = []
    live = 0
    peak = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        with cls.lock:
            cls.bodies.append(body)
            cls.live += 1
            cls.peak = max(cls.peak, cls.live)
        time.sleep(0.05)
        n = body["sampling_params"]["max_new_tokens"]
        chunk = {"meta_info": {"completion_tokens": n, "prompt_tokens": len(body["input_ids"]),
                               "finish_reason": {"type": "length"}}}  # fmt: skip
        out = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
        with cls.lock:
            cls.live -= 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def generate_server() -> Iterator[str]:
    _Generate.bodies, _Generate.live, _Generate.peak = [], 0, 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Generate)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_load_keeps_concurrency_requests_of_fixed_lengths_in_flight_until_stopped(
    generate_server,
):
    stop = threading.Event()
    records = _start_load(generate_server, 4, steps=5, output_len=16, stop=stop)
    deadline = time.monotonic() + 10
    while len(_Generate.bodies) < 12 and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    time.sleep(0.3)
    sent = len(_Generate.bodies)
    time.sleep(0.3)
    assert len(_Generate.bodies) == sent  # nothing new once stopped
    assert sent >= 12 and _Generate.peak == 4
    for body in _Generate.bodies:
        assert len(body["input_ids"]) == PROMPT_TOKENS
        assert body["sampling_params"] == {
            "max_new_tokens": 16,
            "temperature": 0.0,
            "ignore_eos": True,
        }
    first = [tuple(b["input_ids"]) for b in _Generate.bodies[:8]]
    assert len(set(first)) == 8  # each request SGLang may record has its own prompt
    assert records and not [r.error for r in records if r.error]
