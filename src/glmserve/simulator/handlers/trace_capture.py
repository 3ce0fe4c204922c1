"""``/start_profile`` and ``/stop_profile``: SGLang's torch-profiler endpoints.

A capture records the steps the engine runs between start and stop (or ``num_steps`` of them)
and writes them as torch-profiler traces (``torch_trace``), logging on every TP rank as each
scheduler does. ``server.profile`` holds the capture in progress.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from glmserve.simulator import torch_trace
from glmserve.simulator.httpserver import Connection, HttpRequest, Response

if TYPE_CHECKING:
    from glmserve.simulator.server import SimServer


async def start_profile(server: SimServer, req: HttpRequest, conn: Connection) -> Response:
    try:
        body = req.json() or {}
    except ValueError:
        body = {}
    if server.profile is not None:
        return Response.text("Profiling is already in progress. Call /stop_profile first.\n", 400)
    out_dir = body.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
    pid = str(time.time())
    if body.get("profile_prefix"):
        pid = f"{body['profile_prefix']}-{pid}"
    num = body.get("num_steps")
    assert server.engine is not None
    server.profile = {
        "id": pid,
        "dir": out_dir,
        "num_steps": int(num) if num else None,
        "left": int(num) if num else 0,
        "activities": body.get("activities") or ["CPU", "GPU"],
        "first_step": server.engine.step_count + 1,
    }
    for r in range(server.tp):
        server.log.line(
            f"Profiling starts. Traces will be saved to: {out_dir} (with profile id: {pid})", r
        )
    return Response.text("Start profiling.\n")


async def stop_profile(server: SimServer, req: HttpRequest, conn: Connection) -> Response:
    if server.profile is None:
        return Response.text("Profiling is not in progress. Call /start_profile first.\n", 400)
    finish(server)
    return Response.text("Stop profiling. This will take some time.\n")


def count_step(server: SimServer) -> None:
    """One engine step ran: a capture of ``num_steps`` ends when they have all run."""
    if server.profile is not None and server.profile.get("num_steps"):
        server.profile["left"] -= 1
        if server.profile["left"] <= 0:
            finish(server)


def finish(server: SimServer) -> None:
    """End the capture in progress: write its traces, then log where they are."""
    prof, server.profile = server.profile, None
    if prof is None or server.engine is None:
        return
    steps = [s for s in server.engine.steps if s[0] >= prof["first_step"]]
    if prof["num_steps"]:
        steps = steps[: prof["num_steps"]]
    torch_trace.write_traces(
        prof["dir"],
        prof["id"],
        server.tp,
        server.opts.model,
        server.opts.shape,
        steps,
        prof["activities"],
    )
    for r in range(server.tp):
        server.log.line(f"Profiling done. Traces are saved to: {prof['dir']}", r)


ROUTES = {
    "/start_profile": (("GET", "POST"), start_profile),
    "/stop_profile": (("GET", "POST"), stop_profile),
}
