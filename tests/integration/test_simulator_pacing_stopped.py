"""A simulator process stopped for a while mid-stream is late afterwards, never faster.

The process is stopped (SIGSTOP, then SIGCONT 30 ms later) right after the stream's first
chunk arrived, as the kernel deschedules it on a loaded box. Before the fix the engine then
ran the steps it had missed back to back (it caught up whenever it was less than 50 ms late):
tokens 6 us apart on a 4.8 ms step. The check is the server's own ground truth
(``/sim/trace``) against its cost model, so it holds whatever the timing of the stop.
"""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
from tests.fixtures.pacing import pacing_violations

SIM = ["--tp-size", "8", "--attention-backend", "trtllm_mla", "--sim-gpu-arch", "sm100",
       "--sim-speed", "4", "--disable-cuda-graph", "--sim-load-seconds", "0",
       "--sim-kv-seconds", "0", "--sim-warmup-seconds", "0"]  # fmt: skip
BODY = {"input_ids": list(range(1, 129)), "stream": True,
        "sampling_params": {"max_new_tokens": 48, "ignore_eos": True}}  # fmt: skip


def test_stopped_process_is_late_not_faster(start_simulator):
    sim = start_simulator(*SIM)
    chunks = 0
    with httpx.stream("POST", sim.url + "/generate", json=BODY, timeout=30) as resp:
        for line in resp.iter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            chunks += 1
            if chunks == 1:  # ~230 ms of stream left
                os.kill(sim.proc.pid, signal.SIGSTOP)
                try:
                    time.sleep(0.03)
                finally:
                    os.kill(sim.proc.pid, signal.SIGCONT)
            last = json.loads(line[5:])
    assert last["meta_info"]["completion_tokens"] == 48
    trace = httpx.get(sim.url + "/sim/trace", timeout=30).json()
    stream = [r for r in trace["requests"].values() if r["max_new_tokens"] == 48]
    assert len(stream) == 1 and len(stream[0]["emit_times"]) == 48
    bad = pacing_violations(trace)
    assert not bad, "\n".join(bad[:10])
