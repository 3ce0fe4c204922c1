"""Whole logs: lines, text, or a byte stream read in bounded memory."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from glmserve.diagnose.diagnoser import LogDiagnoser
from glmserve.diagnose.model import Diagnosis
from glmserve.diagnose.patterns import MAX_ARGS_LINE_CHARS


def diagnose_lines(lines: Iterable[str]) -> Diagnosis:
    """Diagnose a whole log given as lines (without or with trailing newlines)."""
    d = LogDiagnoser()
    for line in lines:
        d.feed(line)
    return d.diagnosis


def diagnose_text(text: str) -> Diagnosis:
    """Diagnose a whole log. Lines are split on ``\\n`` only (``\\r`` is a tqdm redraw)."""
    return diagnose_stream([text.encode("utf-8", "surrogatepass")])


# A line longer than this is cut when read (only its first MAX_LINE_CHARS characters, or
# MAX_ARGS_LINE_CHARS of a server_args line, are ever matched), so memory stays bounded.
MAX_LINE_BYTES = 4 * MAX_ARGS_LINE_CHARS


def iter_line_blocks(
    chunks: Iterable[bytes], max_line: int = MAX_LINE_BYTES
) -> Iterator[list[bytes]]:
    """The complete lines of a byte stream, one block per chunk, without their ``\\n``.

    Holds at most one chunk plus ``max_line`` bytes: a line longer than ``max_line`` keeps its
    first ``max_line`` bytes and the rest is skipped up to its newline. A last line without a
    newline is still a line; a trailing newline does not start an empty one."""
    head = b""  # the start of a line whose newline has not been read yet
    cut = False  # head reached max_line: skip bytes until the newline
    for chunk in chunks:
        parts = chunk.split(b"\n")
        tail = parts.pop()
        if parts:
            parts[0] = head if cut else (head + parts[0])[:max_line]
            if max(map(len, parts)) > max_line:
                parts = [p[:max_line] for p in parts]
            yield parts
            head, cut = b"", False
        if not cut:
            head += tail
            if len(head) > max_line:
                head, cut = head[:max_line], True
    if head:
        yield [head]


def diagnose_stream(chunks: Iterable[bytes], evidence_within: int | None = None) -> Diagnosis:
    """Diagnose a log read as byte chunks (a file, stdin) in memory bounded by the chunk size,
    whatever the log's size (``glmserve diagnose`` of a file or stdin).

    With ``evidence_within``, stop reading once that many bytes have gone by without one SGLang
    line (``sglang_log`` stays False): a server prints its ``server_args`` line first, so input
    whose first megabytes hold none is no server log, and reading the rest (200 MB of random
    bytes takes ~24 s on a small box) only delays the refusal."""
    d = LogDiagnoser()

    def counted() -> Iterator[bytes]:
        """The chunks, until the limit passes without evidence (checked per chunk, not per
        line: junk may hold no newline at all)."""
        read, it = 0, iter(chunks)
        while evidence_within is None or read < evidence_within or d._evidence:
            chunk = next(it, None)
            if chunk is None:
                return
            read += len(chunk)
            yield chunk

    for block in iter_line_blocks(counted()):
        d.feed_block(block)
    return d.diagnosis
