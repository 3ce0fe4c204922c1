"""Reading a run's server.log on its host by byte offset: bounded reads, tails, the whole log."""

from __future__ import annotations

from glmserve.remote.run_host import transport_for_run
from glmserve.remote.transport import READ_CHUNK, Transport, shell_path
from glmserve.store import RunStore


def log_size(t: Transport, path: str) -> int | None:
    """Size of ``path`` on the host now; None when it does not exist (yet)."""
    res = t.run(f"stat -c %s -- {shell_path(path)} 2>/dev/null || echo missing", timeout=30)
    text = res.stdout.strip()
    return int(text) if text.isdigit() else None


def read_log_bytes(t: Transport, path: str, offset: int = 0) -> tuple[bytes, int]:
    """``path`` from ``offset`` up to its size when the call began, and the offset reached.

    Bounded: the size is read once up front, so a log that keeps growing (a busy server) is
    never chased; whatever was written since is the next read's."""
    size = log_size(t, path)
    if size is None:
        return b"", offset
    if size < offset:  # truncated or rotated: start over
        offset = 0
    chunks = []
    while offset < size:
        data, new = t.read_from(path, offset, min(READ_CHUNK, size - offset))
        if new < offset:  # truncated under us: what we have is from the top now
            chunks = []
        if not data:
            break
        chunks.append(data)
        offset = new
    return b"".join(chunks), offset


def read_log_tail(t: Transport, path: str, lines: int) -> tuple[bytes, int]:
    """The last ``lines`` lines of ``path`` (at most) and the file's size (where ``-f`` goes
    on), reading backwards from the end in growing blocks: a 10 GB log costs a few KB."""
    size = log_size(t, path)
    if size is None or lines <= 0:
        return b"", size or 0
    buf, pos, block = b"", size, 64 * 1024
    while pos > 0 and buf.count(b"\n") <= lines:
        start = max(0, pos - block)
        data, _ = t.read_from(path, start, pos - start)
        if not data:
            break
        buf, pos = data + buf, start
        block = min(block * 2, READ_CHUNK)
    if pos > 0:  # the first piece is the end of an earlier line: not one of ours
        buf = buf.split(b"\n", 1)[1] if b"\n" in buf else b""
    kept = buf.splitlines(keepends=True)[-lines:]
    return b"".join(kept), size


def read_run_log(run_id: str) -> str:
    """The whole server.log of a run, from its host (used by ``glmserve diagnose RUN``)."""
    with RunStore.open() as store:
        run = store.get_run(run_id)
    data, _ = read_log_bytes(transport_for_run(run), run.log_path)
    return data.decode("utf-8", "replace")
