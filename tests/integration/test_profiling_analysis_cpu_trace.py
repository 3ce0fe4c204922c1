"""A torch-profiler trace recorded live on the CPU, parsed by glmserve.profiling."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from glmserve.profiling.analysis import summarize_trace
from glmserve.profiling.findings import find_bottlenecks

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


# Records one trace per torch.profiler option set: a 2-"layer" step casting an FP8 pool to
# BF16 and a matmul; a wait/warmup/active schedule (ProfilerStep spans) except "plain".
_GEN = """
import sys, torch
from torch.profiler import profile, ProfilerActivity, schedule
out = sys.argv[1]
pool = torch.randn(16384, 576).to(torch.float8_e4m3fn)
w = torch.randn(576, 1024, dtype=torch.bfloat16)
def step():
    for _ in range(2):
        k = pool.to(torch.bfloat16)
        y = k[:8] @ w
    return y
combos = {
    "plain": {},
    "shapes": dict(record_shapes=True),
    "stack": dict(with_stack=True),
    "memory": dict(profile_memory=True, record_shapes=True),
    "flops": dict(with_flops=True, record_shapes=True),
    "all": dict(record_shapes=True, with_stack=True, profile_memory=True, with_flops=True,
                with_modules=True),
}
for name, kw in combos.items():
    if name == "plain":
        with profile(activities=[ProfilerActivity.CPU], **kw) as prof:
            step()
        prof.export_chrome_trace(f"{out}/{name}.trace.json")
        continue
    path = f"{out}/{name}-TP-0.trace.json.gz"
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
                 on_trace_ready=lambda p, path=path: p.export_chrome_trace(path), **kw) as prof:
        for _ in range(4):
            step()
            prof.step()
"""


@pytest.fixture(scope="module")
def option_traces(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("opts")
    proc = subprocess.run(
        [sys.executable, "-c", _GEN, str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["shapes", "stack", "memory", "flops", "all"])
def test_profiler_options_do_not_change_what_is_found(option_traces, name):
    """record_shapes / with_stack / profile_memory (cpu_instant_event) / with_flops /
    with_modules each add events and args; the steps, the ops and their shares stay sound."""
    prof = summarize_trace(option_traces / f"{name}-TP-0.trace.json.gz")
    assert (prof.steps, prof.step_source, prof.has_gpu) == (2, "ProfilerStep", False)
    assert prof.notes == []
    top = prof.ops[0]
    assert top.name == "aten::copy_" and top.count == 2 * 2
    assert sum(o.share for o in prof.ops) <= 1.0 + 1e-6
    assert next(o for o in prof.ops if o.name == "aten::mm").count == 2 * 2
    shapes = name != "stack"
    assert top.cast == (("fp8_e4m3", "bf16") if shapes else None)


@pytest.mark.slow
def test_profile_without_schedule_uses_the_cpu_span_and_says_so(option_traces):
    prof = summarize_trace(option_traces / "plain.trace.json")
    assert prof.step_source == "cpu span" and prof.steps == 1
    assert any("no decode-step markers" in n for n in prof.notes)
    assert prof.ops[0].name == "aten::copy_" and prof.ops[0].count == 2
