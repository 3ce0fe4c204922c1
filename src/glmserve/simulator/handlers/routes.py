"""Every path the simulator serves, and the dispatch SGLang's FastAPI app would do.

Each handler module declares the paths it serves (``ROUTES``: path -> (methods, handler));
this one merges them. An unknown path answers 404 and a known path with another method 405,
in FastAPI's ``{"detail": ...}`` shape; HEAD is served wherever GET is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from glmserve.simulator.handlers import (
    cache,
    health,
    info,
    metrics,
    native,
    openai,
    sim,
    trace_capture,
)
from glmserve.simulator.httpserver import Connection, HttpRequest, Response

if TYPE_CHECKING:
    from glmserve.simulator.server import SimServer

Handler = Callable[["SimServer", HttpRequest, Connection], Awaitable["Response | None"]]

ROUTES: dict[str, tuple[tuple[str, ...], Handler]] = {
    **health.ROUTES,
    **info.ROUTES,
    **native.ROUTES,
    **openai.ROUTES,
    **trace_capture.ROUTES,
    **cache.ROUTES,
    **metrics.ROUTES,
    **sim.ROUTES,
}


async def dispatch(server: SimServer, req: HttpRequest, conn: Connection) -> Response | None:
    route = ROUTES.get(req.path)
    if route is None:
        return Response.json({"detail": "Not Found"}, 404)
    methods, handler = route
    if req.method not in methods and not (req.method == "HEAD" and "GET" in methods):
        return Response.json({"detail": "Method Not Allowed"}, 405)
    return await handler(server, req, conn)
