"""glmserve's own endpoints (not SGLang's): ``/sim/config``, the effective cost model, and
``/sim/trace``, the ground truth of every token (see the simulator README)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from glmserve.simulator import costmodel
from glmserve.simulator.httpserver import Connection, HttpRequest, Response

if TYPE_CHECKING:
    from glmserve.simulator.server import SimServer


async def sim_config(server: SimServer, req: HttpRequest, conn: Connection) -> Response:
    o = server.opts
    eng = server.engine
    return Response.json(
        {
            "cost_model": o.model.to_dict(),
            "shape": {
                "attention_backend": o.shape.attention_backend,
                "kv_cache_dtype": o.shape.kv_cache_dtype,
                "cuda_graph": o.shape.cuda_graph,
                "num_continuous_decode_steps": o.shape.num_continuous_decode_steps,
                "mem_fraction_static": o.shape.mem_fraction_static,
                "patches": list(o.shape.patches),
                "cast_mode": costmodel.cast_mode(o.shape),
            },
            "pool_tokens": o.pool_tokens,
            "max_running_requests": o.max_running_requests,
            "time_scale": 1.0 / o.speed,
            "tokens_per_chunk": o.tokens_per_chunk,
            "single_stream_step_s": costmodel.decode_step_s(o.model, o.shape, 1, 1024),
            "single_stream_terms_s": costmodel.step_terms(o.model, o.shape, 1, 1024),
            "gpu_arch": o.gpu_arch,
            "prompt_tokens": server.prompts.describe(),
            "sglang_version": o.sglang_version,
            "status": server.status,
            "engine_dead": bool(eng and eng.dead),
        }
    )


async def sim_trace(server: SimServer, req: HttpRequest, conn: Connection) -> Response:
    assert server.engine is not None
    since = int(req.query.get("since_step", "0") or 0)
    doc = server.engine.trace_dict(req.query.get("rid"), since)
    if req.query.get("requests") == "0":  # steps only: cheap to poll during a long run
        doc["requests"] = {}
    return Response.json(doc)


ROUTES = {
    "/sim/trace": (("GET",), sim_trace),
    "/sim/config": (("GET",), sim_config),
}
