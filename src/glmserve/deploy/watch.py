"""Watch a starting server until a verdict: READY, CRASHED, STALLED, EXITED or timeout.

Each poll reads only the log bytes written since the last one (by byte offset over the
multiplexed ssh connection; a truncated log is re-read from the top), feeds complete lines to
the pure :mod:`glmserve.diagnose`, checks the run's process group is still the one we started
and who holds the listening socket on its port, and asks ``/health``. A crash line is
therefore seen at most one poll interval after it lands. When the connection drops, the
watcher reconnects and resumes at the same offset: no line is skipped or fed twice. Nothing
here kills anything; the server keeps running whatever happens to the watcher (it is nohup'd
in its own session).

Progress, for stall detection, is a log line that shows the server moving on
(:func:`glmserve.diagnose.is_progress_line`) or a new phase; HTTP access lines never count,
since our own ``/health`` polls make a hung server write one per poll, and neither does a line
that only repeats an earlier one apart from its timestamp and rank prefix, nor retry/wait
chatter (:mod:`glmserve.diagnose.progress`): a rank stuck in distributed init logs torch's
TCPStore retry warning every second for ever, which must not hold off STALLED. Each phase has
its own stall budget (:func:`glmserve.diagnose.stall_budget`) and the whole start-up an overall
deadline (``DEFAULT_DEADLINE_S`` unless ``--timeout``). READY is only ever this run's: its
process group alive, and the port's listener held by that group wherever ``/proc`` shows it
(:mod:`glmserve.deploy.port_owner`), because any server on the port answers ``/health``.
What ``status`` finds of a run later is :mod:`glmserve.deploy.assess`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from glmserve.deploy.options import DEFAULT_POLL_S as OPTIONS_POLL_S
from glmserve.deploy.options import DEFAULT_READY_TIMEOUT
from glmserve.deploy.port_owner import PortView, parse_port_view, port_owner_script, port_taken
from glmserve.deploy.progress import NewLines, moves_on
from glmserve.diagnose import Diagnosis, LogDiagnoser, State, stall_budget
from glmserve.errors import RemoteCommandError, Result, TransportError
from glmserve.remote.address import run_probe_host
from glmserve.remote.endpoint import health_ok
from glmserve.remote.process import (
    Ownership,
    parse_probe,
    probe_script,
    require_verified,
    run_ownership,
    verify_ownership,
)
from glmserve.remote.transport import READ_CHUNK, Transport, log_read_script, parse_log_read
from glmserve.store import RunRecord, RunStore

DEFAULT_POLL_S = OPTIONS_POLL_S  # deploy.options: declared once
# No verdict this long after the watch began: TIMEOUT (exit 4), so a hang that still logs
# something can never hold a CI job forever. ``--timeout`` changes it, ``--timeout 0`` drops it.
DEFAULT_DEADLINE_S = DEFAULT_READY_TIMEOUT  # deploy.options: declared once
RECONNECT_GIVE_UP_S = 120.0  # a connection down this long ends the watch (exit 5)
_SEP = "--glmserve-poll-sep--"
_LOG_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\]\s*")  # SGLang's


@dataclass
class WatchTick:
    """What a progress display shows after each poll."""

    run_id: str
    state: str
    elapsed_s: float
    last_line: str
    offset: int
    note: str = ""  # e.g. "connection lost, reconnecting"
    diagnosis: Diagnosis | None = None


@dataclass
class WatchResult:
    """The verdict and how it was reached."""

    state: str  # READY | CRASHED | STALLED | EXITED | TIMEOUT; CANCELLED, STOPPED (not recorded)
    diagnosis: Diagnosis
    elapsed_s: float
    offset: int
    reconnects: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class LineSplitter:
    """Bytes in, complete lines out; a trailing partial line waits for the next chunk."""

    def __init__(self) -> None:
        self.partial = b""

    def feed(self, data: bytes) -> list[str]:
        buf = self.partial + data
        *lines, self.partial = buf.split(b"\n")
        return [ln.decode("utf-8", "replace").rstrip("\r") for ln in lines]

    def flush(self) -> list[str]:
        rest, self.partial = self.partial, b""
        return [rest.decode("utf-8", "replace")] if rest else []


class Watcher:
    """Poll one run until a verdict. ``on_tick`` gets a :class:`WatchTick` after every poll."""

    def __init__(
        self,
        run: RunRecord,
        transport: Transport,
        store: RunStore,
        *,
        poll_s: float = DEFAULT_POLL_S,
        timeout_s: float | None = None,
        stall_timeout_s: float | None = None,
        stall_budgets: dict[State, float] | None = None,
        on_tick: Callable[[WatchTick], None] | None = None,
        health: bool = True,
        reconnect_give_up_s: float = RECONNECT_GIVE_UP_S,
        cancel: threading.Event | None = None,
    ) -> None:
        self.run = run
        self.t = transport
        self.store = store
        self.poll_s = poll_s
        # The overall deadline (None: none); every path (launch, group, sweep) gets the
        # default unless told otherwise.
        self.timeout_s: float | None = DEFAULT_DEADLINE_S if timeout_s is None else timeout_s
        self.timeout_source = "default deadline" if timeout_s is None else "--timeout"
        if self.timeout_s is not None and self.timeout_s <= 0:
            self.timeout_s = None
        self.stall_timeout_s = stall_timeout_s if stall_timeout_s and stall_timeout_s > 0 else None
        self.stall_budgets = dict(stall_budgets or {})
        self.on_tick = on_tick or (lambda _t: None)
        self.health = health
        self.base_url: str | None = None
        self._fwd = contextlib.ExitStack()
        self.reconnect_give_up_s = reconnect_give_up_s
        # Set by whoever watches several runs at once (a multi-node group) when another run's
        # verdict decides: the loop then returns CANCELLED without recording a verdict.
        self.cancel = cancel
        self.diag = LogDiagnoser()
        self.chunk = READ_CHUNK
        self.lines = LineSplitter()
        self.offset = 0
        self.last_line = ""
        self.new_lines = NewLines()
        # The last line that was progress by our rules (diagnose's own last_progress also
        # counts repeats and chatter): (line number, text), for the stall hints.
        self.progress_at: tuple[int, str] | None = None
        self.port = PortView("unknown")
        self.reconnects = 0
        self.offsets_after_reconnect: list[int] = []  # for tests: where each resume started

    # -- one poll ------------------------------------------------------------------------
    def _read_new(self) -> bool:
        """Feed the bytes written since the last read; True if they held progress.

        Reads again only while reads come back full (a backlog): a server that logs
        non-stop must not keep the watcher from checking processes and verdicts.
        """
        got = False
        while True:
            data, new = self.t.read_from(self.run.log_path, self.offset, self.chunk)
            got = self._consume(data, new) or got
            if len(data) < self.chunk or self.diag.diagnosis.state is State.CRASHED:
                return got

    def _poll(self) -> tuple[bool, Ownership]:
        """One round trip: probe the process group and who listens on the port, then read
        the new log bytes.

        Probing first means that when the server is found dead, the bytes read after it
        include everything it wrote. Returns (progress seen, ownership); ``self.port`` is
        updated.
        """
        if self.run.pgid is None:
            got = self._read_new()
            self.port = PortView("unknown")
            return got, run_ownership(self.t, self.run)
        sep = f"; echo {_SEP}; "
        cmd = (
            probe_script(self.run.pgid, self.run.pid)
            + sep
            + port_owner_script(self.run.pgid, self.run.port)
            + sep
            + log_read_script(self.run.log_path, self.offset, self.chunk)
        )
        rc, out, errb, _dur = self.t.run_bytes(cmd, timeout=30)
        if rc != 0:
            res = Result(cmd, rc, out.decode("utf-8", "replace"), errb.decode("utf-8", "replace"))
            raise RemoteCommandError(res, what=f"poll on {self.t.host.name}")
        marker = _SEP.encode() + b"\n"
        head, _, rest = out.partition(marker)
        port_text, _, rest = rest.partition(marker)
        own = verify_ownership(self.run, parse_probe(head.decode("utf-8", "replace")))
        require_verified(self.run, own)  # unverified: no verdict at all (ProcessUnverified)
        self.port = parse_port_view(
            port_text.decode("utf-8", "replace"), own.pids, run_probe_host(self.run.spec)
        )
        data, new = parse_log_read(rest, self.offset, cmd)
        got = self._consume(data, new)
        if len(data) >= self.chunk and self.diag.diagnosis.state is not State.CRASHED:
            got = self._read_new() or got  # a backlog: drain it
        return got, own

    def _consume(self, data: bytes, new: int) -> bool:
        """Feed ``data``; True if it held progress: a line that shows the server moving on,
        a new phase or verdict, or another completed ``\\r`` redraw of a tqdm bar (SGLang's
        weight and graph bars rewrite one line for minutes)."""
        if new < self.offset or (not data and new != self.offset):  # truncated
            self.lines = LineSplitter()
        self.offset = new
        redraws = _redraws(self.lines.partial)
        progress = False
        lines = self.lines.feed(data)
        for line in lines:
            progress = self._feed(line) or progress
        if _redraws(self.lines.partial) > (0 if lines else redraws):
            progress = True
        return progress

    def _feed(self, line: str) -> bool:
        """Feed one complete line; True if it is progress."""
        if line.strip():
            self.last_line = line.strip()
        changed = self.diag.feed(line)
        progress = changed is not None or moves_on(line, self.new_lines)
        if progress:
            self.progress_at = (self.diag.lines_seen, line.strip()[:300])
        if changed is not None:
            self.store.add_event(
                self.run.run_id,
                changed.state.value,
                line[:2000],
                {"line_no": self.diag.lines_seen, "category": _val(changed.category)},
            )
            self.store.update_run(self.run.run_id, state=changed.state.value)
        return progress

    def _open_health(self) -> None:
        """(Re)open the way to /health: the port itself locally, an ssh forward remotely."""
        self._fwd.close()
        self._fwd = contextlib.ExitStack()
        self.base_url = None
        if not self.health:
            return
        where = run_probe_host(self.run.spec)  # the address the server binds
        try:
            self.base_url = self._fwd.enter_context(self.t.endpoint(self.run.port, where))
        except TransportError:
            return  # log-based verdicts still work; retried after the next reconnect

    def _health_ours(self) -> bool:
        """``/health`` is 200 and the port's listener is provably this run's. Whoever holds
        the port answers ``/health`` (another server started earlier on the same port), so
        where the host does not show socket owners only the log's ready line counts."""
        if self.port.state != "ours" or not self.base_url:
            return False
        return health_ok(self.base_url, timeout=min(1.0, self.poll_s))

    def _with_progress(self, d: Diagnosis) -> Diagnosis:
        """``d`` naming the last line that was progress by the watcher's rules (diagnose's
        own wording when it names the same line)."""
        if self.progress_at is None:
            return dataclasses.replace(d, last_progress_line=None, last_progress=None)
        line, text = self.progress_at
        if d.last_progress_line == line:
            return d
        text = _LOG_PREFIX.sub("", text, count=1)
        return dataclasses.replace(d, last_progress_line=line, last_progress=text)

    def _timed_out(self, d: Diagnosis, quiet_s: float) -> Diagnosis:
        """The verdict at the overall deadline; the hint names that deadline (the budget that
        fired), then how long the log has been quiet against the phase's stall budget."""
        assert self.timeout_s is not None
        d = self._with_progress(d)
        budget, source = stall_budget(d.phase, self.stall_timeout_s, self.stall_budgets)
        td = d.stalled(quiet_s, budget, source)
        origin = (
            f"--timeout {self.timeout_s:g}"
            if self.timeout_source == "--timeout"
            else "the default; --timeout N changes it, --timeout 0 drops it"
        )
        where = (
            f"; last progress at line {d.last_progress_line}: {d.last_progress}"
            if d.last_progress_line
            else ""
        )
        td.hint = (
            f"not READY within the overall deadline of {self.timeout_s:g}s ({origin}) in phase "
            f"{d.phase.value}; the log last moved {quiet_s:.0f}s ago (stall budget "
            f"{budget:.0f}s, {source}, not reached){where}"
        )
        return td

    def _finish(self, state: str, d: Diagnosis, started: float, **extra: Any) -> WatchResult:
        if state != "READY" and self.store.stop_requested(self.run.run_id):
            # `glmserve stop` ended it while we watched: what we saw (the processes gone, a
            # traceback from the SIGTERM) is the stop, not a crash; the stop records it.
            return WatchResult(
                state="STOPPED",
                diagnosis=d,
                elapsed_s=time.monotonic() - started,
                offset=self.offset,
                reconnects=self.reconnects,
            )
        now = time.time()
        fields: dict[str, Any] = {"state": state, "log_offset": self.offset}
        if state == "READY":
            fields["ready_at"] = now
        else:
            if state == "EXITED":  # CRASHED: the processes may still be dying
                fields["ended_at"] = now
            fields["category"] = _val(d.category)
            fields["root_cause"] = d.root_cause
            fields["hint"] = d.hint
        if state == "TIMEOUT":
            fields["state"] = "STALLED"
        meta = dict(self.run.meta)
        meta.update(extra.get("meta", {}))
        meta["patch_active"] = d.patch_active
        fields["meta"] = meta
        self.store.update_run(self.run.run_id, **fields)
        self.store.add_event(self.run.run_id, fields["state"], d.root_cause, d.to_dict())
        return WatchResult(
            state=state,
            diagnosis=d,
            elapsed_s=time.monotonic() - started,
            offset=self.offset,
            reconnects=self.reconnects,
        )

    # -- the loop ------------------------------------------------------------------------
    def watch(self) -> WatchResult:
        """Poll until a verdict (see module doc); TransportError only if reconnecting fails."""
        try:
            with contextlib.suppress(TransportError):
                self._open_health()
            return self._loop()
        finally:
            self._fwd.close()

    def _loop(self) -> WatchResult:
        started = time.monotonic()
        last_progress = started
        down_since: float | None = None
        while True:
            if self.cancel is not None and self.cancel.is_set():
                return WatchResult(
                    "CANCELLED", self.diag.diagnosis, time.monotonic() - started, self.offset
                )
            tick_start = time.monotonic()
            note = ""
            resume_at = self.offset
            conn_before = getattr(self.t, "reconnects", 0)
            try:
                got, own = self._poll()
                if got:
                    last_progress = time.monotonic()
                d = self.diag.diagnosis
                if d.state is State.CRASHED:
                    return self._finish("CRASHED", d, started)
                if down_since is not None or getattr(self.t, "reconnects", 0) > conn_before:
                    # A new ssh master was needed: this poll resumed at resume_at.
                    if down_since is None:
                        self.reconnects += 1
                    self.offsets_after_reconnect.append(resume_at)
                    down_since = None
                    self._open_health()
            except TransportError as exc:
                now = time.monotonic()
                if down_since is None:
                    down_since = now
                    self.reconnects += 1
                if now - down_since > self.reconnect_give_up_s:
                    raise
                note = f"connection lost ({exc}); reconnecting, resuming at byte {self.offset}"
                self.on_tick(self._tick(started, note))
                time.sleep(min(self.poll_s, 1.0))
                continue
            if own.alive and d.state is State.READY and self.port.state == "foreign":
                return self._finish("CRASHED", port_taken(d, self.run.port), started)
            # With --skip-server-warmup the ready line can precede uvicorn's bind by a moment:
            # a free port is "not yet", never READY.
            log_ready = d.state is State.READY and self.port.state != "free"
            if own.alive and (log_ready or self._health_ours()):
                if d.state is not State.READY:
                    # /health said ready first: take the log up to now (patch lines, ...).
                    with contextlib.suppress(TransportError):
                        self._read_new()
                    d = self.diag.diagnosis
                    if d.state is State.CRASHED:
                        return self._finish("CRASHED", d, started)
                    if d.state is not State.READY:
                        d = _ready(d)
                return self._finish("READY", d, started, meta={"ready_pids": own.pids})
            if not own.alive:
                # Gone: take whatever it wrote last, then decide crash vs. plain exit.
                self._read_new()
                for line in self.lines.flush():
                    self._feed(line)
                d = self.diag.diagnosis
                if d.state is State.CRASHED:
                    return self._finish("CRASHED", d, started)
                gone = d.exited(None)  # CRASHED if a warning (soft watchdog) explains it
                return self._finish(gone.state.value, gone, started)
            # Judged as of this poll's start: the poll then proved the log still quiet, and a
            # slow round trip does not inflate the silence it reports.
            # Never negative: progress read during this poll is later than its start.
            now = tick_start
            quiet = max(0.0, now - last_progress)
            budget, source = stall_budget(d.phase, self.stall_timeout_s, self.stall_budgets)
            if math.isfinite(budget) and quiet >= budget:
                stalled = self._with_progress(d).stalled(quiet, budget, source)
                return self._finish("STALLED", stalled, started)
            if self.timeout_s is not None and now - started >= self.timeout_s:
                return self._finish("TIMEOUT", self._timed_out(d, quiet), started)
            if self.port.state == "foreign":
                note = (
                    f"port {self.run.port} is held by a process outside this run; "
                    "its answers do not count"
                )
            elif d.state is State.READY and self.port.state == "free":
                note = f"the log says ready but nothing listens on port {self.run.port} yet"
            self.on_tick(self._tick(started, note))
            # Wake at the next poll, or exactly when a budget runs out: a hang is STALLED
            # within its budget plus one poll interval of its last progress line.
            wake = [self.poll_s - (time.monotonic() - tick_start)]
            if math.isfinite(budget):
                wake.append(last_progress + budget - time.monotonic())
            if self.timeout_s is not None:
                wake.append(started + self.timeout_s - time.monotonic())
            pause = max(0.0, min(wake))
            if self.cancel is not None:
                self.cancel.wait(pause)
            else:
                time.sleep(pause)

    def _tick(self, started: float, note: str) -> WatchTick:
        d = self.diag.diagnosis
        return WatchTick(
            run_id=self.run.run_id,
            state=d.state.value,
            elapsed_s=time.time() - self.run.created_at
            if self.run.created_at
            else time.monotonic() - started,
            last_line=self.last_line,
            offset=self.offset,
            note=note,
            diagnosis=d,
        )


def _val(x: Any) -> Any:
    return getattr(x, "value", x)


def _ready(d: Diagnosis) -> Diagnosis:
    """READY from /health while the log has not said so yet."""
    return dataclasses.replace(d, state=State.READY)


def _redraws(partial: bytes) -> int:
    """Completed ``\\r`` redraws in an unfinished line (tqdm rewrites its bar in place)."""
    return sum(1 for seg in partial.split(b"\r")[:-1] if seg.strip())
