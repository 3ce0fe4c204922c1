"""stdout and stderr watched for the length of one command: a write that fails is its outcome.

A full disk (``glmserve results > /dev/full``: ENOSPC) or a dead device (EIO) made a write raise
OSError deep inside rich or a verb, and the CLI called that a glmserve bug (exit 70), or the
interpreter did at exit for output still buffered (``Exception ignored ...``, exit 120).
``cli.main`` runs the command inside ``WatchedStreams``: the first OSError a write or flush
raises is noted (and still raised, so the verb stops where it was), buffered output is flushed
before ``main`` returns, and ``main`` then says ``error: cannot write output: ...`` (exit 74).

EPIPE (``| head`` closed the pipe) stays as click has it: exit 1, not a word. A stream that
failed is pointed at /dev/null on the way out, so the interpreter's own last flush of what is
still buffered cannot fail again.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from typing import Any


class _Watched:
    """One std stream: every call passes through; an OSError of write or flush is noted."""

    def __init__(self, stream: Any, name: str, watch: WatchedStreams) -> None:
        self._stream, self._name, self._watch = stream, name, watch

    def write(self, text: Any) -> Any:
        return self._call(self._stream.write, text)

    def writelines(self, lines: Any) -> Any:
        return self._call(self._stream.writelines, lines)

    def flush(self) -> Any:
        return self._call(self._stream.flush)

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except OSError as exc:
            self._watch.note(self._name, exc)
            raise

    def __getattr__(self, attr: str) -> Any:  # isatty, fileno, encoding, buffer, ...
        return getattr(self._stream, attr)


class _Closed(io.TextIOBase):
    """stdout whose fd was closed before start (Python makes ``sys.stdout`` None)."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))


class WatchedStreams:
    """``with WatchedStreams() as streams:`` replaces ``sys.stdout``/``sys.stderr`` by
    watched ones and puts the originals back on the way out.

    ``failure`` is the first write that failed with anything but EPIPE, as ``(stream name,
    OSError)``, while ``noting`` (``main`` stops noting once the outcome is decided: a full
    stderr that cannot take the final error line does not change the status);
    ``broken_pipe`` says a write met EPIPE."""

    def __init__(self) -> None:
        self.failure: tuple[str, OSError] | None = None
        self.broken_pipe = False
        self.noting = True
        self._failed: set[str] = set()
        self._saved: dict[str, Any] = {}

    def note(self, name: str, exc: OSError) -> None:
        self._failed.add(name)
        if isinstance(exc, BrokenPipeError):
            self.broken_pipe = True
        elif self.noting and self.failure is None:
            self.failure = (name, exc)

    def flush(self) -> None:
        """Write out what is still buffered, now rather than at interpreter exit; a failure
        is noted, not raised."""
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if isinstance(stream, _Watched) and stream._watch is self:
                with contextlib.suppress(OSError, ValueError):  # ValueError: closed
                    stream.flush()

    def __enter__(self) -> WatchedStreams:
        for name in ("stdout", "stderr"):
            stream = self._saved[name] = getattr(sys, name)
            if stream is None and name == "stdout":  # `>&-`: the data would vanish unsaid
                stream = _Closed()
            if stream is not None:  # a closed stderr: chatter and errors unsaid, as before
                setattr(sys, name, _Watched(stream, name, self))
        return self

    def __exit__(self, *exc_info: object) -> None:
        for name, stream in self._saved.items():
            setattr(sys, name, stream)  # also drops click's EPIPE wrapper around ours
            real = getattr(sys, f"__{name}__", None)  # not a test's capture
            if name in self._failed and real is not None and stream is real:
                _discard_further_output(stream)


def _discard_further_output(stream: Any) -> None:
    """Point the process's own stdout/stderr at /dev/null: what is still buffered is lost
    anyway, and the interpreter flushes it at exit (a second failure: exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError):
        pass
