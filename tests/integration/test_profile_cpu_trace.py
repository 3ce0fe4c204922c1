"""A torch-profiler trace recorded live on the CPU, parsed by glmserve.profiler."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from glmserve.profiler import find_bottlenecks, summarize_trace

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_live_cpu_trace_names_the_fp8_cast(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "live-TP-0.trace.json.gz"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "record_cpu_trace.py"),
            "--out",
            str(out),
            "--steps",
            "2",
            "--layers",
            "2",
            "--pool-tokens",
            "4096",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    prof = summarize_trace(out)
    assert prof.rank == 0 and prof.steps == 2
    copies = [o for o in prof.ops if o.cast == ("fp8_e4m3", "bf16") and o.name == "aten::copy_"]
    assert copies and copies[0].count == 2 * 2
    assert copies[0].example_dims[0] == [4096, 576]
    matmul = [o for o in prof.ops if o.name == "aten::mm"]
    assert matmul and matmul[0].count == 2 * 2 * 4
    finding = [f for f in find_bottlenecks([prof]) if f.kind == "fp8_kv_cast"]
    if copies[0].share >= 0.10:
        assert finding and f"{copies[0].share:.0%}" in finding[0].message
    else:
        assert not finding
