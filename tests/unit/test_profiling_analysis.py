"""profiler: streaming Chrome-trace reader, kernel -> op attribution, findings."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from glmserve.errors import TraceFormatError
from glmserve.profiling.accumulate import TraceAccumulator
from glmserve.profiling.analysis import analyze_traces, summarize_trace
from glmserve.profiling.findings import find_bottlenecks
from glmserve.profiling.trace import iter_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
CAST_KERNEL = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#14}::operator()() "
    "const::{lambda(c10::Float8_e4m3fn)#1}, at::detail::Array<char*, 2>>(int, ...)"
)


class GpuTrace:
    """Builds a kineto-shaped GPU trace: cpu_op -> cudaLaunchKernel -> kernel (+ ac2g flow)."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.ext = 100
        self.corr = 5000
        self.gpu_ts = 0.0

    def step(self, n: int, ts: float, dur: float) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{n}",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": dur,
                "args": {"External id": 1},
            }
        )

    def op_kernel(
        self,
        op: str,
        kernel: str,
        ts: float,
        kdur: float,
        *,
        types=None,
        dims=None,
        link: str = "ext",
        cat: str = "kernel",
        gpu_ts: float | None = None,
    ) -> None:
        self.ext += 1
        self.corr += 1
        args = {"External id": self.ext}
        if types:
            args["Input type"] = types
        if dims:
            args["Input Dims"] = dims
        self.events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": op,
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 10.0,
                "args": args,
            }
        )
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts + 2,
                "dur": 3.0,
                "args": {"correlation": self.corr, "External id": self.ext},
            }
        )
        kts = gpu_ts if gpu_ts is not None else ts + 20
        kargs = {"correlation": self.corr, "stream": 7, "device": 0}
        if link == "ext":
            kargs["External id"] = self.ext
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": kernel,
                "pid": 0,
                "tid": 7,
                "ts": kts,
                "dur": kdur,
                "args": kargs,
            }
        )
        self.events.append(
            {
                "ph": "s",
                "id": self.corr,
                "pid": 1,
                "tid": 1,
                "ts": ts + 2,
                "cat": "ac2g",
                "name": "ac2g",
            }
        )
        self.events.append(
            {
                "ph": "f",
                "id": self.corr,
                "pid": 0,
                "tid": 7,
                "ts": kts,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )

    def write(self, path: Path, *, gz: bool = True, extra: dict | None = None) -> Path:
        doc = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
            "traceEvents": self.events,
            "traceName": str(path),
            **(extra or {}),
        }
        text = json.dumps(doc, indent=1)
        if gz:
            with gzip.open(path, "wt") as fh:
                fh.write(text)
        else:
            path.write_text(text)
        return path


def _decode_like(steps: int = 2, layers: int = 3, cast_us: float = 600.0) -> GpuTrace:
    t = GpuTrace()
    ts = 0.0
    for s in range(steps):
        t.step(s + 1, ts, 1000.0)
        cur = ts
        for _ in range(layers):
            t.op_kernel(
                "aten::copy_",
                CAST_KERNEL,
                cur,
                cast_us / layers,
                types=["c10::BFloat16", "c10::Float8_e4m3fn", "Scalar"],
                dims=[[8192, 1, 576], [8192, 1, 576], []],
                gpu_ts=cur + 1,
            )
            cur += cast_us / layers + 2
            t.op_kernel(
                "aten::mm",
                "sm90_xmma_gemm_bf16bf16_bf16f32",
                cur,
                60.0,
                types=["c10::BFloat16", "c10::BFloat16"],
                gpu_ts=cur,
            )
            cur += 62
        ts += 1000.0
    return t


def test_stream_reader_yields_events_and_metadata_on_both_sides(tmp_path):
    t = _decode_like(steps=1, layers=1)
    path = t.write(tmp_path / "x-TP-3.trace.json.gz", extra={"distributedInfo": {"rank": 3}})
    events = list(iter_trace(path))
    assert len(events) == len(t.events)
    assert events[0]["name"] == "ProfilerStep#1"


def test_reader_handles_plain_json_small_buffer_and_bare_array(tmp_path):
    t = _decode_like(steps=1, layers=2)
    plain = t.write(tmp_path / "plain.trace.json", gz=False)
    from glmserve.profiling.trace import TraceFile, _open_text, _TextWindow

    with _open_text(plain) as fh:  # 7-char window: every event straddles a refill
        win = _TextWindow(fh, "plain", chunk_chars=7)
        assert win.expect("{") == "{"
    assert [e["name"] for e in TraceFile(plain).events()] == [e["name"] for e in t.events]
    arr = tmp_path / "arr.json"
    arr.write_text(json.dumps(t.events))
    assert len(list(iter_trace(arr))) == len(t.events)


def test_small_chunks_decode_numbers_split_across_refills(tmp_path, monkeypatch):
    import glmserve.profiling.trace as prof

    path = tmp_path / "n.json"
    path.write_text('{"traceEvents": [{"ph": "X", "ts": 123456789, "dur": 42}], "n": 98765}')
    orig = prof._TextWindow.__init__

    def tiny(self, fh, label, chunk_chars=1 << 20):
        orig(self, fh, label, chunk_chars=3)

    monkeypatch.setattr(prof._TextWindow, "__init__", tiny)
    tf = prof.TraceFile(path)
    assert list(tf.events()) == [{"ph": "X", "ts": 123456789, "dur": 42}]
    assert tf.metadata == {"n": 98765}


@pytest.mark.parametrize(
    "text, line",
    [
        ('{"traceEvents": [\n{"ph": "X"},\n{"ph": oops}]}', 3),
        ('{"traceEvents": [{"ph": "X"}', 1),
        ("\n\nnot json", 3),
    ],
)
def test_malformed_trace_is_one_error_with_file_and_line(tmp_path, text, line):
    path = tmp_path / "bad.trace.json"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=rf"bad\.trace\.json:{line}: not a Chrome trace"):
        list(iter_trace(path))


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(TraceFormatError, match="cannot read trace"):
        list(iter_trace(tmp_path / "nope.trace.json.gz"))


def test_cast_kernel_is_attributed_to_copy_and_named_with_share(tmp_path):
    path = _decode_like(steps=2, layers=3, cast_us=600.0).write(tmp_path / "p-TP-0.trace.json.gz")
    prof = summarize_trace(path)
    assert prof.steps == 2 and prof.step_source == "ProfilerStep"
    assert prof.step_us == pytest.approx(1000.0)
    top = prof.kernels[0]
    assert top.short_name == "unrolled_elementwise_kernel"
    assert top.kind == "cast" and top.share == pytest.approx(0.6)
    assert top.launched_by == "aten::copy_ (fp8_e4m3 -> bf16 elementwise)"
    op = prof.ops[0]
    assert (op.name, op.cast, op.count) == ("aten::copy_", ("fp8_e4m3", "bf16"), 6)
    gemm = next(k for k in prof.kernels if k.kind == "gemm")
    assert gemm.share == pytest.approx(6 * 60 / 2000)
    (finding,) = [f for f in find_bottlenecks([prof]) if f.kind == "fp8_kv_cast"]
    assert finding.message.startswith("aten::copy_ (fp8 -> bf16 elementwise) takes 60% of decode")
    assert "3 casts of a [8192, 1, 576] buffer per step" in finding.message
    assert "flashinfer_gtc" in finding.message and "trtllm_mla" in finding.message


def test_correlation_and_flow_fallback_attribute_kernels_without_external_id():
    t = GpuTrace()
    t.step(1, 0.0, 500.0)
    t.op_kernel(
        "aten::copy_",
        CAST_KERNEL,
        0.0,
        300.0,
        link="corr",
        types=["c10::BFloat16", "c10::Float8_e4m3fn"],
    )
    # drop the runtime events: only the ac2g flow start links kernel -> launch site
    events = [e for e in t.events if e.get("cat") != "cuda_runtime"]
    acc = TraceAccumulator(rank=0)
    for ev in events:
        acc.add(ev)
    prof = acc.finish()
    assert prof.kernels[0].launched_by == "aten::copy_ (fp8_e4m3 -> bf16 elementwise)"


def test_cast_named_from_kernel_name_when_shapes_were_not_recorded():
    t = GpuTrace()
    t.step(1, 0.0, 100.0)
    t.op_kernel("aten::copy_", CAST_KERNEL, 0.0, 50.0)
    acc = TraceAccumulator(rank=0)
    for ev in t.events:
        acc.add(ev)
    prof = acc.finish()
    assert prof.ops[0].label == "fp8_e4m3 -> wider elementwise"
    assert next(f.kind for f in find_bottlenecks([prof])) == "fp8_kv_cast"


def test_allreduce_htod_and_idle_findings_and_no_cast_finding():
    t = GpuTrace()
    t.step(1, 0.0, 1000.0)
    t.op_kernel("nccl:all_reduce", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...)", 0.0, 300.0)
    t.op_kernel("aten::copy_", "Memcpy HtoD (Pageable -> Device)", 320.0, 100.0, cat="gpu_memcpy")
    t.op_kernel("aten::mm", "nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 440.0, 100.0)
    acc = TraceAccumulator(rank=2)
    for ev in t.events:
        acc.add(ev)
    prof = acc.finish()
    kinds = {f.kind: f for f in find_bottlenecks([prof])}
    assert set(kinds) >= {"allreduce", "memcpy_htod", "gpu_idle"}
    assert "fp8_kv_cast" not in kinds and "gemm_bound" not in kinds
    assert kinds["allreduce"].share == pytest.approx(0.3)
    assert "NCCL_P2P_LEVEL" in kinds["allreduce"].message
    assert "pinned memory" in kinds["memcpy_htod"].message
    assert kinds["gpu_idle"].share == pytest.approx(0.5)
    assert kinds["allreduce"].ranks == [2]


def test_gemm_dominated_decode_is_called_expected():
    t = GpuTrace()
    t.step(1, 0.0, 100.0)
    t.op_kernel(
        "aten::mm", "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64", 0.0, 90.0, gpu_ts=5.0
    )
    acc = TraceAccumulator(rank=0)
    for ev in t.events:
        acc.add(ev)
    (f,) = [f for f in find_bottlenecks([acc.finish()]) if f.kind == "gemm_bound"]
    assert "expected" in f.message and f.share == pytest.approx(0.9)


def test_without_profiler_steps_the_gpu_busy_span_is_the_window():
    t = GpuTrace()
    t.op_kernel("aten::mm", "gemm_a", 0.0, 40.0, gpu_ts=100.0)
    t.op_kernel("aten::mm", "gemm_b", 50.0, 40.0, gpu_ts=160.0)
    acc = TraceAccumulator(rank=0)
    for ev in t.events:
        acc.add(ev)
    prof = acc.finish()
    assert prof.step_source == "gpu busy span"
    assert prof.window_us == pytest.approx(100.0) and prof.gpu_busy_us == pytest.approx(80.0)


def test_ranks_come_from_file_names(tmp_path):
    for r in (1, 0):
        _decode_like(steps=1, layers=1).write(tmp_path / f"171-TP-{r}.trace.json.gz")
    analysis = analyze_traces(sorted(tmp_path.iterdir()))
    assert [r.rank for r in analysis.ranks] == [0, 1]
    assert analysis.findings[0].ranks == [0, 1]
    assert analysis.to_dict()["version"] == 1


def test_committed_cpu_trace_finds_the_fp8_cast():
    """A real torch 2.13 CPU trace (scripts/record_cpu_trace.py): the cast is found by dtype."""
    prof = summarize_trace(DATA / "cpu_decode_like.trace.json.gz")
    assert prof.steps == 3 and not prof.has_gpu
    top = prof.ops[0]
    assert (top.name, top.cast) == ("aten::copy_", ("fp8_e4m3", "bf16"))
    assert top.count == 3 * 4
    # self times: nested aten::to / aten::_to_copy do not double count the copy
    assert sum(o.share for o in prof.ops) <= 1.0 + 1e-6
    (f,) = [f for f in find_bottlenecks([prof]) if f.kind == "fp8_kv_cast"]
    assert f"{top.share:.0%} of decode" in f.message


def test_h200_trace_names_the_cast_with_its_share():
    """Recorded on an H200 (whole-pool FP8 -> BF16 cast next to matmuls and attention)."""
    path = DATA / "h200_decode_like.trace.json.gz"
    if not path.exists():
        pytest.skip("tests/data/traces/h200_decode_like.trace.json.gz not recorded yet")
    prof = summarize_trace(path)
    assert prof.has_gpu
    cast_ops = [o for o in prof.ops if o.cast and o.cast[0].startswith("fp8")]
    assert cast_ops, [(o.name, o.label) for o in prof.ops[:5]]
    cast = max(cast_ops, key=lambda o: o.share)
    assert cast.share > 0.05
    assert prof.ops[0] is cast  # the workload was built so the cast dominates, as in the seeds
    assert cast.name == "aten::copy_" and cast.cast == ("fp8_e4m3", "bf16")
    assert any("elementwise" in k for k in cast.kernels)
    cast_kernel_us = sum(k.total_us for k in prof.kernels if k.kind == "cast")
    assert cast.total_us == pytest.approx(cast_kernel_us)
    (f,) = [f for f in find_bottlenecks([prof]) if f.kind == "fp8_kv_cast"]
    assert f"{cast.share:.0%} of decode" in f.message and "fp8 -> bf16" in f.message


def test_steps_hint_splits_the_busy_span_when_there_are_no_profiler_steps():
    t = GpuTrace()
    for i in range(4):
        t.op_kernel("aten::mm", "gemm_a", i * 100.0, 50.0, gpu_ts=i * 100.0)
    acc = TraceAccumulator(rank=0)
    for ev in t.events:
        acc.add(ev)
    prof = acc.finish(steps_hint=4)
    assert prof.steps == 4 and prof.step_us == pytest.approx(350.0 / 4)
    assert prof.step_source == "gpu busy span / 4 steps"


def test_reader_window_stays_bounded_on_a_trace_much_bigger_than_its_chunk(tmp_path, monkeypatch):
    """Real traces reach GBs: the text held at once is one chunk plus one event, not the file."""
    import glmserve.profiling.trace as prof

    t = _decode_like(steps=300, layers=4)
    path = t.write(tmp_path / "big-TP-0.trace.json.gz")
    size = len(gzip.decompress(path.read_bytes()))
    chunk = 64 * 1024
    assert size > 20 * chunk
    peak = [0]
    orig_fill = prof._TextWindow._fill

    def fill(self, *args):
        got = orig_fill(self, *args)
        peak[0] = max(peak[0], len(self.buf))
        return got

    orig_init = prof._TextWindow.__init__
    monkeypatch.setattr(prof._TextWindow, "_fill", fill)
    monkeypatch.setattr(
        prof._TextWindow, "__init__",
        lambda self, fh, label, chunk_chars=0: orig_init(self, fh, label, chunk),
    )  # fmt: skip
    profile = summarize_trace(path)
    assert profile.steps == 300 and profile.kernels[0].count == 300 * 4
    assert peak[0] < 2 * chunk


def _json_values():
    from hypothesis import strategies as st

    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(-(10**12), 10**12),
        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
    )  # fmt: skip
    return st.recursive(
        scalars,
        lambda kids: st.one_of(
            st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=6), kids, max_size=4)
        ),
        max_leaves=12,
    )


@pytest.mark.slow
def test_stream_reader_agrees_with_json_loads_for_any_document_and_chunk_size():
    """Property: whatever the values and wherever chunk boundaries fall, same events out."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    import glmserve.profiling.trace as prof

    events = st.lists(st.dictionaries(st.text(max_size=6), _json_values(), max_size=4),
                      max_size=6)  # fmt: skip

    @settings(max_examples=60, deadline=None)
    @given(events=events, meta=st.dictionaries(st.text(max_size=5), _json_values(), max_size=3),
           chunk=st.integers(1, 40), indent=st.sampled_from([None, 0, 2]))  # fmt: skip
    def check(events, meta, chunk, indent):
        doc = {**{k: v for k, v in meta.items() if k != "traceEvents"}, "traceEvents": events}
        text = json.dumps(doc, indent=indent)
        import io as _io

        win = prof._TextWindow(_io.StringIO(text), "mem", chunk_chars=chunk)
        win.expect("{")
        got_events, got_meta = [], {}
        if win.peek() != "}":
            while True:
                key = win.value()
                win.expect(":")
                if key == "traceEvents":
                    got_events = list(prof._array_items(win))
                else:
                    got_meta[key] = win.value()
                if win.expect(",}") == "}":
                    break
        assert got_events == json.loads(text)["traceEvents"]
        assert got_meta == {k: v for k, v in json.loads(text).items() if k != "traceEvents"}

    check()


def test_gathered_cast_is_not_called_a_whole_pool_cast():
    t = GpuTrace()
    t.step(1, 0.0, 1000.0)
    gather = "void at::native::index_elementwise_kernel<128, 4, ...>(long, ...)"
    for i in range(3):
        t.op_kernel("aten::index", gather, i * 300.0, 50.0)
        t.op_kernel("aten::copy_", CAST_KERNEL, i * 300.0 + 60, 100.0,
                    types=["c10::BFloat16", "c10::Float8_e4m3fn"],
                    dims=[[2048, 1, 576], [2048, 1, 576]])  # fmt: skip
    acc = TraceAccumulator(rank=0)
    for ev in t.events:
        acc.add(ev)
    (f,) = [f for f in find_bottlenecks([acc.finish()]) if f.kind == "fp8_kv_cast"]
    assert "gather-then-cast is active" in f.message and "whole KV pool" not in f.message
    assert f.share == pytest.approx(0.3)
