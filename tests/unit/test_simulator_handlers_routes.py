"""The simulator's routing, in process: handlers answer without a socket or a running engine."""

from __future__ import annotations

import asyncio
import json

import pytest

from glmserve.simulator.handlers import routes
from glmserve.simulator.httpserver import HttpRequest
from glmserve.simulator.options import parse
from glmserve.simulator.server import SimServer


def _call(server: SimServer, method: str, path: str):
    req = HttpRequest(method, path, {}, {}, b"", "127.0.0.1:5555")
    return asyncio.run(routes.dispatch(server, req, None))  # type: ignore[arg-type]


@pytest.fixture
def server() -> SimServer:
    return SimServer(parse(["--model-path", "glm-5-sim", "--tp", "2"]))


def test_unknown_path_404_and_wrong_method_405_in_fastapi_shape(server):
    resp = _call(server, "GET", "/nope")
    assert (resp.status, resp.body) == (404, b'{"detail":"Not Found"}')
    resp = _call(server, "POST", "/model_info")
    assert (resp.status, json.loads(resp.body)) == (405, {"detail": "Method Not Allowed"})


def test_head_is_served_wherever_get_is(server):
    assert _call(server, "HEAD", "/model_info").status == 200
    assert _call(server, "HEAD", "/generate").status == 405


def test_starting_server_answers_health_503_and_model_info(server):
    assert _call(server, "GET", "/health").status == 503
    info = json.loads(_call(server, "GET", "/model_info").body)
    assert info["model_path"] == "glm-5-sim"
    assert info["architectures"] == ["GlmMoeDsaForCausalLM"]


def test_metrics_404_without_enable_metrics(server):
    assert _call(server, "GET", "/metrics").status == 404


def test_generation_before_the_engine_exists_is_503(server):
    assert _call(server, "POST", "/generate").status == 503
