"""SGLang-format log output: ``[YYYY-mm-dd HH:MM:SS TPn] msg`` (launcher lines without TPn).

SGLang configures Python logging with ``[%(asctime)s{prefix}] %(message)s`` and datefmt
``%Y-%m-%d %H:%M:%S``, where prefix is `` TP{rank}`` in scheduler processes and empty in the
launcher / tokenizer manager; logging writes to stderr. uvicorn's access log goes through the
same formatter in 0.5.x (``[ts] INFO:     127.0.0.1:5555 - "POST /generate HTTP/1.1" 200 OK``).
tqdm progress bars (weights, graph capture) are printed by rank 0 to stderr.
"""

from __future__ import annotations

import sys
import time
import traceback
from typing import TextIO


def stamp(now: float | None = None) -> str:
    return time.strftime(
        "%Y-%m-%d %H:%M:%S", time.localtime(now if now is not None else time.time())
    )


def format_line(msg: str, tp: int | None = None, now: float | None = None) -> str:
    """One SGLang log line (no trailing newline)."""
    prefix = f" TP{tp}" if tp is not None else ""
    return f"[{stamp(now)}{prefix}] {msg}"


def progress_bar(desc: str, done: int, total: int, elapsed: float, unit: str = "it") -> str:
    """A tqdm-like bar as SGLang's loaders print it (safetensors shards, graph capture)."""
    pct = int(100 * done / total) if total else 100
    width = 30
    filled = int(width * done / total) if total else width
    bar = "█" * filled + " " * (width - filled)
    rate = done / elapsed if elapsed > 0 else 0.0
    el = time.strftime("%M:%S", time.gmtime(elapsed))
    remaining = (total - done) / rate if rate > 0 else 0.0
    rem = time.strftime("%M:%S", time.gmtime(remaining)) if rate > 0 else "?"
    rate_s = f"{rate:.2f}{unit}/s" if rate > 0 else f"?{unit}/s"
    return (
        f"{desc}: {pct:3d}% Completed | {done}/{total} [{el}<{rem}, {rate_s}]"
        if (desc.startswith("Loading"))
        else f"{desc}: {pct:3d}%|{bar}| {done}/{total} [{el}<{rem}, {rate_s}]"
    )


class ServerLog:
    """Writes log lines the way SGLang's processes do: each line flushed at once.

    A line that cannot be written (the log's disk full, a closed pipe) is dropped and the
    server goes on, as SGLang's logging does: ``logging.StreamHandler.emit`` catches the
    write's exception and calls ``Handler.handleError``, which tries to print
    ``--- Logging error ---`` and the traceback to stderr and swallows the OSError of that
    write too (CPython 3.11 ``Lib/logging/__init__.py``: emit 1109-1118, handleError
    1028-1059, ``except OSError: pass  # see issue 5971``). Raising here instead turned an
    access-log line into a 500 head written into an open 200 stream.
    """

    def __init__(self, err: TextIO | None = None, out: TextIO | None = None) -> None:
        self.err = err or sys.stderr
        self.out = out or sys.stdout

    def _emit(self, text: str) -> None:
        try:
            self.err.write(text)
            self.err.flush()
        except OSError:
            _handle_error(self.err)

    def line(self, msg: str, tp: int | None = None) -> None:
        self._emit(format_line(msg, tp) + "\n")

    def ranks(self, msg: str, tp_size: int) -> None:
        """The same message from every TP rank (as each scheduler process logs it)."""
        for r in range(tp_size):
            self.line(msg, r)

    def raw(self, text: str) -> None:
        """Unprefixed text (tracebacks continue without a prefix, tqdm bars, NCCL lines)."""
        self._emit(text if text.endswith("\n") else text + "\n")

    def access(self, client: str, method: str, path: str, status: int) -> None:
        phrase = _PHRASES.get(status, "")
        self.line(f'INFO:     {client} - "{method} {path} HTTP/1.1" {status} {phrase}'.rstrip())


def _handle_error(stream: TextIO) -> None:
    """``logging.Handler.handleError`` with ``raiseExceptions`` on (SGLang's case): report the
    failed write on the same stream, and give up silently when that fails too."""
    try:
        stream.write("--- Logging error ---\n")
        traceback.print_exc(file=stream)
        stream.flush()
    except OSError:
        pass


_PHRASES = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    422: "Unprocessable Entity",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
