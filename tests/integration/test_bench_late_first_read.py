"""A client whose event loop is busy when a stream's first chunks arrive must not report a decode
rate above the server's (a simulated sweep once showed 68.7 tok/s for a 51.9 tok/s config).

The loop is blocked for 0.3 s right after the send: the first token and ~15 decode tokens sit
in the socket and come out of one read. Checked against the simulator's ground truth
(``/sim/trace``: when each token's chunk was written, on the client's perf_counter clock).
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from glmserve.bench import groundtruth as gt
from glmserve.bench.client import make_client, stream_request
from glmserve.bench.metrics import StreamRecord, stream_metrics
from glmserve.bench.workload import Request

SIM = ["--tp-size", "2", "--disable-cuda-graph", "--sim-speed", "5"]  # ~20 ms per token


async def one_stream_with_busy_loop(url: str, block_s: float) -> StreamRecord:
    req = Request(
        path="/generate",
        body={"input_ids": list(range(1, 33)), "stream": True,
              "sampling_params": {"max_new_tokens": 64, "ignore_eos": True, "temperature": 0}},
    )  # fmt: skip
    async with make_client(1, stall_timeout=30.0) as client:
        rec = StreamRecord(dispatch=time.perf_counter())
        task = asyncio.ensure_future(stream_request(client, url, req, "native", rec))
        while rec.send is None:  # until the request is on the wire (the first token is ~5 ms
            await asyncio.sleep(0)  # away: the block must start before it arrives)
        time.sleep(block_s)  # the loop is busy (CPU contention, a GC pause, other streams)
        return await task


def test_late_first_read_gives_the_server_decode_rate(start_simulator):
    sim = start_simulator(*SIM)
    rec = asyncio.run(one_stream_with_busy_loop(sim.url, 0.3))
    assert rec.ok and rec.n_tokens == 64
    assert rec.chunk_times.count(rec.chunk_times[0]) > 3  # the first chunks came in one read
    truth = gt.truth_decode_tok_s(httpx.get(sim.url + "/sim/trace", timeout=30).json())
    assert truth and truth > 20
    measured = stream_metrics(rec).decode_tok_s
    assert measured is not None
    assert measured <= truth * 1.03  # never above what the server produced
    assert measured == pytest.approx(truth, rel=0.05)
