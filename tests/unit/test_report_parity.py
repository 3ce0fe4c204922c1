"""Issue 14 #5, pure parts: consistent tick labels, flag maps, the flag diff."""

from __future__ import annotations

from glmserve.report import ReportSeries, flag_diff, flag_map, tick_labels


def test_tick_labels_share_their_decimals():
    assert tick_labels(2.5) == ["0.000", "0.625", "1.250", "1.875", "2.500"]
    assert tick_labels(20.0) == ["0", "5", "10", "15", "20"]
    assert tick_labels(2.0) == ["0.0", "0.5", "1.0", "1.5", "2.0"]
    assert tick_labels(5000.0) == ["0", "1,250", "2,500", "3,750", "5,000"]


def test_flag_map_and_diff():
    assert flag_map(["python", "-m", "x", "--a", "1", "--b", "--c=3"]) == {
        "--a": "1", "--b": "(set)", "--c": "3"}  # fmt: skip
    s1 = ReportSeries("one", "ok", argv=["--tp-size", "8", "--x", "1"])
    s2 = ReportSeries("two", "ok", argv=["--tp-size", "8", "--x", "2", "--y"])
    s3 = ReportSeries("three", "ok")  # argv unknown: left out
    differing, maps = flag_diff([s1, s2, s3])
    assert differing == ["--x", "--y"]
    assert list(maps) == ["one", "two"]
