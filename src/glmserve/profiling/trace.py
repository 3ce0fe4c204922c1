"""Stream the events of a torch-profiler Chrome trace, refusing what is not one.

SGLang's ``/start_profile`` writes one ``{id}-TP-{rank}.trace.json.gz`` per rank; on a real
GLM-5 server each one reaches gigabytes, so the file is never loaded whole: ``iter_trace``
decodes the ``traceEvents`` array one event at a time (C ``raw_decode`` over a sliding text
buffer, gz or plain). The file may also be hostile (any path the user names), so every way a
document can make the reader hold or inflate too much is bounded and becomes one
``TraceFormatError`` naming file:line: one value larger than MAX_EVENT_CHARS, JSON nested past
the decoder's recursion limit, numbers of thousands of digits, a gzip stream expanding more than
MAX_GZIP_RATIO times (a gzip bomb), corrupt or truncated compression.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from glmserve.errors import TraceFormatError

MAX_EVENT_CHARS = 64 << 20  # one JSON value larger than this is not a trace event
# torch-profiler traces gzip 10-20x (the test traces: 13-18x); deflate tops out near 1000x,
# which only runs of one character reach. Past MAX_GZIP_FLOOR of output, a stream expanding
# more than MAX_GZIP_RATIO times what was read of the file is refused as a gzip bomb, after
# a few MiB read rather than after inflating gigabytes.
MAX_GZIP_RATIO = 100
MAX_GZIP_FLOOR = 64 << 20
# A value cut by the buffer's end fails within a few characters of it ("tru", "1.", "-Inf"),
# or as "Unterminated string starting at" its start; an error further back is in the text.
_CUT_MARGIN = 256
_WS = " \t\r\n"
_WS_RUN = re.compile(r"[ \t\r\n]*")
_DELIMS = _WS + ",]}:"


class _TextWindow:
    """A sliding window over a text stream: decode JSON values without holding the file."""

    def __init__(self, fh: TextIO, label: str, chunk_chars: int = 1 << 20) -> None:
        self._fh = fh
        self._label = label
        self._chunk = chunk_chars
        self._decoder = json.JSONDecoder(strict=False)
        self.buf = ""
        self.pos = 0
        self.eof = False
        self._dropped_lines = 0

    def _fill(self, at_least: int = 0) -> bool:
        """Read the next chunk (``at_least`` characters when a value longer than a chunk is
        still open: its reads double, so re-decoding it costs linear, not quadratic, time)."""
        try:
            data = self._fh.read(max(self._chunk, at_least))
        except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
            why = "truncated" if isinstance(exc, EOFError) else "corrupt"
            line = self.line_at(len(self.buf))
            raise TraceFormatError(
                f"{self._label}:{line}: {why} compressed stream ({exc})"
            ) from exc
        if not data:
            self.eof = True
            return False
        self._dropped_lines += self.buf.count("\n", 0, self.pos)
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    def line_at(self, pos: int) -> int:
        return self._dropped_lines + self.buf.count("\n", 0, pos) + 1

    def fail(self, what: str, pos: int | None = None) -> TraceFormatError:
        line = self.line_at(self.pos if pos is None else pos)
        return TraceFormatError(f"{self._label}:{line}: not a Chrome trace: {what}")

    def peek(self) -> str:
        """Next non-blank character ('' at end of file), without consuming it. Blanks are
        skipped by the regex engine: gigabytes of padding cost seconds, not minutes."""
        while True:
            self.pos = _WS_RUN.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if self.eof or not self._fill():
                return ""

    def expect(self, chars: str) -> str:
        ch = self.peek()
        if not ch or ch not in chars:
            shown = repr(ch) if ch else "end of file"
            raise self.fail(f"expected one of {chars!r}, found {shown}")
        self.pos += 1
        return ch

    def open_container(self, brackets: str) -> bool:
        """Consume the opening bracket of ``brackets`` ("{}" or "[]"); False, with the
        closing one consumed too, when the container is empty."""
        self.expect(brackets[0])
        if self.peek() == brackets[1]:
            self.pos += 1
            return False
        return True

    def value(self) -> Any:
        """Decode the next JSON value, reading more text until it is complete."""
        self.peek()
        while True:
            try:
                obj, end = self._decoder.raw_decode(self.buf, self.pos)
            except RecursionError as exc:
                # The C decoder guards its recursion with the interpreter's limit (about 1000
                # levels); a trace event nests 3 or 4. Past it nothing is decoded or kept.
                raise self.fail(
                    "JSON nested deeper than the decoder's limit (about "
                    f"{sys.getrecursionlimit()} levels; a trace event nests 3 or 4)"
                ) from exc
            except ValueError as exc:
                if not isinstance(exc, json.JSONDecodeError):
                    # int() refuses a number of more than sys.get_int_max_str_digits() digits
                    limit = sys.get_int_max_str_digits()
                    raise self.fail(f"a number of more than {limit} digits") from exc
                if _is_syntax_error(exc, len(self.buf)):
                    raise self.fail(exc.msg, exc.pos) from exc
                if len(self.buf) - self.pos > MAX_EVENT_CHARS:
                    raise self.fail(
                        f"one value is larger than {MAX_EVENT_CHARS >> 20} MiB"
                    ) from exc
                if self.eof or not self._fill(len(self.buf) - self.pos):
                    raise self.fail(exc.msg, exc.pos) from exc
                continue
            # A number cut by the buffer's end decodes "successfully" as its prefix ("0" of
            # "0.5"): accept it only once the character after it is a delimiter.
            cut = end == len(self.buf) or self.buf[end] not in _DELIMS
            if cut and not self.eof and self._fill():
                continue
            self.pos = end
            return obj


def _is_syntax_error(exc: json.JSONDecodeError, buf_len: int) -> bool:
    """The JSON is wrong whatever follows (so reading on, up to MAX_EVENT_CHARS, is waste and
    "one value is larger than 64 MiB" would be the wrong message)."""
    return not exc.msg.startswith("Unterminated") and exc.pos < buf_len - _CUT_MARGIN


@dataclass
class TraceFile:
    """Events of one trace file, streamed; ``metadata`` fills as the file is read."""

    path: Path
    metadata: dict[str, Any] = field(default_factory=dict)
    has_event_array: bool = False  # a traceEvents array (or a bare array) was found

    def events(self) -> Iterator[dict[str, Any]]:
        """Yield every event; raises TraceFormatError (file:line) on anything not a trace."""
        with _open_text(self.path) as fh:
            win = _TextWindow(fh, str(self.path))
            first = win.peek()
            if first == "":
                raise TraceFormatError(f"{self.path}: not a Chrome trace: the file is empty")
            if first == "[":  # Chrome's bare "JSON array format"
                self.has_event_array = True
                yield from _array_items(win)
                return
            if not win.open_container("{}"):
                return
            while True:
                key = win.value()
                if not isinstance(key, str):
                    raise win.fail("object key is not a string")
                win.expect(":")
                if key == "traceEvents":
                    self.has_event_array = True
                    yield from _array_items(win)
                else:
                    self.metadata[key] = win.value()
                if win.expect(",}") == "}":
                    break
            if win.peek():
                raise win.fail("text after the end of the trace object")


def _array_items(win: _TextWindow) -> Iterator[dict[str, Any]]:
    if not win.open_container("[]"):
        return
    while True:
        item = win.value()
        if isinstance(item, dict):
            yield item
        if win.expect(",]") == "]":
            return


class _BoundedGunzip(io.RawIOBase):
    """The decompressed bytes of a ``.gz`` trace, refused (TraceFormatError) as soon as they
    outgrow what was read of the file by more than MAX_GZIP_RATIO (past MAX_GZIP_FLOOR):
    the check runs on every read, so a bomb stops after MiBs of output, not GiBs."""

    def __init__(self, raw: BinaryIO, path: Path) -> None:
        self._raw = raw
        self._gz = gzip.GzipFile(fileobj=raw, mode="rb")
        self._path = path
        self.produced = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        # at most a MiB per call, so one large read cannot inflate far past the check
        n = self._gz.readinto(memoryview(buffer)[: 1 << 20])
        self.produced += n
        consumed = max(self._raw.tell(), 1)
        if self.produced > MAX_GZIP_FLOOR and self.produced > MAX_GZIP_RATIO * consumed:
            raise TraceFormatError(
                f"{self._path}: not a Chrome trace: its gzip stream expands more than "
                f"{MAX_GZIP_RATIO}x ({self.produced >> 20} MiB from the first "
                f"{max(consumed >> 10, 1)} KiB); a profiler trace compresses 10-20x "
                "(a gzip bomb?)"
            )
        return n

    def close(self) -> None:
        if not self.closed:
            self._gz.close()
            self._raw.close()
        super().close()


def _open_text(path: Path) -> TextIO:
    try:
        raw = path.open("rb")
        magic = raw.read(2)
        raw.seek(0)
    except OSError as exc:  # missing, a directory, unreadable
        raise TraceFormatError(f"{path}: cannot read trace: {exc.strerror or exc}") from exc
    binary: Any = io.BufferedReader(_BoundedGunzip(raw, path)) if magic == b"\x1f\x8b" else raw
    return io.TextIOWrapper(binary, encoding="utf-8", errors="replace")


def iter_trace(path: str | Path) -> Iterator[dict[str, Any]]:
    """Stream the events of a Chrome trace (``.json`` or ``.json.gz``), one dict at a time."""
    return TraceFile(Path(path)).events()
