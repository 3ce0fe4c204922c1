"""profiler input guards (issue 11 #10): a trace nested 200k levels deep and a gzip bomb are
each one line naming the file, exit 2, in seconds; real traces still read.

The hostile files are generated here. The bomb is a multi-member gzip file (a member of
1 MiB of blanks, ~1 KiB compressed, repeated): a valid 1 GiB stream written in milliseconds.
"""

from __future__ import annotations

import gzip
import re
import time
from pathlib import Path

import pytest

import glmserve.profiling.trace as prof
from glmserve.cli import main
from glmserve.errors import TraceFormatError
from glmserve.profiling.analysis import analyze_path
from glmserve.profiling.trace import iter_trace

TRACES = Path(__file__).parent.parent / "data" / "traces"
DEEP = 200_000


def _profile_cli(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, float]:
    start = time.monotonic()
    rc = main(["profile", str(path)])
    return int(rc), capsys.readouterr().err, time.monotonic() - start


def _member(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def _bomb(path: Path, head: bytes, fill: bytes, mib: int, tail: bytes) -> Path:
    """``head`` + ``mib`` MiB of ``fill`` + ``tail`` as a gzip file of about ``mib`` KiB."""
    block = _member(fill * ((1 << 20) // len(fill)))
    with path.open("wb") as fh:
        fh.write(_member(head))
        for _ in range(mib):
            fh.write(block)
        fh.write(_member(tail))
    return path


@pytest.mark.parametrize(
    "text",
    [
        '{"traceEvents": ' + "[" * DEEP + "]" * DEEP + "}",  # the file
        '{"traceEvents": [' + '{"a":' * DEEP + "1" + "}" * DEEP + "]}",
        '{"deviceProperties": ' + "[" * DEEP + "]" * DEEP + ', "traceEvents": []}',
        "[" * DEEP,  # bare array form, never closed
    ],
    ids=["arrays", "objects", "metadata", "bare-unclosed"],
)
def test_deeply_nested_trace_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    path = tmp_path / "deep.trace.json"
    path.write_text(text)
    code, err, elapsed = _profile_cli(capsys, path)
    assert code == 2, err  # was 70: RecursionError out of the JSON decoder
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert re.search(r"deep\.trace\.json:1: not a Chrome trace: JSON nested deeper", err), err
    assert elapsed < 30  # milliseconds in fact; generous for a loaded machine


def test_deep_nesting_is_a_format_error_for_the_streaming_reader(tmp_path: Path) -> None:
    path = tmp_path / "deep.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [{}, ' + b"[" * DEEP + b"]" * DEEP + b"]}"))
    with pytest.raises(TraceFormatError, match="nested deeper"):
        list(iter_trace(path))


@pytest.mark.parametrize(
    ("head", "fill", "tail"),
    [
        (b'{"traceEvents": [', b" ", b"]}"),  # valid JSON: blanks between the brackets
        (b'{"traceEvents": [{"name": "', b"a", b'"}]}'),  # one 1 GiB string
    ],
    ids=["blanks", "string"],
)
def test_one_gib_gzip_bomb_is_refused_in_seconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], head: bytes, fill: bytes, tail: bytes
) -> None:
    bomb = _bomb(tmp_path / "bomb.trace.json.gz", head, fill, 1024, tail)
    assert bomb.stat().st_size < 2 << 20
    code, err, elapsed = _profile_cli(capsys, bomb)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1
    assert "bomb.trace.json.gz: not a Chrome trace: its gzip stream expands more than" in err
    # bytes read: refused once past the floor, not after inflating the whole GiB
    inflated_mib = int(re.search(r"\((\d+) MiB from", err).group(1))  # type: ignore[union-attr]
    assert inflated_mib <= (prof.MAX_GZIP_FLOOR >> 20) + 8
    assert elapsed < 30  # about a second here; the old reader took 50-90 s


def test_real_traces_are_far_below_the_ratio_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the floor at zero every read is checked: real torch-profiler traces (13-18x)
    still decode, so the cap refuses only what no profiler writes."""
    monkeypatch.setattr(prof, "MAX_GZIP_FLOOR", 0, raising=False)
    for path in sorted(TRACES.rglob("*.trace.json.gz")):
        assert sum(1 for _ in iter_trace(path)) > 100, path
    assert analyze_path(TRACES / "h200_decode_like.trace.json.gz").ranks


@pytest.mark.slow
def test_a_gib_of_blanks_below_the_cap_is_read_in_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blanks are skipped by the regex engine, not a Python loop per character: even with
    the ratio cap out of the way a GiB of padding is seconds of work (was 50-90 s)."""
    monkeypatch.setattr(prof, "MAX_GZIP_RATIO", 1 << 30, raising=False)
    bomb = _bomb(tmp_path / "pad.json.gz", b'{"traceEvents": [{"ph": "i"}', b" \n", 1024, b"]}")
    start = time.monotonic()
    events = list(iter_trace(bomb))
    assert events == [{"ph": "i"}]
    assert time.monotonic() - start < 30
