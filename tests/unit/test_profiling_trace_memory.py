"""profiler memory: real traces reach GBs, so the parse must not hold the file.

Peak RSS (resource.getrusage in a fresh subprocess, not timing) on a small and a 4x larger
generated trace (synthetic, kineto-shaped: cpu_op -> cudaLaunchKernel -> kernel with unique
ids, as a long real trace repeats). Streaming alone must stay flat; the full analysis keeps
compact per-event records (names interned, one copy of each shape record), so it grows with
the number of kernels, by well under the JSON text it reads.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

_PROBE = """
import resource, sys
from glmserve.profiling.analysis import summarize_trace
from glmserve.profiling.trace import iter_trace
mode, path = sys.argv[1], sys.argv[2]
if mode == "stream":
    n = sum(1 for _ in iter_trace(path))
else:
    n = summarize_trace(path).kernels[0].count
print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux
"""


def _write_trace(path: Path, steps: int, per_step: int = 100) -> int:
    """Write a gzip trace of ``steps`` steps; returns its uncompressed size in bytes."""
    pad = [[4096, 576]] * 100  # long "Input Dims" text: real records carry much of it
    size = 0
    with gzip.open(path, "wt", compresslevel=1) as fh:

        def put(text: str) -> None:
            nonlocal size
            size += len(text)
            fh.write(text)

        put('{"schemaVersion": 1, "traceEvents": [\n')
        eid, ts, first = 0, 0.0, True
        for s in range(steps):
            step = {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}",
                    "pid": 1, "tid": 1, "ts": ts, "dur": per_step * 10.0}  # fmt: skip
            put(("" if first else ",\n") + json.dumps(step))
            first = False
            for i in range(per_step):
                eid += 1
                t = ts + i * 10.0
                op = {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::mm",
                    "pid": 1,
                    "tid": 1,
                    "ts": t,
                    "dur": 8.0,
                    "args": {"External id": eid, "Input Dims": pad},
                }
                rt = {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 1,
                    "dur": 2.0,
                    "args": {"correlation": eid, "External id": eid},
                }
                k = {"ph": "X", "cat": "kernel", "name": f"gemm_kernel_{i % 7}<{'x' * 200}>",
                     "pid": 0, "tid": 7, "ts": t + 3, "dur": 6.0,
                     "args": {"correlation": eid, "External id": eid, "device": 0,
                              "grid": [132, 1, 1], "block": [128, 1, 1]}}  # fmt: skip
                put(",\n" + ",\n".join(json.dumps(e) for e in (op, rt, k)))
            ts += per_step * 10.0
        put("\n]}\n")
    return size


def _peak_kib(mode: str, path: Path) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode, str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


@pytest.mark.slow
def test_parse_memory_stays_bounded_as_the_trace_grows(tmp_path):
    small, big = tmp_path / "small-TP-0.trace.json.gz", tmp_path / "big-TP-0.trace.json.gz"
    small_bytes = _write_trace(small, steps=100)
    big_bytes = _write_trace(big, steps=500)
    grown_mib = (big_bytes - small_bytes) / 2**20
    assert grown_mib > 60  # the larger file holds ~70 MiB more JSON text

    n_small, rss_small = _peak_kib("stream", small)
    n_big, rss_big = _peak_kib("stream", big)
    assert n_big > 4.9 * n_small
    assert (rss_big - rss_small) / 1024 < 16, (rss_small, rss_big)  # flat: one chunk held

    k_small, rss_small = _peak_kib("summarize", small)
    k_big, rss_big = _peak_kib("summarize", big)
    assert k_big == 5 * k_small
    # compact records: under 1 KiB per launched kernel (its op, launch call and kernel),
    # whatever their JSON text weighs (here ~1.9 KiB per triple)
    per_kernel = (rss_big - rss_small) * 1024 / ((500 - 100) * 100)
    assert per_kernel < 1024, (rss_small, rss_big, per_kernel)
    assert (rss_big - rss_small) / 1024 < 0.5 * grown_mib
