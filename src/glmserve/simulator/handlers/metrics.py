"""``/metrics`` (with ``--enable-metrics``, else 404): Prometheus text with SGLang 0.5.9's
metric names and labels.

Scheduler gauges carry ``model_name, engine_type, tp_rank, pp_rank, moe_ep_rank`` labels and
tokenizer-manager counters/histograms carry ``model_name`` (``srt/metrics/collector.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from glmserve.simulator.httpserver import Connection, HttpRequest, Response

if TYPE_CHECKING:
    from glmserve.simulator.engine import Engine
    from glmserve.simulator.options import SimOptions
    from glmserve.simulator.server import SimServer

# Histogram bucket bounds, one decade a line.
TTFT_BUCKETS = [
    0.1, 0.25, 0.5, 0.75,
    1.0, 2.0, 4.0, 6.0, 8.0,
    10.0, 20.0, 40.0, 60.0, 80.0,
    120.0, 160.0,
]  # fmt: skip
ITL_BUCKETS = [
    0.002, 0.004, 0.006, 0.008,
    0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08,
    0.1, 0.2, 0.4, 0.6, 0.8,
    1.0, 2.0, 4.0, 6.0, 8.0,
]  # fmt: skip
# sglang:queue_time_seconds (0.5.9 collector.py:530), a scheduler histogram
QUEUE_BUCKETS = [
    0.0, 0.1, 0.2, 0.5,
    1, 2, 3, 4, 5,
    10, 15, 20, 30, 40, 50, 60, 70, 80, 90,
    100, 200, 300, 400, 500, 600, 700, 800, 900,
    1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
]  # fmt: skip
E2E_BUCKETS = [
    0.1, 0.2, 0.4, 0.6, 0.8,
    1.0, 2.0, 4.0, 6.0, 8.0,
    10.0, 20.0, 40.0, 60.0, 80.0,
    100.0, 200.0, 400.0, 800.0,
]  # fmt: skip


def _hist(
    name: str, help_: str, labels: str, values: list[float], buckets: list[float]
) -> list[str]:
    out = [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
    for b in buckets:
        n = sum(1 for v in values if v <= b)
        out.append(f'{name}_bucket{{{labels},le="{b}"}} {float(n)}')
    out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(len(values))}')
    out.append(f"{name}_count{{{labels}}} {float(len(values))}")
    out.append(f"{name}_sum{{{labels}}} {float(sum(values))}")
    return out


def render_metrics(engine: Engine, opts: SimOptions) -> str:
    model = opts.served_model_name
    sched = f'engine_type="unified",model_name="{model}",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    tok = f'model_name="{model}"'
    g = engine.gauges()  # the same reading the ground truth logs (engine.note_gauges)
    used = g["num_used_tokens"]
    pool = engine.pool_tokens or 1
    gauges = [
        ("sglang:num_running_reqs", "The number of running requests.", g["num_running_reqs"]),
        ("sglang:num_used_tokens", "The number of used tokens.", used),
        ("sglang:token_usage", "The token usage.", used / pool),
        ("sglang:gen_throughput", "The generation throughput (token/s).", g["gen_throughput"]),
        (
            "sglang:num_queue_reqs",
            "The number of requests in the waiting queue.",
            g["num_queue_reqs"],
        ),
        ("sglang:cache_hit_rate", "The prefix cache hit rate.", g["cache_hit_rate"]),
        (
            "sglang:max_total_num_tokens",
            "Maximum total number of tokens in the KV cache pool.",
            engine.pool_tokens,
        ),
        (
            "sglang:is_cuda_graph",
            "Whether the batch is using CUDA graph.",
            1.0 if opts.shape.cuda_graph else 0.0,
        ),
    ]
    lines: list[str] = []
    for name, help_, v in gauges:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name}{{{sched}}} {float(v)}"]
    c = engine.counters
    counters = [
        (
            "sglang:prompt_tokens_total",
            "Number of prefill tokens processed.",
            c["prompt_tokens_total"],
        ),
        (
            "sglang:generation_tokens_total",
            "Number of generation tokens processed.",
            c["generation_tokens_total"],
        ),
        ("sglang:num_requests_total", "Number of requests processed.", c["num_requests_total"]),
        (
            "sglang:num_aborted_requests_total",
            "Number of requests aborted.",
            c["num_aborted_requests_total"],
        ),
        # the radix cache's ground truth: every prompt token served from it (simulator/radix.py)
        ("sglang:cached_tokens_total", "Number of cached prompt tokens.", engine.cache.hit_tokens),
    ]
    for name, help_, v in counters:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} counter", f"{name}{{{tok}}} {float(v)}"]
    lat = engine.latencies
    lines += _hist(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        tok,
        lat["ttft"],
        TTFT_BUCKETS,
    )
    lines += _hist(
        "sglang:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        tok,
        lat["itl"],
        ITL_BUCKETS,
    )
    lines += _hist(
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        tok,
        lat["e2e"],
        E2E_BUCKETS,
    )
    lines += _hist(
        "sglang:queue_time_seconds",
        "Histogram of queueing time in seconds.",
        sched,
        lat.get("queue", []),
        [float(b) for b in QUEUE_BUCKETS],
    )
    return "\n".join(lines) + "\n"


async def metrics(server: SimServer, req: HttpRequest, conn: Connection) -> Response:
    if not server.opts.server.enable_metrics:
        return Response.json({"detail": "Not Found"}, 404)
    assert server.engine is not None
    body = render_metrics(server.engine, server.opts)
    return Response(200, body.encode(), "text/plain; version=0.0.4; charset=utf-8")


ROUTES = {"/metrics": (("GET",), metrics)}
