"""profiler on real traces written by other PyTorch releases / other tools (see
tests/data/traces/SOURCES.md), and on those traces re-encoded the ways other exporters write
them (B/E pairs, quoted timestamps, a bare array, SGLang's merged file)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from glmserve.cli import main
from glmserve.errors import TraceFormatError
from glmserve.profiling.analysis import (
    analyze_path,
    analyze_traces,
    summarize_trace,
    summarize_trace_ranks,
)
from glmserve.profiling.findings import find_bottlenecks

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
EAGER = sorted((DATA / "tp2_eager").glob("*.trace.json.gz"))
GRAPH = sorted((DATA / "tp2_graph").glob("*.trace.json.gz"))


def _load(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _write(path: Path, doc: object) -> Path:
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _kernel_total(path: Path) -> float:
    return sum(e["dur"] for e in _load(path)["traceEvents"] if e.get("cat") == "kernel")


def test_hta_trace_attributes_a_kernel_whose_external_id_is_its_correlation():
    prof = summarize_trace(DATA / "hta_backward_thread.json")
    assert (prof.rank, prof.steps, prof.step_source) == (0, 1, "ProfilerStep")
    (k,) = prof.kernels
    assert k.kind == "gemm" and k.launched_by == "aten::mm" and k.total_us == 45
    assert prof.ops[0].name == "aten::mm" and prof.ops[0].count == 1
    assert 0 < k.share < 0.001  # 45 us of a 413 ms step


@pytest.mark.parametrize("files", [EAGER, GRAPH], ids=["eager", "cuda_graph"])
def test_tp2_sglang_shaped_traces_find_steps_ranks_and_the_cast(files):
    assert len(files) == 2
    analysis = analyze_traces(files)
    assert [r.rank for r in analysis.ranks] == [0, 1]
    for r, path in zip(analysis.ranks, files, strict=True):
        assert r.source == str(path) and r.label == f"TP-{r.rank}"
        assert r.steps == 3 and r.step_source == "forward_decode/replay frames"
        assert r.devices == [r.rank]  # each rank's kernels on its own GPU
        assert sum(k.share for k in r.kernels) <= 1.0 + 1e-9  # one stream: no overlap
        assert r.gpu_busy_us <= r.window_us
        # every kernel of the profiled steps is counted: they all ran inside forwards
        assert sum(k.total_us for k in r.kernels) == pytest.approx(_kernel_total(path))
        nccl = [k for k in r.kernels if k.short_name.startswith("ncclDevKernel_AllReduce")]
        assert nccl and nccl[0].kind == "allreduce" and nccl[0].count == 3 * 2 * 2
        cast = [k for k in r.kernels if k.kind == "cast"]
        assert cast and cast[0].count == 3 * 2  # one whole-pool cast per layer per step
    kinds = {f.kind: f for f in analysis.findings}
    assert "dtype_cast" in kinds and "record_shapes" in kinds["dtype_cast"].message


def test_eager_trace_kernels_are_launched_by_their_aten_ops():
    prof = summarize_trace(EAGER[0])
    assert prof.kernels[0].kind == "cast" and prof.kernels[0].launched_by.startswith("aten::copy_")
    assert prof.ops[0].name == "aten::copy_" and prof.ops[0].count == 6
    mm = next(o for o in prof.ops if o.name == "aten::mm")
    assert all("nvjet" in k or "splitK" in k for k in mm.kernels)


def test_graph_trace_kernels_belong_to_the_graph_launch_and_skew_is_called_out():
    analysis = analyze_traces(GRAPH)
    for r in analysis.ranks:
        assert {o.name for o in r.ops} == {"(cuda graph)"}
    ar = [sum(k.share for k in r.kernels if k.kind == "allreduce") for r in analysis.ranks]
    (f,) = [f for f in analysis.findings if f.kind == "allreduce"]
    assert f.share == pytest.approx(max(ar))
    assert ("waiting for the slowest rank" in f.message) == (max(ar) > 2 * min(ar))


def test_directory_with_stage_and_merged_files_picks_decode_per_rank(tmp_path):
    for p in GRAPH:
        (tmp_path / p.name).write_bytes(p.read_bytes())
        extend = p.name.replace("-DECODE", "-EXTEND")
        (tmp_path / extend).write_bytes(EAGER[0].read_bytes())
    (tmp_path / "merged-x.trace.json.gz").write_bytes(GRAPH[0].read_bytes())
    analysis = analyze_path(tmp_path)
    assert [Path(r.source).name for r in analysis.ranks] == [p.name for p in GRAPH]


def test_sglang_merged_trace_splits_back_into_ranks(tmp_path):
    """Re-encoded as SGLang's ProfileMerger writes it: pids prefixed "[TP00] "."""
    merged: dict = {"traceEvents": []}
    for rank, p in enumerate(EAGER):
        doc = _load(p)
        for ev in doc["traceEvents"]:
            ev["pid"] = f"[TP{rank:02d}] {ev['pid']}"
        merged["traceEvents"].extend(doc["traceEvents"])
    path = _write(tmp_path / "merged-1796074315.trace.json.gz", merged)
    ranks = summarize_trace_ranks(path)
    assert [(r.rank, r.label) for r in ranks] == [(0, "TP00"), (1, "TP01")]
    for r, p in zip(ranks, EAGER, strict=True):
        alone = summarize_trace(p)
        assert r.steps == alone.steps == 3
        assert r.kernels[0].total_us == pytest.approx(alone.kernels[0].total_us)


def test_begin_end_pairs_and_quoted_timestamps_give_the_same_profile(tmp_path):
    """The real eager trace re-encoded: X events as B/E pairs, ts/dur as strings."""
    doc = _load(EAGER[0])
    events = []
    for ev in doc["traceEvents"]:
        if ev.get("ph") == "X" and ev.get("cat") in ("cpu_op", "python_function"):
            b = {k: v for k, v in ev.items() if k != "dur"}
            events.append({**b, "ph": "B", "ts": str(ev["ts"])})
            events.append({"ph": "E", "pid": ev["pid"], "tid": ev["tid"],
                           "ts": ev["ts"] + ev["dur"]})  # fmt: skip
        else:
            events.append({**ev, "ts": str(ev["ts"])} if "ts" in ev else ev)
    events.sort(key=lambda e: (float(e.get("ts", 0)), e.get("ph") != "E"))
    path = _write(tmp_path / "be-TP-0.trace.json.gz", events)  # bare array, no metadata
    got, want = summarize_trace(path), summarize_trace(EAGER[0])
    assert got.steps == want.steps == 3
    assert [(k.name, k.launched_by) for k in got.kernels] == [
        (k.name, k.launched_by) for k in want.kernels
    ]
    assert got.ops[0].name == want.ops[0].name and got.ops[0].count == want.ops[0].count


def test_unknown_and_broken_fields_are_skipped_not_fatal(tmp_path):
    doc = _load(EAGER[0])
    doc["traceEvents"] += [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": {"odd": 1}, "ts": 1, "dur": -3},
        {"ph": "E", "pid": 99, "tid": 99, "ts": 4},
        {"ph": "X", "cat": "kernel", "ts": 1e400, "args": "not a dict"},
        {"ph": "Z", "weird": True},
        "not an event",
        {"ph": "X", "cat": "kernel", "name": "k3", "ts": 3.0},  # no dur: skipped, not 0
        {"ph": "X", "cat": "Kernel", "name": "k2", "ts": 2.0, "dur": 0, "args": None},
    ]
    doc["newField"] = {"x": [1, 2]}
    prof = summarize_trace(_write(tmp_path / "x-TP-0.trace.json.gz", doc))
    assert prof.steps == 3
    assert any("skipped" in n for n in prof.notes)
    assert any("outside the 3 decode step(s)" in n for n in prof.notes)  # k2 at ts 2.0


def test_no_step_markers_falls_back_to_the_gpu_span_and_says_so(tmp_path):
    doc = _load(EAGER[0])
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"]
    prof = summarize_trace(_write(tmp_path / "n-TP-0.trace.json.gz", doc))
    assert prof.step_source == "gpu busy span" and prof.steps == 1
    assert any("no decode-step markers" in n for n in prof.notes)
    hinted = summarize_trace(tmp_path / "n-TP-0.trace.json.gz", steps_hint=3)
    assert hinted.steps == 3 and hinted.step_us == pytest.approx(prof.step_us / 3)


def test_graph_launches_are_steps_when_there_are_no_python_frames(tmp_path):
    doc = _load(GRAPH[0])
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"]
    prof = summarize_trace(_write(tmp_path / "g-TP-0.trace.json.gz", doc))
    assert prof.step_source == "cudaGraphLaunch" and prof.steps == 3
    assert sum(k.total_us for k in prof.kernels) == pytest.approx(_kernel_total(GRAPH[0]))


def _cut(src: Path, n: int) -> bytes:
    return src.read_bytes()[:n]


@pytest.mark.parametrize(
    "content, message",
    [
        (lambda: _cut(EAGER[0], 4000), "truncated compressed stream"),
        (lambda: b"\x1f\x8b" + b"x" * 40, "corrupt compressed stream"),
        (lambda: b"", "the file is empty"),
        (lambda: b"hello world", "not a Chrome trace"),
        (lambda: b'{"name": "a package.json", "version": "1.0"}', "no traceEvents array"),
        (lambda: b'{"traceEvents": []}', "no profiler events"),
        (lambda: b"[1, 2, 3]", "no profiler events"),
        (lambda: gzip.decompress(EAGER[0].read_bytes())[:-40], "not a Chrome trace"),
        (lambda: bytes(range(256)) * 4, "not a Chrome trace"),
    ],
    ids=[
        "truncated-gz",
        "bad-gz",
        "empty",
        "text",
        "other-json",
        "no-events",
        "numbers",
        "cut-json",
        "binary",
    ],
)
def test_hostile_input_is_one_line_error_exit_2_from_the_cli(tmp_path, capsys, content, message):
    path = tmp_path / "bad.trace.json.gz"
    path.write_bytes(content())
    with pytest.raises(TraceFormatError, match=message):
        analyze_path(path)
    rc = main(["profile", str(path)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "bad.trace.json.gz" in err and message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_analyses_a_trace_directory_offline_as_json(tmp_path, capsys):
    rc = main(["profile", str(DATA / "tp2_eager"), "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["findings"] and all(0 < f["share"] <= 1 for f in doc["findings"])


def test_h200_trace_still_finds_the_cast_within_its_steps():
    prof = summarize_trace(DATA / "h200_decode_like.trace.json.gz")
    assert prof.step_source == "ProfilerStep" and prof.gpu_busy_us <= prof.window_us
    (f,) = [f for f in find_bottlenecks([prof]) if f.kind == "fp8_kv_cast"]
    assert "whole KV pool" in f.message


KINETO_18 = DATA / "kineto_torch18_v100_excerpt.json"


def test_pytorch_18_format_capitalised_categories_and_string_tids():
    """Kineto of PyTorch 1.8 (V100): Operator/Kernel/Runtime/Memcpy, "external id" in lower
    case, tids as strings, flows in category "async", ProfilerStep as an Operator."""
    prof = summarize_trace(KINETO_18)
    assert (prof.steps, prof.step_source, prof.window_us) == (1, "ProfilerStep", 13410.0)
    launched = {k.short_name: (k.kind, k.launched_by) for k in prof.kernels}
    assert launched == {
        "gemmSN_TN_kernel_64addr": ("gemm", "aten::mm"),
        "volta_sgemm_128x32_nt": ("gemm", "aten::mm"),  # on the autograd thread
        "unrolled_elementwise_kernel": ("elementwise", "aten::add_"),
        "Memcpy HtoD": ("memcpy_htod", "aten::copy_"),
    }
    assert next(o for o in prof.ops if o.name == "aten::mm").count == 2


def test_pytorch_18_kernels_link_by_lowercase_external_id_without_correlation(tmp_path):
    doc = json.loads(KINETO_18.read_text())
    for ev in doc["traceEvents"]:
        if isinstance(ev.get("args"), dict):
            ev["args"].pop("correlation", None)
    path = tmp_path / "nocorr.json"
    path.write_text(json.dumps(doc))
    by_name = {k.short_name: k.launched_by for k in summarize_trace(path).kernels}
    assert by_name["volta_sgemm_128x32_nt"] == "aten::mm"
    assert by_name["Memcpy HtoD"] == "aten::copy_"


def test_one_endless_value_is_refused_instead_of_buffered(tmp_path, monkeypatch):
    """A "trace" whose first event never ends (a GB string, say) must not fill memory."""
    import glmserve.profiling.trace as prof

    monkeypatch.setattr(prof, "MAX_EVENT_CHARS", 1 << 16)
    path = tmp_path / "endless.json"
    path.write_text('{"traceEvents": [{"name": "' + "x" * (1 << 18))
    with pytest.raises(TraceFormatError, match="one value is larger than"):
        analyze_path(path)
