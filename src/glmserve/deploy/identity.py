"""Is the server answering on a run's port that run's live server? One answer for every verb.

Why: a run's port outlives the run. Stop run A on port P, launch B on P, and ``bench A``
used to measure B and store the figure under A. Every verb that talks to a run's server
(``bench`` single/group/sweep, live ``profile``, ``status``) goes through ``verify_serving``
(or ``serving_endpoint``), which checks, in this order:

1. the run is alive and READY (``assess.assess_run``: process group, its log, /health); a
   run that is not is refused with its state: CRASHED/EXITED/FAILED exit 3 with the log's
   diagnosis, STALLED or still starting exit 4, STOPPED exit 2;
2. the socket listening on the port belongs to the run's process group, where the host
   shows it (``/proc/net/tcp*`` inodes against ``/proc/<pid>/fd`` of the run's processes);
3. what the server says about itself (``/server_info``, ``/get_server_info`` before 0.5.x:
   SGLang returns ``dataclasses.asdict(server_args)`` plus ``version``,
   ``srt/entrypoints/http_server.py`` ``server_info``) matches the run's recorded argv:
   model path, served model name, attention backend, TP size, port.

A mismatch in 2 or 3 raises ``ServerIdentityError`` (exit 5: the run's server is not what
answers there). ``RunMonitor`` keeps asking question 1 while a measurement runs, once per
poll (processes and new log lines; ``/health`` too once a request failed), so a server that
dies mid-bench is seen within a poll interval and diagnosed from its log instead of being
reported as "connection refused".
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from glmserve.config.flags import Flags
from glmserve.config.spec import MODEL_FLAGS, TP_SIZE_FLAGS
from glmserve.diagnose import Diagnosis, LogDiagnoser, State
from glmserve.errors import (
    JOB_END_ERRORS,
    GlmserveError,
    RunNotServing,
    ServerCrashed,
    ServerIdentityError,
    ServerNotReady,
    TransportError,
)
from glmserve.remote.address import run_probe_host
from glmserve.remote.transport import Transport
from glmserve.store import RunRecord, RunStore

# The ServerArgs field /server_info reports -> the option strings that set it in the argv
# (of one dest, so the last written wins: ``Flags.get_any``).
IDENTITY_FLAGS: dict[str, tuple[str, ...]] = {
    "model_path": MODEL_FLAGS,
    "served_model_name": ("--served-model-name",),
    "attention_backend": ("--attention-backend",),
    "tp_size": TP_SIZE_FLAGS,
}
_GONE_STATES = ("CRASHED", "EXITED", "FAILED")
HEALTH_TIMEOUT_S = 25.0  # SGLang's own /health gives up after 20 s (SGLANG_HEALTH_CHECK_TIMEOUT)
HEALTH_SETTLE_S = 1.0  # after a failed /health: re-poll the processes this long first


@dataclass
class Identity:
    """What was checked, for the result's metadata and ``status``."""

    run_id: str
    state: str
    listener: str = "unseen"  # ours | foreign | unseen (the host does not show it)
    listener_detail: str = ""
    problems: list[str] = field(default_factory=list)
    server_info: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "state": self.state, "listener": self.listener,
                "problems": list(self.problems)}  # fmt: skip


# -- what the run should be ----------------------------------------------------------------
def expected_server_args(run: RunRecord) -> dict[str, str]:
    """The ServerArgs fields the run's recorded argv pins down (absent flags: not compared)."""
    flags = Flags.parse((run.spec or {}).get("argv"))
    out: dict[str, str] = {}
    for name, spellings in IDENTITY_FLAGS.items():
        v = flags.get_any(spellings)
        if isinstance(v, str):
            out[name] = v
    out["port"] = str(run.port)
    return out


def compare_server_info(expected: dict[str, str], info: dict[str, Any]) -> list[str]:
    """One line per field where the server's own report differs from the run's argv (pure).

    A field the server does not report is not a mismatch (older releases report fewer).
    """
    problems = []
    for name, want in expected.items():
        if name not in info or info[name] is None:
            continue
        got = info[name]
        if str(got) != want:
            problems.append(f"{name} is {got!r}, the run was launched with {want!r}")
    return problems


# -- who listens on the port ---------------------------------------------------------------
def listener_script(port: int, pids: list[int]) -> str:
    """Shell printing ``L inode`` per socket listening on ``port`` and ``S pid inode`` per
    socket of each pid (``E pid`` when its fds cannot be read)."""
    plist = " ".join(str(int(p)) for p in pids)
    return (
        f"p=$(printf ':%04X' {int(port)}); "
        "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null "
        '| awk -v p="$p" \'substr($2, length($2) - 4) == p && $4 == "0A" {print "L", $10}\'; '
        f"for pid in {plist}; do "
        '  out=$(ls -l /proc/$pid/fd 2>/dev/null) || { echo "E $pid"; continue; }; '
        "  printf '%s\\n' \"$out\" | sed -n 's/.*socket:\\[\\([0-9]*\\)\\].*/S '$pid' \\1/p'; "
        "done; true"
    )


def parse_listener(text: str) -> tuple[str, str]:
    """(``ours`` | ``foreign`` | ``unseen``, detail) from ``listener_script``'s output."""
    listening: set[str] = set()
    ours: dict[str, str] = {}
    unreadable = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "L":
            listening.add(parts[1])
        elif len(parts) == 3 and parts[0] == "S":
            ours[parts[2]] = parts[1]
        elif len(parts) == 2 and parts[0] == "E":
            unreadable.append(parts[1])
    listening.discard("0")
    if not listening:
        return "unseen", "no listening socket visible on the host"
    hit = sorted(listening & set(ours))
    if hit:
        return "ours", f"listening socket held by pid {ours[hit[0]]}"
    if unreadable:
        return "unseen", f"cannot read the fds of pid(s) {', '.join(unreadable)}"
    return "foreign", "the listening socket belongs to no process of the run"


def port_listener(t: Transport, port: int, pids: list[int]) -> tuple[str, str]:
    """Whether the socket listening on ``port`` is one of ``pids``' (one host command)."""
    if not pids:
        return "unseen", "no live process of the run"
    res = t.run(listener_script(port, pids), timeout=30)
    if not res.ok:
        return "unseen", f"listener probe failed: {res.tail()}"
    return parse_listener(res.stdout)


# -- what the server says ------------------------------------------------------------------
def fetch_server_info(base_url: str, timeout: float = 10.0) -> dict[str, Any] | None:
    """``/server_info`` (``/get_server_info`` on releases without it); None if neither
    answers with a JSON object."""
    try:
        with httpx.Client(timeout=timeout) as c:
            for path in ("/server_info", "/get_server_info"):
                r = c.get(base_url + path)
                if r.status_code == 200:
                    data = r.json()
                    return data if isinstance(data, dict) else None
    except (httpx.HTTPError, ValueError, RecursionError):  # RecursionError: nested too deep
        return None
    return None


# -- the check -----------------------------------------------------------------------------
def refusal(run: RunRecord, assessed: dict[str, Any]) -> GlmserveError | None:
    """The error for a run that is not alive and READY, or None when it is."""
    state = str(assessed.get("state") or run.state)
    if state == "READY" and assessed.get("alive", assessed.get("alive_pids")):
        return None
    why = ": ".join(x for x in (run.category, run.root_cause) if x)
    tail = f" ({why})" if why else ""
    msg = f"run {run.run_id} is {state}{tail}; nothing measured, nothing stored"
    if state in _GONE_STATES:
        return ServerCrashed(msg + f" (see `glmserve logs {run.run_id}`)", _diagnosis(run, state))
    if state == "STOPPED":
        return RunNotServing(msg + " (launch it again to measure it)")
    if state == "READY":  # READY in the store, but no process of it is left
        return ServerCrashed(msg + ": no process of it is left")
    return ServerNotReady(msg + f" (not serving yet: `glmserve status {run.run_id}`)")


def _diagnosis(run: RunRecord, state: str) -> dict[str, Any]:
    return {"state": state, "category": run.category, "root_cause": run.root_cause,
            "hint": run.hint}  # fmt: skip


def verify_serving(run: RunRecord, base_url: str, t: Transport | None = None) -> Identity:
    """Raise unless ``base_url`` (the run's port, forwarded if remote) is the run's live,
    READY server; returns what was checked (see the module docstring)."""
    from glmserve.deploy.assess import assess_run
    from glmserve.remote.run_host import transport_for_run

    t = t or transport_for_run(run)
    with RunStore.open() as store:
        assessed = assess_run(run, store, t)
        run = store.get_run(run.run_id)
    bad = refusal(run, assessed)
    if bad is not None:
        raise bad
    ident = check_identity(run, base_url, t, list(assessed.get("alive_pids") or []))
    if not ident.ok:
        raise ServerIdentityError(
            f"run {run.run_id}: the server on {run.host}:{run.port} is not this run's: "
            + "; ".join(ident.problems)
            + "; nothing measured, nothing stored"
        )
    return ident


def check_identity(run: RunRecord, base_url: str, t: Transport, pids: list[int]) -> Identity:
    """Steps 2 and 3 of the module docstring for a run known to be alive (no raising)."""
    ident = Identity(run.run_id, run.state)
    try:
        ident.listener, ident.listener_detail = port_listener(t, run.port, pids)
    except TransportError as exc:
        ident.listener_detail = f"listener probe failed: {exc}"
    if ident.listener == "foreign":
        ident.problems.append(f"port {run.port}: {ident.listener_detail}")
    info = fetch_server_info(base_url)
    if info is None:
        ident.problems.append(f"no /server_info answer at port {run.port}")
        return ident
    ident.server_info = info
    ident.problems += compare_server_info(expected_server_args(run), info)
    return ident


def identity_problems(run: RunRecord, assessed: dict[str, Any]) -> list[str]:
    """For ``status``: why the server on a READY run's port is not the run's (empty: it is,
    or the run is not READY and ``assess_run`` already said what it is)."""
    from glmserve.remote.run_host import transport_for_run

    if assessed.get("state") != "READY" or not assessed.get("alive_pids"):
        return []
    if int((run.meta or {}).get("node_rank") or 0) > 0:
        return []  # nodes > 0 of a group serve no API (node 0 does)
    t = transport_for_run(run)
    try:
        with t.endpoint(run.port, run_probe_host(run.spec)) as base:
            return check_identity(run, base, t, list(assessed["alive_pids"])).problems
    except TransportError as exc:
        return [f"identity not checked: {exc}"]


@contextlib.contextmanager
def serving_endpoint(run_id: str) -> Iterator[tuple[str, RunRecord, Identity]]:
    """The run's base URL (an ssh forward when remote), verified to be its live server."""
    from glmserve.remote.endpoint import run_base_url
    from glmserve.remote.run_host import transport_for_run

    with RunStore.open() as store:
        run = store.get_run(run_id)
    t = transport_for_run(run)
    with run_base_url(run, t) as base:
        ident = verify_serving(run, base, t)
        yield base, run, ident


# -- while measuring -----------------------------------------------------------------------
@dataclass
class Verdict:
    """Why the monitored server is no longer serving."""

    state: str  # CRASHED | EXITED | STOPPED (``glmserve stop`` ended it: not a crash)
    reason: str
    diagnosis: Diagnosis | None = None
    run_id: str = ""  # the run that died (a node of a group, for a group)

    def error(self, run_id: str | None = None) -> GlmserveError:
        run_id = self.run_id or run_id
        if self.state == "STOPPED":
            from glmserve.errors import RunNotServing

            return RunNotServing(f"run {run_id} was stopped during the measurement: {self.reason}")
        d = self.diagnosis
        if self.state in JOB_END_ERRORS:
            hint = f"; {d.hint}" if d is not None and d.hint else ""
            return JOB_END_ERRORS[self.state](
                f"run {run_id} {self.state} during the measurement: {self.reason}{hint}", d
            )
        detail = self.reason
        if d is not None and d.root_cause:
            cat = getattr(d.category, "value", d.category)
            detail = f"{cat}: {d.root_cause}"
        hint = f"; {d.hint}" if d is not None and d.hint else ""
        return ServerCrashed(f"run {run_id} {self.state} during the measurement: {detail}{hint}", d)


class RunMonitor:
    """Polls a run's processes and new log lines on a thread while it is measured.

    Each poll is one host command: the process-group probe plus the log bytes written since
    the last poll, fed to the same diagnoser ``watch`` uses. A crash line, a vanished process
    group or a process alive at READY that is gone ends the watch with a ``Verdict`` and calls
    ``on_dead`` (the bench then stops sending and keeps what it measured). When the bench
    reports a failed request (``suspect``) while the processes are up, ``/health`` is asked
    too: a silently dead scheduler shows only there.
    """

    def __init__(
        self,
        run: RunRecord,
        t: Transport,
        poll_s: float = 1.0,
        on_dead: Callable[[], None] = lambda: None,
        suspect: threading.Event | None = None,
        base_url: str | None = None,
    ) -> None:
        self.run = run
        self.t = t
        self.poll_s = poll_s
        self.on_dead = on_dead
        # set by the bench when a request failed: then (only) /health is asked as well
        self.suspect = suspect
        self.base_url = base_url
        self.verdict: Verdict | None = None
        self.diag = LogDiagnoser()
        self.offset = 0
        self._partial = b""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> RunMonitor:
        self._read_log()  # the log so far: the diagnoser needs its context (server_args...)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=max(5.0, 3 * self.poll_s))

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            if self.check() is None and self._suspect():
                self.check_health(str(self.base_url))
            if self.verdict is not None:
                self.on_dead()
                return

    def _suspect(self) -> bool:
        if self.suspect is None or self.base_url is None or not self.suspect.is_set():
            return False
        self.suspect.clear()
        return True

    def check(self, settle_s: float = 0.0) -> Verdict | None:
        """One poll (thread-safe); with ``settle_s``, poll again for that long while the
        server looks alive (a crash's last log lines and exit take a moment to land)."""
        end = time.monotonic() + settle_s
        while True:
            with self._lock:
                if self.verdict is None:
                    self.verdict = self._poll()
                    if self.verdict is not None:
                        self.verdict.run_id = self.run.run_id
                        self._record()
                if self.verdict is not None or time.monotonic() >= end:
                    return self.verdict
            time.sleep(min(0.2, self.poll_s))

    def _poll(self) -> Verdict | None:
        from glmserve.remote.process import run_ownership
        from glmserve.remote.slurm import scheduler_end

        try:
            own = run_ownership(self.t, self.run)
            self._read_log()
        except TransportError:
            return None  # the host did not answer this time; the next poll asks again
        d = self.diag.diagnosis
        verdict = None
        if not own.alive and (ended := scheduler_end(own)):
            # a Slurm job ended by the scheduler: that is why, whatever the log's last lines
            # (slurmstepd's "*** JOB n CANCELLED ... DUE TO TIME LIMIT ***" is no crash)
            verdict = Verdict(ended[0], ended[1], replace(d, root_cause=ended[1], hint=ended[2]))
        elif d.state is State.CRASHED:
            verdict = Verdict("CRASHED", d.root_cause or "crash in the log", d)
        elif not own.alive:
            reason = f"the server process exited ({own.reason or 'no process left'})"
            verdict = Verdict("EXITED", reason, d if d.root_cause else None)
        elif missing := [p for p in self.run.meta.get("ready_pids", []) if p not in own.pids]:
            verdict = Verdict("CRASHED", f"process(es) {missing} of the run died after READY")
        return self._unless_stopped(verdict)

    def _unless_stopped(self, verdict: Verdict | None) -> Verdict | None:
        """A server that went away because ``glmserve stop`` ended it was stopped, not
        crashed (its SIGTERM traceback and exit look like one): exit 2, as ``launch`` says."""
        if verdict is None:
            return None
        with contextlib.suppress(GlmserveError), RunStore.open() as store:
            if store.stop_requested(self.run.run_id):
                return Verdict("STOPPED", "`glmserve stop` ended it", run_id=self.run.run_id)
        return verdict

    def check_health(self, base_url: str, timeout: float = HEALTH_TIMEOUT_S) -> Verdict | None:
        """After requests failed with the processes up: ask ``/health``. A scheduler that
        died silently is not noticed by SGLang; its ``/health`` answers 503 once its own
        health check times out (``SGLANG_HEALTH_CHECK_TIMEOUT``, 20 s in 0.5.9). Only then,
        never during a measurement: a health check is a generate request of its own."""
        from glmserve.remote.endpoint import health_status

        if self.verdict is not None:
            return self.verdict
        code = health_status(base_url, timeout=timeout)
        if code == 200:
            return None
        # "while the server process is up" must still hold now: a server killed after the
        # caller's last poll also stops answering /health, and that is EXITED, not a worker
        # that died (the poll settles a moment: a killed group takes that long to leave /proc)
        if (seen := self.check(settle_s=HEALTH_SETTLE_S)) is not None:
            return seen
        with self._lock:
            if self.verdict is None:
                self.verdict = self._unless_stopped(
                    Verdict(
                        "CRASHED",
                        f"GET /health -> {code or 'no answer'} after requests failed while the "
                        "server process is up: a worker likely died (SGLang does not notice)",
                        run_id=self.run.run_id,
                    )
                )
                if self.verdict is not None and self.verdict.state != "STOPPED":
                    self._record()
        return self.verdict

    def _record(self) -> None:
        """Store what the run became (state, diagnosis), as ``status`` would."""
        from glmserve.deploy.assess import assess_run

        with contextlib.suppress(GlmserveError), RunStore.open() as store:
            assess_run(store.get_run(self.run.run_id), store, self.t)

    def _read_log(self) -> None:
        while True:
            data, new = self.t.read_from(self.run.log_path, self.offset)
            if new < self.offset:  # truncated: start over
                self.diag, self._partial = LogDiagnoser(), b""
            self.offset = new
            buf = self._partial + data
            *lines, self._partial = buf.split(b"\n")
            for line in lines:
                self.diag.feed(line.decode("utf-8", "replace"))
            if not data:
                return


class UrlVerdict(Verdict):
    """A ``--url`` server stopped answering ``/health``: no run, no log, only that."""

    def error(self, run_id: str | None = None) -> ServerCrashed:
        return ServerCrashed(f"the server at {self.run_id} {self.reason}", None)


class UrlMonitor:
    """What watches a ``--url`` server during a bench: there are no processes or log to
    poll, so only ``/health``, and only after a request failed (a health check is a
    generate request of its own). A silently dead scheduler otherwise turns every later
    request into a stall-timeout wait: 344 failed requests over 4.5 minutes, exit 0, in an
    audit. When ``/health`` is not 200 the bench is told to stop (``on_dead``)."""

    def __init__(
        self,
        base_url: str,
        on_dead: Callable[[], None] = lambda: None,
        suspect: threading.Event | None = None,
        poll_s: float = 1.0,
    ) -> None:
        self.base_url = base_url
        self.on_dead = on_dead
        self.suspect = suspect
        self.poll_s = poll_s
        self.verdict: Verdict | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> UrlMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=max(5.0, 3 * self.poll_s))

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            if self.suspect is not None and self.suspect.is_set():
                self.suspect.clear()
                if self.check_health(self.base_url) is not None:
                    self.on_dead()
                    return

    def check(self, settle_s: float = 0.0) -> Verdict | None:
        return self.verdict  # nothing to poll but /health (check_health)

    def check_health(self, base_url: str, timeout: float = HEALTH_TIMEOUT_S) -> Verdict | None:
        """``GET /health``: None when 200, else the verdict (kept)."""
        from glmserve.remote.endpoint import health_status

        if self.verdict is not None:
            return self.verdict
        code = health_status(base_url, timeout=timeout)
        if code is None or code < 500:
            # 200; no /health at all (404: another server kind); or no answer, which the
            # requests' own connect failures report (server unreachable, exit 5)
            return None
        with self._lock:
            if self.verdict is None:
                self.verdict = UrlVerdict(
                    "CRASHED",
                    f"answered GET /health -> {code} after requests failed during the "
                    "measurement: a worker likely died (SGLang does not notice)",
                    run_id=self.base_url,
                )
        return self.verdict
