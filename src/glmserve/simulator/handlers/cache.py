"""``/flush_cache``: refused (400) while any request runs or waits, as in sglang 0.5.9
(``entrypoints/http_server.py`` line 710: GET or POST); otherwise empties the prefix cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

from glmserve.simulator.httpserver import Connection, HttpRequest, Response

if TYPE_CHECKING:
    from glmserve.simulator.server import SimServer


async def flush_cache(server: SimServer, req: HttpRequest, conn: Connection) -> Response:
    eng = server.engine
    ok = eng is not None and not eng.running and not eng.waiting
    if ok:
        eng.flush_cache()  # type: ignore[union-attr]
        server.log.line("Cache flushed successfully!", 0)
    return Response.text(
        "Cache flushed.\nPlease check backend logs for more details. (When there are running "
        "or waiting requests, the operation will not be performed.)\n",
        200 if ok else 400,
    )


ROUTES = {"/flush_cache": (("GET", "POST"), flush_cache)}
