"""profiler: review fixes (piecewise replay, rank 0, huge numbers, syntax errors, captures).

Every trace here is synthetic (built in the test); the frame names are the with_stack
python_function names of real SGLang 0.5.9 functions (sglang/srt/model_executor/).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from glmserve.cli import main
from glmserve.errors import TraceFormatError
from glmserve.profiling.accumulate import TraceAccumulator
from glmserve.profiling.analysis import analyze_path, analyze_traces

SRT = "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor"
DECODE_EAGER = f"{SRT}/model_runner.py(2284): forward_decode"
DECODE_GRAPH = f"{SRT}/cuda_graph_runner.py(846): replay"
EXTEND = f"{SRT}/model_runner.py(2307): forward_extend"
PIECEWISE = f"{SRT}/piecewise_cuda_graph_runner.py(689): replay"
VIT = "/x/sglang/srt/multimodal/vit_cuda_graph_runner.py(310): replay"


def _frame(name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": tid,
            "ts": ts, "dur": dur}  # fmt: skip


def _kernel(ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": ts,
            "dur": dur, "args": {"device": 0}}  # fmt: skip


def _profile(events: list[dict]):
    acc = TraceAccumulator(rank=0)
    for ev in events:
        acc.add(ev)
    return acc.finish()


def test_piecewise_replay_inside_forward_extend_is_prefill_not_decode():
    """--enable-piecewise-cuda-graph: model_runner.forward_extend calls
    piecewise_cuda_graph_runner.replay; that is one prefill, not a decode step."""
    events = [
        _frame(EXTEND, 0.0, 500.0),
        _frame(PIECEWISE, 10.0, 480.0),
        _kernel(20.0, 400.0),
        _frame(VIT, 600.0, 50.0, tid=2),
    ]
    for s in range(3):
        t0 = 1000.0 + 100.0 * s
        events += [_frame(DECODE_GRAPH, t0, 50.0), _kernel(t0 + 5, 40.0)]
    prof = _profile(events)
    assert prof.step_source == "forward_decode/replay frames"
    assert prof.steps == 3
    assert "1 prefill (forward_extend) forward(s) left out" in prof.notes


def test_decode_frame_nested_in_forward_extend_is_not_a_step():
    """Whatever runner a replay comes from, inside forward_extend it is prefill work."""
    events = [_frame(EXTEND, 0.0, 500.0), _frame(DECODE_GRAPH, 10.0, 480.0), _kernel(20.0, 400.0)]
    events += [_frame(DECODE_EAGER, 1000.0, 50.0), _kernel(1005.0, 40.0)]
    prof = _profile(events)
    assert prof.steps == 1 and prof.window_us == pytest.approx(50.0)


def _write(path: Path, events: list[dict], metadata: dict | None = None) -> Path:
    path.write_text(json.dumps({"traceEvents": events, **(metadata or {})}))
    return path


def test_distributed_rank_zero_is_a_real_rank(tmp_path):
    """a.json says rank 1, b.json says rank 0: their own ranks win over the file order."""
    for name, rank, dur in (("a.json", 1, 111.0), ("b.json", 0, 222.0)):
        _write(tmp_path / name, [_kernel(0.0, dur)], {"distributedInfo": {"rank": rank}})
    analysis = analyze_traces(sorted(tmp_path.iterdir()))
    assert [(r.rank, Path(r.source).name) for r in analysis.ranks] == [
        (0, "b.json"),
        (1, "a.json"),
    ]


def test_files_without_any_rank_are_numbered_in_order(tmp_path):
    for name in ("x.json", "y.json"):
        _write(tmp_path / name, [_kernel(0.0, 10.0)])
    analysis = analyze_traces(sorted(tmp_path.iterdir()))
    assert [(r.rank, Path(r.source).name) for r in analysis.ranks] == [(0, "x.json"), (1, "y.json")]


@pytest.mark.parametrize("digits", [400, 5000])
def test_huge_integer_timestamp_is_a_one_line_error_exit_2(tmp_path, capsys, digits):
    path = tmp_path / "big.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": '
                    + "9" * digits + ', "dur": 1}]}')  # fmt: skip
    rc = main(["profile", str(path)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "big.json" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_huge_integer_timestamp_among_good_events_is_skipped(tmp_path):
    bad = '{"ph": "X", "cat": "kernel", "name": "k", "ts": ' + "9" * 400 + ', "dur": 1}'
    good = json.dumps(_kernel(0.0, 10.0))
    path = tmp_path / "mixed.json"
    path.write_text('{"traceEvents": [' + good + ", " + bad + "]}")
    (prof,) = analyze_path(path).ranks
    assert prof.gpu_busy_us == pytest.approx(10.0)
    assert any("1 event(s) with missing or unusable ts/dur skipped" in n for n in prof.notes)


def test_syntax_error_before_a_huge_tail_is_the_json_error(tmp_path, monkeypatch):
    """A plain syntax error is not 'one value larger than 64 MiB', however much follows."""
    import glmserve.profiling.trace as prof

    monkeypatch.setattr(prof, "MAX_EVENT_CHARS", 1 << 16)
    path = tmp_path / "bad.json"
    path.write_text('{"traceEvents": [{"ph": "X" "ts": 1}, ' + " " * (1 << 18) + '"x"]}')
    with pytest.raises(TraceFormatError, match=r"bad.json:1: .*Expecting ',' delimiter"):
        analyze_path(path)


def test_directory_with_two_captures_takes_the_newest(tmp_path):
    """Two `glmserve profile` captures of TP=2 in one directory: four files, two per rank."""
    for stamp, dur, mtime in (
        ("1712000000.1", 100.0, 1_000_000),
        ("1712000999.5", 300.0, 2_000_000),
    ):
        for r in (0, 1):
            f = _write(tmp_path / f"{stamp}-TP-{r}.trace.json", [_kernel(0.0, dur)])
            os.utime(f, (mtime, mtime))
    analysis = analyze_path(tmp_path)
    assert [r.rank for r in analysis.ranks] == [0, 1]
    assert all("1712000999.5" in r.source for r in analysis.ranks)
    assert all(r.gpu_busy_us == pytest.approx(300.0) for r in analysis.ranks)
    assert any("1712000000.1" in n and "newest" in n for n in analysis.ranks[0].notes)
