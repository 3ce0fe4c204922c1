"""What the server says about itself: ``/model_info``, ``/server_info`` (and their deprecated
``/get_*`` names, which log a warning first) and ``/v1/models``, in sglang 0.5.9's shapes."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from glmserve.simulator import costmodel
from glmserve.simulator.boot import ARCHITECTURE, MODEL_TYPE
from glmserve.simulator.httpserver import Connection, HttpRequest, Response

if TYPE_CHECKING:
    from glmserve.simulator.server import SimServer


def model_info_body(server: SimServer) -> dict[str, Any]:
    s = server.opts.server
    return {
        "model_path": s.model_path,
        "tokenizer_path": s.tokenizer_path or s.model_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": MODEL_TYPE,
        "architectures": [ARCHITECTURE],
    }


async def model_info(server: SimServer, req: HttpRequest, conn: Connection) -> Response:
    if req.path == "/get_model_info":
        server.log.line(
            "Endpoint '/get_model_info' is deprecated and will be removed in a future "
            "version. Please use '/model_info' instead."
        )
    return Response.json(model_info_body(server))


async def server_info(server: SimServer, req: HttpRequest, conn: Connection) -> Response | None:
    if req.path == "/get_server_info":
        server.log.line(
            "Endpoint '/get_server_info' is deprecated and will be removed in a future "
            "version. Please use '/server_info' instead."
        )
    if server.engine is not None and server.engine.dead:
        # 0.5.9 asks the schedulers (tokenizer_manager.get_internal_state through a
        # _Communicator, tokenizer_communicator_mixin.py) and waits with no timeout: a
        # dead scheduler never answers, so neither does the request.
        gone = asyncio.get_running_loop().create_future()
        conn.on_close.append(lambda: gone.done() or gone.set_result(None))
        await gone
        return None
    o = server.opts
    args = o.server_args()
    eng = server.engine
    internal = {
        **args,
        "last_gen_throughput": eng.last_gen_throughput if eng else 0.0,
        "memory_usage": {
            "weight": round(o.model.weight_mem_gib, 2),
            "kvcache": round(costmodel.kv_pool_gib(o.model, o.shape), 2),
            "token_capacity": int(o.pool_tokens),
            "graph": 0.61 if o.shape.cuda_graph else 0.0,
        },
        "effective_max_running_requests_per_dp": o.max_running_requests,
    }
    return Response.json(
        {
            **args,
            "status": "ready",
            "max_total_num_tokens": o.pool_tokens,
            "max_req_input_len": o.pool_tokens - 1,
            "internal_states": [internal],
            "version": o.sglang_version,
        }
    )


async def models(server: SimServer, req: HttpRequest, conn: Connection) -> Response:
    name = server.opts.served_model_name
    return Response.json(
        {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": int(server.started),
                    "owned_by": "sglang",
                    "root": name,
                    "parent": None,
                    "max_model_len": server.opts.server.context_length
                    or server.opts.model.context_len,
                }
            ],
        }
    )


ROUTES = {
    "/model_info": (("GET",), model_info),
    "/get_model_info": (("GET",), model_info),
    "/server_info": (("GET",), server_info),
    "/get_server_info": (("GET",), server_info),
    "/v1/models": (("GET",), models),
}
