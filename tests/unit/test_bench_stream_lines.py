"""SSE lines are split incrementally: each byte scanned once, however long the line, and a
line past the cap fails the request (issue 20, item 5: one 64 MiB line cost quadratic time,
``buf += raw; buf.find(...)`` per read)."""

from __future__ import annotations

import time

import pytest

from glmserve.bench.client import StreamVerdict, _Lines, expected_tokens, line_cap
from glmserve.bench.workload import build_request


def test_lines_split_across_pieces_and_joined_once():
    lines = _Lines(1 << 20)
    assert lines.feed(b"data: 1\n\nda") == [b"data: 1", b""]
    assert lines.feed(b"ta: ") == []
    assert lines.feed(b"2\r\n: ping\n") == [b"data: 2\r", b": ping"]
    assert lines.parts == [] and lines.size == 0


def test_a_long_line_costs_linear_time():
    """64 MiB in 64 KiB reads: ~0.1 s split incrementally; the old loop copied the growing
    buffer on every read (~32 GB moved)."""
    lines = _Lines(128 << 20)
    piece = b"x" * (64 << 10)
    t0 = time.perf_counter()
    for _ in range(1024):
        assert lines.feed(piece) == []
    assert lines.feed(b"\n") == [b"x" * (64 << 20)]
    assert time.perf_counter() - t0 < 5.0


def test_a_line_past_the_cap_fails_with_the_reason():
    lines = _Lines(1 << 20)
    lines.feed(b"data: " + b"x" * (1 << 19))
    with pytest.raises(StreamVerdict, match="longer than 1 MiB without a newline"):
        lines.feed(b"x" * (1 << 19))
    with pytest.raises(StreamVerdict, match="longer than 1 MiB"):
        _Lines(1 << 20).feed(b"x" * (2 << 20) + b"\n")


@pytest.mark.parametrize("api", ["native", "openai", "chat"])
def test_the_cap_grows_with_the_tokens_asked(api):
    """Native chunks are cumulative: a long reply's last line is long, and still fits."""
    n = expected_tokens(build_request(api, [1, 2, 3], 100_000, "m"))
    assert n == 100_000
    assert line_cap(n) > 100_000 * 60 + (4 << 20) - 1
