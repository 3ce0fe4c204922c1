"""Profiler traces: one gzipped Chrome trace per rank, kernel time = the cost model's step."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from glmserve.simulator import costmodel as cm
from glmserve.simulator.costmodel import CostModel, ServerShape
from glmserve.simulator.torch_trace import CAST_KERNEL, write_traces


@pytest.mark.parametrize("backend", ["flashinfer", "trtllm_mla"])
def test_kernel_durations_sum_to_the_step_time(tmp_path, backend):
    m = CostModel()
    shape = ServerShape(attention_backend=backend)
    step_s = cm.decode_step_s(m, shape, 4, 8000)
    steps = [(1, "decode", 10.0, 10.1, 10.1, step_s, 4, 8000)]
    paths = write_traces(str(tmp_path), "123.4", 2, m, shape, steps, ["CPU", "GPU"])
    assert [p.rsplit("/", 1)[1] for p in paths] == [
        "123.4-TP-0.trace.json.gz",
        "123.4-TP-1.trace.json.gz",
    ]
    doc = json.loads(gzip.decompress(Path(paths[1]).read_bytes()))
    assert doc["distributedInfo"]["rank"] == 1
    kernels = [e for e in doc["traceEvents"] if e["cat"] == "kernel"]
    assert sum(e["dur"] for e in kernels) / 1e6 == pytest.approx(step_s, rel=1e-3)
    cast = [e for e in kernels if e["name"] == CAST_KERNEL]
    if backend == "flashinfer":
        assert len(cast) == m.layers
        assert sum(e["dur"] for e in cast) / 1e6 == pytest.approx(
            cm.step_terms(m, shape, 4, 8000)["cast"], rel=1e-3
        )
        assert any(e["name"] == "aten::copy_" for e in doc["traceEvents"])
    else:
        assert cast == []
