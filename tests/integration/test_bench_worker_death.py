"""A client worker that dies (``kill -9``, the OOM killer, an exception) must not make its
requests vanish: every request asked is accounted for, the level says "N of M requests not
run: client worker died (...)", the result is stored incomplete and the bench exits 7.

Before (issue 20): with --workers 2 a killed worker's requests were simply missing, the level
stored complete, exit 0 (26 of 40 recorded; or 0)."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import time

import httpx
import pytest
from tests.fixtures.cli import GLMSERVE
from tests.fixtures.hostile_server import HostileServer

from glmserve.bench import runner
from glmserve.bench.progress import Progress
from glmserve.bench.runner import prepare_requests, run_level
from glmserve.bench.settings import BenchSettings, LevelRun
from glmserve.store import RunStore


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def _finished(url: str) -> int:
    reqs = httpx.get(url + "/sim/trace", timeout=5).json()["requests"].values()
    return sum(1 for r in reqs if r["finish"])


@pytest.mark.slow
def test_a_worker_killed_with_sigkill_leaves_its_requests_accounted_for(start_simulator):
    sim = start_simulator("--disable-cuda-graph", "--sim-speed", "6")
    proc = subprocess.Popen(
        [*GLMSERVE, "bench", "--url", sim.url, "--json", "--warmup", "0", "--mode",
         "concurrency", "--concurrency", "4", "--workers", "2", "--num-prompts", "40",
         "--output-len", "64"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while time.monotonic() < deadline:
            workers = _children(proc.pid)
            if len(workers) >= 2 and _finished(sim.url) >= 4:
                break
            time.sleep(0.1)
        assert len(workers) >= 2, "the bench never started its two workers"
        os.kill(workers[-1], signal.SIGKILL)  # a worker of the bench this test started
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 7, err[-2000:]
    assert "Traceback" not in err
    data = json.loads(out)
    lv = data["levels"][0]
    assert data["complete"] is False
    assert "requests not run: client worker died" in data["stopped"]
    assert "killed by signal 9 (SIGKILL)" in data["stopped"]
    # every request asked is accounted for: recorded, or counted as not run
    n_missing = int(data["stopped"].split(" of ", 1)[0])
    assert n_missing >= 1 and lv["not_run"] == n_missing
    assert lv["requests"] + n_missing == 40, (lv["requests"], data["stopped"])
    assert "of 40 requests not run" in data["stopped"]
    assert "requests not run: client worker died" in err.strip().splitlines()[-1]
    with RunStore.open() as store:
        stored = store.get_bench_result(data["id"])["result"]
    assert stored["complete"] is False and stored["stopped"] == data["stopped"]


def test_a_worker_raising_is_accounted_for_as_not_run(monkeypatch):
    """A worker whose loop raises (a payload it chokes on) reports the exception; the parent
    counts its requests that were never recorded."""
    real = runner.closed_loop

    async def flaky(spec, records, on_record, inflight, should_stop=lambda: False):
        if spec.indices and spec.indices[0] == 1:  # the second worker's share: 1, 3, 5, ...
            raise RuntimeError("choked on a payload")
        return await real(spec, records, on_record, inflight, should_stop)

    monkeypatch.setattr(runner, "closed_loop", flaky)  # inherited by the forked workers
    with HostileServer("ok") as srv:
        settings = BenchSettings(srv.url, mode="concurrency", concurrency=[2], num_prompts=10,
                                 output_len=8, warmup=0, workers=2)  # fmt: skip
        requests = prepare_requests(settings, "default")
        run = LevelRun(concurrency=2, workers=2)
        run_level(settings, 2, requests, Progress(), run)
    assert run.stopped == (
        "5 of 10 requests not run: client worker died "
        "(worker 1: raised RuntimeError: choked on a payload)"
    )
    assert len(run.records) == 5 and all(r.ok for r in run.records)
    assert run.not_run == 5


def test_a_worker_killed_mid_write_neither_hangs_the_level_nor_loses_the_count(monkeypatch):
    """Killed while writing a record (a length header, half a message, then SIGKILL): the
    parent reads EOF on that worker's own pipe instead of waiting for the rest forever, and
    the other worker is not blocked by a lock the dead one held."""
    real_put = runner._Outbox.put

    def put(self, item):
        kind, payload = item
        if kind == "rec" and payload[0] == 1:
            os.write(self.conn.fileno(), struct.pack("!i", 4096) + b"half a record")
            os.kill(os.getpid(), signal.SIGKILL)
        real_put(self, item)

    monkeypatch.setattr(runner._Outbox, "put", put)  # inherited by the forked workers
    with HostileServer("ok") as srv:
        settings = BenchSettings(srv.url, mode="concurrency", concurrency=[2], num_prompts=10,
                                 output_len=8, warmup=0, workers=2)  # fmt: skip
        run = LevelRun(concurrency=2, workers=2)
        t0 = time.monotonic()
        run_level(settings, 2, prepare_requests(settings, "default"), Progress(), run)
    assert time.monotonic() - t0 < 30
    assert run.stopped == (
        "5 of 10 requests not run: client worker died (worker 1: killed by signal 9 (SIGKILL))"
    )
    assert len(run.records) == 5 and run.not_run == 5
