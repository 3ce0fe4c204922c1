"""``/health`` and ``/health_generate`` as sglang 0.5.9 answers them.

503 while the server is Starting. With ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`` (default
on) ``/health`` really runs a 1-token request and polls once a second (scaled by
``--sim-speed``) for scheduler output, answering 503 after ``SGLANG_HEALTH_CHECK_TIMEOUT``
(20 s) without any, e.g. after a worker died.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from glmserve.simulator.engine import Request
from glmserve.simulator.httpserver import Connection, HttpRequest, Response

if TYPE_CHECKING:
    from glmserve.simulator.server import SimServer


async def health(server: SimServer, req: HttpRequest, conn: Connection) -> Response:
    if server.status == "Starting":
        return Response(503)
    if req.path == "/health" and not server.health_generation:
        return Response(200)
    assert server.engine is not None
    tic = time.time()
    rid = f"HEALTH_CHECK_{tic}"
    hreq = Request(rid, 1, 1, None)
    if not server.engine.dead:
        server.engine.quiet_rids.add(rid)
        server.engine.submit(hreq, traced=False)
    deadline = tic + server.scaled(server.health_timeout)
    while time.time() < deadline:
        await asyncio.sleep(server.scaled(1.0))
        if server.last_output > tic and not server.engine.dead:
            server.engine.quiet_rids.discard(rid)
            server.status = "Up"
            return Response(200)
    hreq.abort()
    server.log.line(
        "Health check failed. Server couldn't get a response from detokenizer for last "
        f"{int(server.health_timeout)} seconds. tic start time: "
        f"{time.strftime('%H:%M:%S', time.localtime(tic))}. last_heartbeat time: "
        f"{time.strftime('%H:%M:%S', time.localtime(server.last_output or tic))}"
    )
    server.status = "UnHealthy"
    return Response(503)


ROUTES = {
    "/health": (("GET",), health),
    "/health_generate": (("GET",), health),
}
