"""Watch a starting server until a verdict: READY, CRASHED, STALLED, EXITED or timeout.

Each poll reads only the log bytes written since the last one (by byte offset over the
multiplexed ssh connection; a truncated log is re-read from the top), feeds complete lines to
the pure :mod:`glmserve.diagnose`, checks the run's process group is still the one we started,
and asks ``/health``. A crash line is therefore seen at most one poll interval after it lands.
When the connection drops, the watcher reconnects and resumes at the same offset: no line is
skipped or fed twice. Nothing here kills anything; the server keeps running whatever happens to
the watcher (it is nohup'd in its own session).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from glmserve.diagnose import Diagnosis, LogDiagnoser, State, phase_stall_budget
from glmserve.errors import RemoteCommandError, Result, TransportError
from glmserve.lifecycle import (
    Ownership,
    health_ok,
    health_status,
    parse_probe,
    probe_script,
    run_ownership,
    verify_ownership,
)
from glmserve.store import RunRecord, RunStore
from glmserve.transport import READ_CHUNK, Transport, log_read_script, parse_log_read

DEFAULT_POLL_S = 1.0
RECONNECT_GIVE_UP_S = 120.0  # a connection down this long ends the watch (exit 5)
_SEP = "--glmserve-poll-sep--"


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

    state: str  # READY | CRASHED | STALLED | EXITED | TIMEOUT | CANCELLED (not recorded)
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
        on_tick: Callable[[WatchTick], None] | None = None,
        health: bool = True,
        reconnect_give_up_s: float = RECONNECT_GIVE_UP_S,
        cancel: threading.Event | None = None,
    ) -> None:
        self.run = run
        self.t = transport
        self.store = store
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self.stall_timeout_s = stall_timeout_s
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
        self.reconnects = 0
        self.offsets_after_reconnect: list[int] = []  # for tests: where each resume started

    # -- one poll ------------------------------------------------------------------------
    def _read_new(self) -> bool:
        """Feed the bytes written since the last read; True if there were any.

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
        """One round trip: probe the process group, then read the new log bytes.

        Probing first means that when the server is found dead, the bytes read after it
        include everything it wrote. Returns (new bytes seen, ownership).
        """
        if self.run.pgid is None:
            got = self._read_new()
            return got, run_ownership(self.t, self.run)
        cmd = f"{probe_script(self.run.pgid)}; echo {_SEP}; " + log_read_script(
            self.run.log_path, self.offset, self.chunk
        )
        rc, out, errb, _dur = self.t.run_bytes(cmd, timeout=30)
        if rc != 0:
            res = Result(cmd, rc, out.decode("utf-8", "replace"), errb.decode("utf-8", "replace"))
            raise RemoteCommandError(res, what=f"poll on {self.t.host.name}")
        head, _, rest = out.partition(_SEP.encode() + b"\n")
        own = verify_ownership(self.run, parse_probe(head.decode("utf-8", "replace")))
        data, new = parse_log_read(rest, self.offset, cmd)
        got = self._consume(data, new)
        if got and len(data) >= self.chunk and self.diag.diagnosis.state is not State.CRASHED:
            self._read_new()  # a backlog: drain it
        return got, own

    def _consume(self, data: bytes, new: int) -> bool:
        if new < self.offset or (not data and new != self.offset):  # truncated
            self.lines = LineSplitter()
        self.offset = new
        for line in self.lines.feed(data):
            self._feed(line)
        return bool(data)

    def _feed(self, line: str) -> None:
        if line.strip():
            self.last_line = line.strip()
        changed = self.diag.feed(line)
        if changed is not None:
            self.store.add_event(
                self.run.run_id,
                changed.state.value,
                line[:2000],
                {"line_no": self.diag.lines_seen, "category": _val(changed.category)},
            )
            self.store.update_run(self.run.run_id, state=changed.state.value)

    def _open_health(self) -> None:
        """(Re)open the way to /health: the port itself locally, an ssh forward remotely."""
        self._fwd.close()
        self._fwd = contextlib.ExitStack()
        self.base_url = None
        if not self.health:
            return
        try:
            local = self._fwd.enter_context(self.t.forward(self.run.port))
        except TransportError:
            return  # log-based verdicts still work; retried after the next reconnect
        self.base_url = f"http://127.0.0.1:{local}"

    def _health(self) -> bool:
        return bool(self.base_url) and health_ok(self.base_url, timeout=min(1.0, self.poll_s))

    def _finish(self, state: str, d: Diagnosis, started: float, **extra: Any) -> WatchResult:
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
            if d.state is State.READY or (own.alive and self._health()):
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
                return self._finish("EXITED", d.exited(None), started)
            now = time.monotonic()
            budget = self.stall_timeout_s or phase_stall_budget(d.state)
            if math.isfinite(budget) and now - last_progress > budget:
                return self._finish("STALLED", d.stalled(now - last_progress), started)
            if self.timeout_s is not None and now - started > self.timeout_s:
                td = d.stalled(now - last_progress)
                td.hint = (
                    f"not READY after --timeout {self.timeout_s:.0f}s (phase {d.phase.value}); "
                    + (td.hint or "")
                )
                return self._finish("TIMEOUT", td, started)
            self.on_tick(self._tick(started, note))
            pause = max(0.0, self.poll_s - (time.monotonic() - tick_start))
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
    import dataclasses

    return dataclasses.replace(d, state=State.READY)


def assess_run(run: RunRecord, store: RunStore, t: Transport | None = None) -> dict[str, Any]:
    """Current truth about one run for ``status``: processes, /health, the log; store updated.

    A worker that dies after READY is not noticed by SGLang (``/health`` only turns 503), so
    the processes alive at READY (``meta.ready_pids``) are checked one by one.
    """
    from glmserve.lifecycle import read_log_bytes, transport_for_run

    t = t or transport_for_run(run)
    own = run_ownership(t, run)
    data, _ = read_log_bytes(t, run.log_path)
    diag = LogDiagnoser()
    for line in data.decode("utf-8", "replace").splitlines():
        diag.feed(line)
    d = diag.diagnosis
    state, fields = run.state, {}
    healthy: bool | None = None
    code: int | None = None
    if own.alive:
        missing = [p for p in run.meta.get("ready_pids", []) if p not in own.pids]
        was_ready = run.ready_at is not None
        with contextlib.ExitStack() as stack:
            try:
                local = stack.enter_context(t.forward(run.port))
                code = health_status(f"http://127.0.0.1:{local}", timeout=2.0)
                if code != 200 and was_ready:  # one more look: a busy server may be slow
                    time.sleep(1.0)
                    code = health_status(f"http://127.0.0.1:{local}", timeout=2.0)
                healthy = code == 200
            except TransportError:
                healthy = None
        hint = (
            "SGLang does not notice a dead worker (/health only turns 503): read "
            f"`glmserve logs {run.run_id} -n 100`, then `glmserve stop {run.run_id}`"
        )
        if d.state is State.CRASHED:
            state = "CRASHED"
        elif missing:
            state = "CRASHED"
            fields = {
                "category": "CRASH",
                "root_cause": f"process(es) {missing} of the run died after READY",
                "hint": hint,
            }
        elif was_ready and healthy is False:
            state = "CRASHED"
            fields = {
                "category": "CRASH",
                "root_cause": f"GET /health -> {code or 'no answer'} after READY while the "
                "server process is up: a worker likely died",
                "hint": hint,
            }
        elif healthy or d.state is State.READY:
            state = "READY"
        elif run.state == "STALLED":
            state = "STALLED"  # the watcher's verdict holds until the log moves on to READY
        else:
            state = d.state.value
    elif run.state not in ("STOPPED", "FAILED"):
        state = "CRASHED" if d.state is State.CRASHED else "EXITED"
        if run.ended_at is None:
            fields["ended_at"] = time.time()
    if state == "CRASHED" and "category" not in fields and d.state is State.CRASHED:
        fields = {"category": _val(d.category), "root_cause": d.root_cause, "hint": d.hint}
    if state != run.state or fields:
        store.update_run(run.run_id, state=state, **fields)
        store.add_event(run.run_id, state, fields.get("root_cause"), {"assessed": True})
        run = store.get_run(run.run_id)
    end = run.ended_at or time.time()
    patch = d.patch_active if run.patches and own.alive else None  # a dead rank runs nothing
    if run.patches and patch is None:
        patch = f"0/{run.tp_size}"
    return {
        "run_id": run.run_id,
        "state": run.state,
        "host": run.host,
        "profile": run.profile,
        "port": run.port,
        "pid": run.pid,
        "uptime_s": round(end - run.created_at, 1),
        "alive_pids": own.pids,
        "healthy": healthy,
        "phase": d.phase.value,
        "category": run.category,
        "root_cause": run.root_cause,
        "hint": run.hint,
        "patch_active": patch,
        "patches": run.patches,
        "launcher": run.launcher,
    }
