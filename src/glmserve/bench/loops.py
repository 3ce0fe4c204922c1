"""One event loop's share of a level: ``closed_loop`` keeps its slots busy (closed loop) or
sends each request at its due time (open loop, ``arrival_offsets``), recording every stream.

A level runs one such loop in process, or one per forked client worker (bench.runner)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from glmserve.bench.client import make_client, prepare_request, stream_request
from glmserve.bench.metrics import StreamRecord
from glmserve.bench.workload import Request

PRECONNECT_LEAD_S = 0.05
CONNECT_FAILED = "connect failed"


@dataclass
class LoopSpec:
    base_url: str
    api: str
    requests: list[Request]
    indices: list[int] | None  # request indices this loop sends (None: cycle until deadline)
    slots: int
    stall_timeout: float
    start_at: float
    deadline: float | None
    arrivals: list[float] | None = None  # open loop: due time of request i, s after start_at
    # Trace replay: open the slots' connections before the first due time, so a request's
    # arrival is not a TCP connect (~7 ms on a busy host) later than the trace says.
    preconnect: bool = False


def arrival_offsets(
    count: int, rate: float, burstiness: float, seed: int, exact: bool = True
) -> list[float]:
    """Due times (s from the start) of ``count`` requests offered at ``rate`` req/s.

    Gaps are gamma(shape=burstiness, scale=1/(rate*burstiness)): mean 1/rate, Poisson
    arrivals for burstiness 1, burstier below 1, more regular above; the first request is due
    at once (bench_serving's ``get_request``). ``rate`` inf: everything at once. With
    ``exact`` (the default) the gaps are rescaled so that their mean is exactly ``1/rate``:
    ``count`` requests then span ``(count - 1) / rate`` seconds, so the offered rate is the
    one asked for, not a sample of it (bench_serving offers a sample: +-7% at 200 requests).
    """
    if count <= 0:
        return []
    if math.isinf(rate):
        return [0.0] * count
    rng = random.Random(seed)
    theta = 1.0 / (rate * burstiness)
    gaps = [rng.gammavariate(burstiness, theta) for _ in range(count - 1)]
    if exact and gaps:
        # 200 Poisson gaps miss their mean by ~7% (1/sqrt(n)); scaled to mean exactly 1/rate,
        # (the process conditioned on its count) the offered rate is R, the shape unchanged.
        scale = (len(gaps) / rate) / sum(gaps)
        gaps = [g * scale for g in gaps]
    out, t = [0.0], 0.0
    for g in gaps:
        t += g
        out.append(t)
    return out


async def closed_loop(
    spec: LoopSpec,
    records: list[StreamRecord],
    on_record: Callable[[StreamRecord], None],
    inflight: dict[int, StreamRecord],
    should_stop: Callable[[], bool] = lambda: False,
) -> str | None:
    """Keep ``spec.slots`` streams in flight; returns why it stopped early (or None)."""
    perf = time.perf_counter
    stopped: list[str] = []
    counter = iter(spec.indices) if spec.indices is not None else itertools.count()
    client = make_client(spec.slots, spec.stall_timeout)
    wanted = set(spec.indices) if spec.indices is not None else range(len(spec.requests))
    prepared = {
        i % len(spec.requests): prepare_request(
            client, spec.base_url, spec.requests[i % len(spec.requests)]
        )
        for i in wanted
    }

    if spec.preconnect:
        n = min(spec.slots, len(wanted))
        with contextlib.suppress(httpx.HTTPError):
            await asyncio.gather(*(client.get(spec.base_url + "/health") for _ in range(n)))
        # the schedule starts a moment later: every slot is then waiting on its due time,
        # so the first request is not later than the rest by the slots' own start-up
        spec.start_at = max(spec.start_at, perf() + PRECONNECT_LEAD_S)

    async def slot() -> None:
        while not stopped:
            if should_stop():
                stopped.append("stopped")
                return
            if spec.deadline is not None and perf() >= spec.deadline:
                return
            i = next(counter, None)
            if i is None:
                return
            due = None
            if spec.arrivals is not None:
                due = spec.start_at + spec.arrivals[i]
                if spec.deadline is not None and due >= spec.deadline:
                    return
                if due > perf():
                    await asyncio.sleep(due - perf())
            rec = StreamRecord(dispatch=perf() if due is None else due)
            records.append(rec)
            inflight[id(rec)] = rec
            try:
                k = i % len(spec.requests)
                await stream_request(
                    client,
                    spec.base_url,
                    spec.requests[k],
                    spec.api,
                    rec,
                    prepared[k],
                    spec.stall_timeout,
                )
            except Exception as exc:  # a client bug fails its request, not the level
                rec.error = f"client error: {type(exc).__name__}: {exc}"[:200]
                rec.end = rec.end or perf()
            finally:
                inflight.pop(id(rec), None)
            if rec.prompt_tokens is None:
                rec.prompt_tokens = spec.requests[i % len(spec.requests)].input_len
            on_record(rec)
            if rec.error and rec.error.startswith(CONNECT_FAILED) and not stopped:
                stopped.append(f"server unreachable mid-run ({spec.base_url}): {rec.error}")

    delay = spec.start_at - perf()
    if delay > 0:
        await asyncio.sleep(delay)
    tasks = [asyncio.create_task(slot()) for _ in range(spec.slots)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await client.aclose()
    return stopped[0] if stopped else None
