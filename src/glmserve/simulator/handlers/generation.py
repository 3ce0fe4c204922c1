"""What the native ``/generate`` and the OpenAI endpoints share: a request's body checks, the
group of engine requests one HTTP call waits for, and the sink that collects a request's
tokens for a non-streamed answer.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from glmserve.simulator.engine import Request
from glmserve.simulator.httpserver import Connection, HttpRequest, Response

if TYPE_CHECKING:
    from glmserve.simulator.server import SimServer

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's SamplingParams default


def error(msg: str, status: int = 400) -> Response:
    return Response.json({"error": {"message": msg}}, status)


def not_ready(server: SimServer) -> Response | None:
    """The 503 for a call that comes before the engine exists, else None."""
    if server.engine is None:
        return error("server is not ready", 503)
    return None


def json_object(req: HttpRequest) -> dict[str, Any] | Response:
    """The request body as a JSON object, or the 400 response that says why it is not one."""
    try:
        body = req.json()
    except ValueError:
        return error("invalid JSON body")
    if not isinstance(body, dict):
        return error("request body must be a JSON object")
    return body


class RequestGroup:
    """Completion of the n requests of one HTTP call (batch /generate has several)."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.fut: asyncio.Future = asyncio.get_running_loop().create_future()

    def finish_one(self) -> None:
        self.left -= 1
        if self.left <= 0 and not self.fut.done():
            self.fut.set_result(None)

    def abort_on_close(self, conn: Connection, reqs: list[Request]) -> None:
        """Client went away: drop its requests (as SGLang aborts them) and end the handler."""

        def _closed() -> None:
            for r in reqs:
                if not r.finished:
                    r.abort()
            if not self.fut.done():
                self.fut.set_result(None)

        conn.on_close.append(_closed)


class CollectSink:
    """Keeps a request's tokens for one answer at the end (emission time: when generated)."""

    __slots__ = ("group",)

    def __init__(self, group: RequestGroup) -> None:
        self.group = group

    def flush(self, req: Request, ntokens: int) -> None:
        req.emit_times.extend([req.sent_at] * ntokens)
        if req.finished:
            self.group.finish_one()
