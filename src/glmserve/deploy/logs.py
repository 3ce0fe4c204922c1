"""Reading a deployment's server logs: what is there, then (following) what is appended.

One run's log is passed through as it is (bytes as they come, a partial last line too); a host
group's logs are split into lines, each prefixed with its node, so a line written in two
chunks is never cut by another node's line. Both read by byte offset over the run's transport
and end when the server's processes are gone. A log that is not there at all (deleted) is an
error naming it, never read as an empty one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from glmserve.store import RunRecord

if TYPE_CHECKING:
    from glmserve.remote.transport import Transport

Note = Callable[[str], None]


def check_log_exists(t: Transport, run: RunRecord) -> None:
    """Raise RunLogMissing naming the file when ``run``'s server.log is not on its host.

    Asked only after a read came back empty, so a log with text costs no extra round trip;
    without it a deleted log reads as an empty one (nothing printed, exit 0)."""
    from glmserve.errors import RunLogMissing
    from glmserve.remote.runlog import log_size

    if log_size(t, run.log_path) is None:
        raise RunLogMissing(
            f"run {run.run_id}: no log file {run.host}:{run.log_path} (deleted, or the run "
            "never started)"
        )


def node_prefix(run: RunRecord) -> str:
    """``[node1 hostb] ``: which node a log line came from."""
    return f"[node{run.meta.get('node_rank', '?')} {run.host}] "


class RunLog:
    """One run's server.log as text: ``initial``, then ``poll`` until its server has ended."""

    def __init__(self, run: RunRecord, note: Note = lambda _m: None) -> None:
        from glmserve.remote.run_host import transport_for_run

        self.run = run
        self.note = note
        self.t = transport_for_run(run)
        self.offset = 0
        self.done = False
        self.last_check = 0.0

    @property
    def end_note(self) -> str:
        return f"run {self.run.run_id} is no longer running"

    def initial(self, last: int | None = None, follow: bool = False) -> str:
        """The log so far (its last ``last`` lines: only the tail is read, however big)."""
        from glmserve.remote.runlog import read_log_bytes, read_log_tail

        if last is not None:
            data, self.offset = read_log_tail(self.t, self.run.log_path, last)
        else:
            data, self.offset = read_log_bytes(self.t, self.run.log_path)
        if not data:
            check_log_exists(self.t, self.run)
        return data.decode("utf-8", "replace")

    def poll(self, check_every_s: float = 2.0) -> str:
        """What was appended; when nothing was and the server is gone, the rest, and done."""
        from glmserve.errors import TransportError
        from glmserve.remote.process import run_ownership
        from glmserve.remote.runlog import read_log_bytes

        run = self.run
        try:
            data, new = self.t.read_from(run.log_path, self.offset)
            self.offset = new
            now = time.monotonic()
            if data or now - self.last_check <= check_every_s:
                return data.decode("utf-8", "replace")
            self.last_check = now
            if run_ownership(self.t, run).alive:
                return ""
            data, self.offset = read_log_bytes(self.t, run.log_path, self.offset)
            self.done = True
            return data.decode("utf-8", "replace")
        except TransportError as exc:
            self.note(f"connection lost: {exc}; retrying at byte {self.offset}")
            return ""


class GroupLogs:
    """Every node's server.log as prefixed lines: the existing text, then (``poll``) what is
    appended, until every node's server has ended.

    Lines are split per node so a line written in two chunks is never cut by another node's
    line; a last line without its newline is printed when its node's server ends.
    """

    def __init__(self, runs: list[RunRecord], note: Note = lambda _m: None):
        from glmserve.deploy.watch import LineSplitter
        from glmserve.remote.run_host import transport_for_run

        self.runs = runs
        self.note = note
        self.transports = [transport_for_run(r) for r in runs]
        self.offsets = [0] * len(runs)
        self.splitters = [LineSplitter() for _ in runs]
        self.ended = [False] * len(runs)
        self.last_check = [0.0] * len(runs)

    @property
    def done(self) -> bool:
        return all(self.ended)

    def initial(self, last: int | None = None, follow: bool = False) -> list[str]:
        """What every node has logged so far (its last ``last`` lines), node by node. When
        following, an unterminated last line waits for its end (``poll``) instead."""
        from glmserve.remote.runlog import read_log_bytes, read_log_tail

        out: list[str] = []
        for i, run in enumerate(self.runs):
            t = self.transports[i]
            if last is not None:  # only the tail is read, however big the log
                data, self.offsets[i] = read_log_tail(t, run.log_path, last)
            else:
                data, self.offsets[i] = read_log_bytes(t, run.log_path)
            if not data:
                check_log_exists(t, run)
            lines = self.splitters[i].feed(data)
            partial = "" if follow else self.splitters[i].partial.decode("utf-8", "replace")
            shown = [*lines, partial] if partial else lines
            if last is not None:
                shown = shown[-last:] if last > 0 else []
            out += [node_prefix(run) + ln for ln in shown]
        return out

    def poll(self, check_every_s: float = 2.0) -> list[str]:
        """New complete lines of every live node; a node whose server ended (seen when it
        had nothing new) gives its rest and is done."""
        from glmserve.errors import TransportError
        from glmserve.remote.process import run_ownership
        from glmserve.remote.runlog import read_log_bytes

        out: list[str] = []
        for i, run in enumerate(self.runs):
            if self.ended[i]:
                continue
            t, pre = self.transports[i], node_prefix(run)
            try:
                data, self.offsets[i] = t.read_from(run.log_path, self.offsets[i])
                out += [pre + ln for ln in self.splitters[i].feed(data)]
                now = time.monotonic()
                if data or now - self.last_check[i] < check_every_s:
                    continue
                self.last_check[i] = now
                if run_ownership(t, run).alive:
                    continue
                data, self.offsets[i] = read_log_bytes(t, run.log_path, self.offsets[i])
                lines = self.splitters[i].feed(data) + self.splitters[i].flush()
                out += [pre + ln for ln in lines]
                self.ended[i] = True
                self.note(f"{pre.strip()} run {run.run_id} is no longer running")
            except TransportError as exc:
                self.note(
                    f"{pre.strip()} connection lost: {exc}; retrying at byte {self.offsets[i]}"
                )
        return out


class GroupLogText:
    """:class:`GroupLogs` as text, the shape :class:`RunLog` gives: one newline per line."""

    def __init__(self, runs: list[RunRecord], note: Note = lambda _m: None) -> None:
        self.lines = GroupLogs(runs, note)

    @property
    def done(self) -> bool:
        return self.lines.done

    @property
    def end_note(self) -> str:
        return f"group {self.lines.runs[0].meta.get('group_id')}: every node's server has ended"

    def initial(self, last: int | None = None, follow: bool = False) -> str:
        return "".join(f"{ln}\n" for ln in self.lines.initial(last, follow))

    def poll(self, check_every_s: float = 2.0) -> str:
        return "".join(f"{ln}\n" for ln in self.lines.poll(check_every_s))
