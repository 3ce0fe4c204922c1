"""``glmserve profile PATH`` on trace events with garbage times (issue 20, item 13): a string
``ts``, a null, missing or negative ``dur``, 1e308. Such an event is skipped and counted in a
``note:``; the shares come from the usable events and are never NaN; a trace with no usable
event is exit 2 with one line."""

from __future__ import annotations

import json
import math

import pytest

GOOD = [
    {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 1000 + i * 100, "dur": 50, "pid": 0,
     "tid": 1}
    for i in range(5)
]
GARBAGE = [
    {"ph": "X", "cat": "kernel", "name": "weird", "ts": "abc", "dur": 5, "pid": 0, "tid": 1},
    {"ph": "X", "cat": "kernel", "name": "weird", "ts": 1000, "dur": None, "pid": 0, "tid": 1},
    {"ph": "X", "cat": "kernel", "name": "weird", "ts": 1000, "pid": 0, "tid": 1},
    {"ph": "X", "cat": "kernel", "name": "weird", "ts": 1000, "dur": -5, "pid": 0, "tid": 1},
    {"ph": "X", "cat": "kernel", "name": "weird", "ts": 1e308, "dur": 1e308, "pid": 0, "tid": 1},
    {"ph": "X", "cat": "kernel", "name": "weird", "ts": 1100, "dur": 1e308, "pid": 0, "tid": 1},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": -1e300, "dur": 3, "pid": 0, "tid": 2},
]


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    from glmserve.cli import main

    rc = main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _trace(tmp_path, events) -> str:
    path = tmp_path / "r-TP-0.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def test_garbage_events_are_skipped_counted_and_never_nan(tmp_path, capsys):
    path = _trace(tmp_path, GOOD + GARBAGE)
    rc, out, err = _cli(capsys, "profile", path)
    assert rc == 0, err
    text = out + err
    assert "nan" not in text.lower() and "inf ms" not in text
    assert f"note: {len(GARBAGE)} event(s) with missing or unusable ts/dur skipped" in text
    assert "weird" not in text  # nothing of a skipped event is reported
    # the five 50 us kernels over a 450 us span: 55.6% busy, 44% idle
    assert "GPU busy 56%" in text and "idle 44%" in text

    rc, out, _ = _cli(capsys, "profile", path, "--json")
    data = json.loads(out)
    rank = data["ranks"][0]
    assert math.isclose(rank["window_us"], 450.0)
    assert [k["name"] for k in rank["kernels"]] == ["gemm"]
    assert all(math.isfinite(f["share"]) for f in data["findings"])


@pytest.mark.parametrize("events", [GARBAGE, GARBAGE[4:5]], ids=["all-garbage", "only-1e308"])
def test_a_trace_with_no_usable_event_is_exit_2(tmp_path, capsys, events):
    path = _trace(tmp_path, events)
    rc, out, err = _cli(capsys, "profile", path)
    assert rc == 2, out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and path in lines[0], err
    assert f"{len(events)} event(s) skipped" in lines[0]
    assert "nan" not in (out + err).lower()


def test_numeric_strings_and_a_begin_end_pair_still_count(tmp_path, capsys):
    """What some exporters write is not garbage: a quoted number, a B/E pair."""
    events = [
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": "1000", "dur": "50", "pid": 0},
        {"ph": "B", "cat": "kernel", "name": "gemm", "ts": 1100, "pid": 0, "tid": 1},
        {"ph": "E", "cat": "kernel", "name": "gemm", "ts": 1150, "pid": 0, "tid": 1},
    ]
    rc, out, err = _cli(capsys, "profile", _trace(tmp_path, events), "--json")
    assert rc == 0, err
    rank = json.loads(out)["ranks"][0]
    assert rank["kernels"][0]["count"] == 2 and not any("skipped" in n for n in rank["notes"])
