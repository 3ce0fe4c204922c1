"""Launch, find, stop and read runs on a host: the seeds' by-hand loop, recorded and safe.

A run is ``<workdir>/runs/<run_id>/{launch.sh, meta.json, server.log, runtime/...}`` on the host,
started with ``nohup setsid bash launch.sh > server.log 2>&1 &`` so it survives the ssh session
and owns a fresh process group. The launched process reports itself (``server.proc``, its own
``/proc/<pid>/stat`` written after ``setsid``), and the store keeps that PID, process group and
start time (field 22) plus the host's boot id: before any signal we re-read them and only touch
processes that provably belong to the run, so a reused PID or a stranger's group is never hit.
Stopping is by process group while its leader is the recorded process (TERM, wait, KILL,
verify), else by verified PID, never by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import secrets
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from glmserve.config.spec import LaunchSpec
from glmserve.errors import (
    ConfigError,
    GlmserveError,
    PortClaimed,
    ProcessUnverified,
    StopFailed,
    StoreError,
)
from glmserve.remote.address import bind_host, probe_host, run_probe_host, url_host
from glmserve.remote.hosts import HostConfig, as_host, recorded_host
from glmserve.remote.transport import READ_CHUNK, Transport, shell_path, transport_for
from glmserve.store import RunRecord, RunStore


def stat_loop(body: str, end: bool = True) -> str:
    """Bash running ``body`` once per ``/proc/<pid>/stat`` with ``$p`` the PID (from the file
    name) and ``$1 $2 ...`` the fields after the LAST ``)``: ``$1`` state, ``$3`` process
    group, ``${20}`` start time (fields 3, 5, 22 of proc(5)). A process may put anything but
    NUL in its name (``prctl(PR_SET_NAME)``, ``/proc/self/comm``), ')' and newlines included,
    so a name is never split on: ``cat /proc/*/stat | sed | awk`` read a newline in a name
    as a forged process. A stat without a ')' or with too few fields prints ``? PID``; the
    loop ends with ``end N`` (stats read), so a cut-off probe is seen as one; with ``end``
    False (a list of PIDs for another loop) neither ``?`` nor ``end`` lines are written.
    Builtins only (no fork per process); a process gone meanwhile is skipped."""
    unread = 'echo "? $p";' if end else ""
    return (
        "n=0; { for f in /proc/[0-9]*/stat; do s=; IFS= read -r -d '' s < \"$f\"; "
        '[ -n "$s" ] || continue; n=$((n + 1)); p=${f#/proc/}; p=${p%/stat}; '
        f'case $s in *")"*) ;; *) {unread} continue;; esac; '
        f'set -- ${{s##*)}}; if [ "$#" -lt 20 ]; then {unread} continue; fi; '
        f"{body}; done; }} 2>/dev/null" + ('; echo "end $n"' if end else "")
    )


def stat_check(pid: int, pgrp: int | None, start: int) -> str:
    """Bash test: ``/proc/<pid>/stat`` read now shows process group ``pgrp`` (any, if None)
    and start time ``start``, its fields taken after the last ')' as in :func:`stat_loop`."""
    want = f'[ "${{20}}" = "{int(start)}" ]'
    if pgrp is not None:
        want = f'[ "$3" = "{int(pgrp)}" ] && {want}'
    return (
        f"{{ s=; IFS= read -r -d '' s < /proc/{int(pid)}/stat; }} 2>/dev/null; "
        f'case $s in *")"*) set -- ${{s##*)}}; [ "$#" -ge 20 ] && {want};; *) false;; esac'
    )


@dataclass
class GroupProbe:
    """What is running in a run's process group right now, as seen on the host."""

    boot_id: str
    members: list[tuple[int, str, int]] = field(default_factory=list)  # (pid, state, starttime)
    # The recorded PID when it is not in the probed group: pid -> (state, pgrp, starttime).
    outside: dict[int, tuple[str, int, int]] = field(default_factory=dict)
    # Why the probe proves nothing ("" when it is whole): cut off, or a stat it could not read.
    problem: str = ""

    @property
    def live_pids(self) -> list[int]:
        return [pid for pid, st, _ in self.members if st != "Z"]


@dataclass
class Ownership:
    """Result of checking a probe against the recorded run."""

    pids: list[int]  # live processes that provably belong to the run
    reason: str = ""  # why nothing (or not everything) is ours, for messages
    group: bool = False  # the recorded process leads the group: signalling the group is safe
    starts: dict[int, int] = field(default_factory=dict)  # pid -> start time, re-checked at kill
    # False: the probe could not be read whole, so no member is known either way; callers
    # must say "unverified", never "gone" (see :func:`require_verified`).
    verified: bool = True

    @property
    def alive(self) -> bool:
        return bool(self.pids)


def require_verified(run: RunRecord, own: Ownership) -> Ownership:
    """``own``, or ProcessUnverified when the probe proved nothing: a run whose group cannot
    be verified is neither stopped nor exited."""
    if not own.verified:
        raise ProcessUnverified(
            f"run {run.run_id} on {run.host}: its process group {run.pgid} could not be "
            f"verified ({own.reason}); it is reported neither stopped nor exited: try again, "
            f"or look with `ps -o pid,pgid,lstart,comm -g {run.pgid}` on the host"
        )
    return own


def new_run_id(store: RunStore) -> str:
    """Short, unique, prefix-friendly: 8 hex digits."""
    while True:
        rid = secrets.token_hex(4)
        try:
            store.get_run(rid)
        except GlmserveError:
            return rid


def transport_for_run(run: RunRecord) -> Transport:
    """The transport to the host ``run`` is on: the entry it was launched with (see
    :func:`run_host`)."""
    return transport_for(run_host(run))


_said: set[str] = set()


def run_host(run: RunRecord) -> HostConfig:
    """The host entry ``run`` was launched with (recorded in the store), not whatever
    hosts.yaml says today; when today's entry differs, is gone, or the run predates the
    recording, one line on stderr says so (once per process), and the recorded entry (or,
    for an older run, today's) is used."""
    host, note = recorded_host(run.host, run.host_config, run.run_id)
    if note and note not in _said:
        _said.add(note)
        word = "note" if run.host_config is None else "warning"
        sys.stderr.write(f"{word}: {note}\n")
    return host


def host_note(run: RunRecord) -> str | None:
    """What :func:`run_host` says about ``run``'s host (for ``--json`` output), or None."""
    try:
        return recorded_host(run.host, run.host_config, run.run_id)[1]
    except GlmserveError:
        return None  # no host to act on: the verb's own error says so


# -- process probing -------------------------------------------------------------------------
def probe_script(pgid: int, pid: int | None = None) -> str:
    """Shell printing the boot id, ``g <pgid>``, then ``pid state pgrp starttime`` of each
    member of ``pgid`` and of the recorded process ``pid`` (wherever its group is)."""
    want = f'[ "$3" = {int(pgid)} ]'
    if pid is not None:
        want += f' || [ "$p" = {int(pid)} ]'
    body = f'if {want}; then echo "$p $1 $3 ${{20}}"; fi'
    return f"cat /proc/sys/kernel/random/boot_id; echo g {int(pgid)}; " + stat_loop(body)


def probe_group(t: Transport, pgid: int, pid: int | None = None) -> GroupProbe:
    """Boot id and every process whose process group is ``pgid`` (one host command)."""
    res = t.run(probe_script(pgid, pid), check=True, what="process probe", timeout=30)
    return parse_probe(res.stdout)


def parse_probe(text: str) -> GroupProbe:
    """Parse :func:`probe_script` output. Whole only with its ``end N`` line and no ``?``
    line (a stat not understood: its process might be a member); else ``problem`` says why."""
    lines = text.splitlines()
    probe = GroupProbe(boot_id=lines[0].strip() if lines else "")
    pgid: int | None = None
    ended = False
    unread: list[str] = []
    for ln in lines[1:]:
        parts = ln.split()
        if len(parts) == 2 and parts[0] == "end" and parts[1].isdigit():
            ended = int(parts[1]) > 0  # no stat at all read: /proc is not what we think
        elif len(parts) == 2 and parts[0] == "?":
            unread.append(parts[1])
        elif len(parts) == 2 and parts[0] == "g" and parts[1].isdigit():
            pgid = int(parts[1])
        elif len(parts) == 3 and parts[0].isdigit() and parts[2].isdigit():
            probe.members.append((int(parts[0]), parts[1], int(parts[2])))
        elif len(parts) == 4 and all(parts[i].isdigit() for i in (0, 2, 3)):
            pid, state, pgrp, start = int(parts[0]), parts[1], int(parts[2]), int(parts[3])
            if pgid is None or pgrp == pgid:
                probe.members.append((pid, state, start))
            else:
                probe.outside[pid] = (state, pgrp, start)
    if not probe.boot_id or pgid is None or not ended:
        probe.problem = "the /proc probe came back cut off or empty"
    elif unread:
        probe.problem = f"/proc/{unread[0]}/stat could not be parsed"
    return probe


def verify_ownership(run: RunRecord, probe: GroupProbe) -> Ownership:
    """Which live processes of ``probe`` are provably the run's, and how they may be signalled.

    The recorded process is the anchor: same boot and the exact start time of its PID. Only
    when it is alive, matches, and leads its own process group (what the launch handshake
    recorded) is the whole group signalled. When it has died, the members left in its group
    (a dead server's workers) are ours only if none started before it, and are signalled one by
    one, never as a group. A recorded PID that does not lead ``pgid`` (a launch recorded the
    wrong group) only ever yields that one process.
    """
    if run.pgid is None or run.proc_start is None:
        return Ownership([], "run has no recorded process")
    if probe.problem:
        return Ownership([], probe.problem, verified=False)
    if run.boot_id and probe.boot_id and probe.boot_id != run.boot_id:
        return Ownership([], "host rebooted since launch")
    start = int(run.proc_start)
    live = [(p, st, s) for p, st, s in probe.members if st != "Z"]
    starts = {p: s for p, _st, s in live}
    if run.pid is not None and run.pid != run.pgid:
        return _lone_process(run, probe, start)
    for pid, _st, s in live:
        if pid == run.pid and s != start:
            return Ownership([], f"PID {pid} was reused by another process (start time differs)")
        if s < start:
            return Ownership([], f"process group {run.pgid} now holds process {pid} not ours")
    leader_alive = run.pid in starts
    return Ownership([p for p, _, _ in live], group=leader_alive, starts=starts)


def _lone_process(run: RunRecord, probe: GroupProbe, start: int) -> Ownership:
    """Ownership when the recorded PID is not its group's leader: that exact process only."""
    pid = int(run.pid or 0)
    found = probe.outside.get(pid)
    if found is None:
        found = next(((st, run.pgid or 0, s) for p, st, s in probe.members if p == pid), None)
    if found is None or found[0] == "Z":
        return Ownership([], f"process {pid} is gone")
    if found[2] != start:
        return Ownership([], f"PID {pid} was reused by another process (start time differs)")
    return Ownership([pid], group=False, starts={pid: start})


def run_ownership(t: Transport, run: RunRecord) -> Ownership:
    """The run's live, verified processes; ProcessUnverified when the probe proves nothing."""
    if run.meta.get("slurm"):  # a Slurm run: its job, not a process (remote/slurm.py)
        from glmserve.remote.slurm import job_ownership

        return job_ownership(t, run)
    if run.pgid is None:
        return Ownership([], "never started")
    return require_verified(run, verify_ownership(run, probe_group(t, run.pgid, run.pid)))


def signal_script(run: RunRecord, own: Ownership, sig: str) -> str:
    """Shell sending ``sig`` to what ``own`` proved is the run's, re-checking on the host right
    before each signal: the group only while its leader is still the recorded process (same
    PID, group and start time), otherwise each verified PID alone (same start time)."""

    if own.group and run.pgid is not None and run.pgid == run.pid:
        g = int(run.pgid)
        leader = stat_check(g, g, int(run.proc_start or 0))
        return f"{{ {leader}; }} && kill -{sig} -- -{g}; true"
    parts = []
    for pid in own.pids:
        if pid in own.starts:
            same = stat_check(pid, None, int(own.starts[pid]))
            parts.append(f"{{ {same} && kill -{sig} {int(pid)}; }}")
    return "; ".join([*parts, "true"])


def port_in_use(t: Transport, port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on ``host:port`` of the host (``host``:
    where the server will bind, see :mod:`glmserve.remote.address`)."""
    addr = shlex.quote(f"exec 3<>/dev/tcp/{host}/{int(port)}")
    cmd = f"timeout 3 bash -c {addr} 2>/dev/null"
    return t.run(cmd, timeout=15).rc == 0


# -- launching -------------------------------------------------------------------------------
def resolve_remote_dir(t: Transport, path: str) -> str:
    """Create ``path`` on the host and return it absolute (``~`` expanded there)."""
    res = t.run(f"mkdir -p -- {shell_path(path)} && cd -- {shell_path(path)} && pwd -P", check=True)
    return res.stdout.strip().splitlines()[-1]


def host_adjusted_spec(spec: LaunchSpec, host: HostConfig) -> LaunchSpec:
    """Apply the host's python/venv when hosts.yaml sets them: where SGLang is installed is a
    property of the machine, so it beats the profile's default. The simulator keeps the
    interpreter ``profiles.simulate`` chose (one with glmserve installed)."""
    changes: dict[str, Any] = {}
    if spec.launcher == "simulator":
        return spec
    if host.venv:
        changes["venv"] = host.venv
    if "python" in host.model_fields_set:
        changes["python"] = host.python
    return replace(spec, **changes) if changes else spec


def find_alive_runs(store: RunStore, t: Transport, host: str, port: int) -> list[RunRecord]:
    """Recorded glmserve runs on host:port whose processes are still there.

    A run another glmserve is launching right now (recorded, not started yet) is refused with
    PortClaimed, never marked ended: that would drop a live server from ``status``."""
    alive = []
    for run in store.list_runs(host=host, port=port, live_only=True):
        if launch_in_progress(run):
            by = run.meta.get("launched_by", {})
            raise PortClaimed(
                f"port {port} on {host} is claimed by run {run.run_id}, being launched right "
                f"now (glmserve pid {by.get('pid')}); wait for it, then stop it or pick another "
                "port",
                run.run_id,
            )
        if run.pgid is not None and run_ownership(t, run).alive:
            alive.append(run)
        else:  # seen gone: later launches need not probe it again
            fields: dict[str, Any] = {"ended_at": time.time()}
            if not run.terminal:
                # `glmserve status RUN` re-reads its log for why; FAILED: it never started.
                fields["state"] = "EXITED" if run.pid is not None else "FAILED"
            store.update_run(run.run_id, **fields)
    return alive


def _local_start_time(pid: int) -> int | None:
    """Start time (clock ticks since boot) of a process on this machine, None if gone."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


# How long a run launched from another machine (a store on a shared home) counts as being
# launched without a recorded process: far above an upload plus the handshake wait.
FOREIGN_LAUNCH_GRACE_S = 600.0


def launcher_identity() -> dict[str, Any]:
    """This glmserve process, recorded on a run until the run's process is recorded."""
    pid = os.getpid()
    return {"node": platform.node(), "pid": pid, "start": _local_start_time(pid)}


def launch_in_progress(run: RunRecord) -> bool:
    """The run is recorded but not started yet, and the glmserve launching it still runs.

    Another machine's launcher (a store on a shared home) cannot be looked at: it counts as
    running for ``FOREIGN_LAUNCH_GRACE_S``."""
    if run.pid is not None or run.ended_at is not None or run.terminal:
        return False
    by = run.meta.get("launched_by")
    if not isinstance(by, dict) or not by.get("pid"):
        return False  # recorded by a glmserve without launch tracking
    if by.get("node") != platform.node():  # cannot look: trust it for a while
        return time.time() - run.created_at < FOREIGN_LAUNCH_GRACE_S
    return _local_start_time(int(by["pid"])) == by.get("start")


HANDSHAKE = "server.proc"  # /proc/<pid>/stat of the launched process, written by itself
HANDSHAKE_WAIT_S = 30.0  # a loaded host may take seconds to run setsid; longer is a failure


@dataclass
class Started:
    """What the launched process reported about itself (the handshake), read on the host."""

    pid: int
    pgid: int | None
    start: int | None
    boot_id: str


def start_command(run_dir: str, wait_s: float = HANDSHAKE_WAIT_S) -> str:
    """Shell that starts launch.sh detached and prints the launched process's own handshake.

    The process writes ``/proc/$$/stat`` to ``server.proc`` after ``setsid`` and before it
    execs launch.sh (exec keeps its PID and start time), so the PID, process group and start
    time come from the server itself, not from a guess about ``$!``: ``setsid`` may be slow
    or may fork. No handshake after ``wait_s``: the still-unreaped ``$!`` (it cannot have been
    reused: this shell is its parent) is killed and ``timeout`` reported.
    """
    d = shell_path(run_dir)
    tmp = f"{HANDSHAKE}.tmp"
    inner = f"cat /proc/$$/stat > {tmp} && mv -f {tmp} {HANDSHAKE} && exec bash launch.sh"
    tries = max(1, int(wait_s / 0.05))
    return (
        f"cd {d} || exit 1; rm -f {HANDSHAKE}; "
        f"nohup setsid bash -c {shlex.quote(inner)} > server.log 2>&1 < /dev/null & "
        "pid=$!; gone=0; i=0; "
        f"while [ ! -s {HANDSHAKE} ]; do i=$((i + 1)); "
        '  case "$(cut -d")" -f2 /proc/$pid/stat 2>/dev/null)" in '
        '    " Z"* | "") gone=$((gone + 1));; esac; '
        '  if [ "$gone" -gt 40 ]; then echo "gone $pid"; break; fi; '
        f'  if [ "$i" -gt {tries} ]; then '
        '    kill -KILL "$pid" 2>/dev/null; echo "timeout $pid"; break; fi; '
        "  sleep 0.05; done; "
        f'[ -s {HANDSHAKE} ] && echo "ok $(cat {HANDSHAKE})"; '
        "cat /proc/sys/kernel/random/boot_id"
    )


def parse_started(text: str, what: str) -> Started:
    """The handshake reply: ``ok <stat line>`` (or ``gone PID`` / ``timeout PID``), boot id."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    boot_id = lines[-1].strip() if len(lines) >= 2 else ""
    ok = next((ln for ln in lines if ln.startswith("ok ")), None)
    if ok is not None:
        m = re.match(r"ok (\d+) \(.*\) (\S+) (.*)$", ok)
        rest = m.group(3).split() if m else []
        if m and len(rest) >= 19 and rest[1].isdigit() and rest[18].isdigit():
            return Started(int(m.group(1)), int(rest[1]), int(rest[18]), boot_id)
    for ln in lines:
        word, _, pid = ln.partition(" ")
        if word == "gone" and pid.strip().isdigit():
            return Started(int(pid), None, None, boot_id)  # died at once; its log says why
        if word == "timeout":
            raise GlmserveError(
                f"{what}: the launched process did not report itself within "
                f"{HANDSHAKE_WAIT_S:.0f} s (setsid hung?); it was killed"
            )
    raise GlmserveError(f"{what}: unexpected reply {text.strip()[:200]!r}")


def new_run_record(
    run_id: str, host: HostConfig, spec: LaunchSpec, workdir: str, meta: dict[str, Any] | None
) -> tuple[RunRecord, dict[str, Any]]:
    """The store row of a run about to start (with its port claim) and the ``meta.json`` it
    uploads: one shape for every way a run starts (a process here, a Slurm job)."""
    meta_json = {
        "run_id": run_id,
        "profile": spec.profile,
        "host": host.name,
        "port": spec.port,
        "launcher": spec.launcher,
        "created_at": time.time(),
        "spec": spec.to_dict(),
        **(meta or {}),
    }
    rec = RunRecord(
        run_id=run_id,
        host=host.name,
        host_config=host.model_dump(mode="json"),  # later verbs act on this very entry
        profile=spec.profile,
        port=spec.port,
        run_dir=f"{workdir}/runs/{run_id}",
        launcher=spec.launcher,
        tp_size=spec.tp_size,
        patches=list(spec.patches),
        spec=spec.to_dict(),
        meta={"workdir": workdir, **meta_json, "launched_by": launcher_identity()},
        port_claim=1,
    )
    return rec, meta_json


def start_script(t: Transport, run_dir: str) -> Started:
    """Start launch.sh detached (``nohup setsid``) and return the process's own handshake.

    ``pgid``/``start`` are None when the process was gone before reporting itself (``setsid``
    missing or failing; the log says why and the watcher reports it).
    """
    res = t.run(start_command(run_dir), check=True, what="start launch.sh")
    return parse_started(res.stdout, f"start launch.sh on {t.host.name}")


def launch_run(
    spec: LaunchSpec,
    host_name: HostConfig | str | None = None,
    *,
    replace_existing: bool = False,
    store: RunStore | None = None,
    say: Callable[[str], None] = lambda _m: None,
    meta: dict[str, Any] | None = None,
) -> RunRecord:
    """Upload and start one run of exactly ``spec`` (a deployment first spells its flags for
    the host's SGLang release, ``deploy.preflight.port_for_host``); returns its record (state
    STARTING). Does not wait.

    Order matters: the store is checked and the run's row (claiming host:port, see
    ``RunStore.add_run``) is written before anything is uploaded or started, so a second
    launch on the same port is refused atomically and no server runs that the store does not
    know. If recording the started process fails, it is stopped again (see ``_record_start``).

    ``meta`` is stored with the run (and in its meta.json), e.g. a multi-node group's id and
    this node's rank.

    ``host_name``: the HostConfig the plan resolved (used as it is: hosts.yaml is not read
    again, and ``spec`` already carries its python/venv, see ``deploy.plan``), or a name."""
    host = as_host(host_name)
    if not isinstance(host_name, HostConfig):  # a name: no plan applied the host's python
        spec = host_adjusted_spec(spec, host)
    store = store or RunStore.open()
    store.check()
    t = transport_for(host)
    port = spec.port
    for old in find_alive_runs(store, t, host.name, port):
        if not replace_existing:
            raise ConfigError(
                f"run {old.run_id} (profile {old.profile}) is alive on {host.name}:{port}; "
                f"stop it (glmserve stop {old.run_id}) or launch with --replace"
            )
        say(f"stopping run {old.run_id} on {host.name}:{port} (--replace)")
        stop_run(old.run_id, store=store)
    if port_in_use(t, port, probe_host(bind_host(spec.argv))):
        raise ConfigError(
            f"port {port} on {host.name} is already in use by a process glmserve did not start; "
            "free it or pick another (--set server.port=N)"
        )
    run_id = new_run_id(store)
    workdir = resolve_remote_dir(t, host.resolved_workdir)
    rec, meta_json = new_run_record(run_id, host, spec, workdir, meta)
    run_dir = rec.run_dir
    store.add_run(rec)  # the claim: PortClaimed if another launch got host:port first
    try:
        _upload(t, spec, run_dir, meta_json)
    except BaseException:
        _mark_failed(store, run_id)
        raise
    try:
        started = start_script(t, run_dir)
    except BaseException:
        _stop_if_started(t, rec)  # Ctrl-C or a lost connection while it was being started
        _mark_failed(store, run_id)
        raise
    _record_start(store, t, rec, started)
    return store.get_run(run_id)


def _upload(t: Transport, spec: LaunchSpec, run_dir: str, meta: dict[str, Any]) -> None:
    """meta.json, launch.sh and (for patched profiles) the runtime files, into ``run_dir``."""
    from glmserve.config.render import render_script

    files = {"meta.json": json.dumps(meta, indent=2, default=str).encode()}
    if spec.patches:
        from glmserve.runtime import runtime_files

        files.update({f"runtime/{rel}": data for rel, data in runtime_files().items()})
    t.put_tree(run_dir, files)  # one round trip for all of them
    t.put(f"{run_dir}/launch.sh", render_script(spec).encode(), mode=0o755)


def _mark_failed(store: RunStore, run_id: str) -> None:
    """The launch did not get its process started: end the run (freeing its port claim)."""
    with contextlib.suppress(GlmserveError):  # the launch's own error is the one to report
        store.update_run(run_id, state="FAILED", ended_at=time.time())


def read_handshake(t: Transport, run_dir: str) -> Started | None:
    """The handshake a launched process left in ``run_dir``; None when there is none."""
    d = shell_path(run_dir)
    cmd = f"sed 's/^/ok /' {d}/{HANDSHAKE} 2>/dev/null; cat /proc/sys/kernel/random/boot_id"
    try:
        started = parse_started(t.run(cmd, timeout=30).stdout, "read handshake")
    except GlmserveError:
        return None
    return started if started.pgid is not None else None


def _stop_if_started(t: Transport, rec: RunRecord, wait_s: float = 5.0) -> None:
    """A start that failed or was interrupted (Ctrl-C, a lost connection): the detached
    process may still come up (a slow ``setsid``), so wait ``wait_s`` for its handshake and
    stop it (best effort; the launch's own error is what the user sees)."""
    end = time.monotonic() + wait_s
    with contextlib.suppress(GlmserveError):
        started = read_handshake(t, rec.run_dir)
        while started is None and time.monotonic() < end:
            time.sleep(0.25)
            started = read_handshake(t, rec.run_dir)
        if started is not None:
            live = replace(
                rec,
                pid=started.pid,
                pgid=started.pgid,
                proc_start=str(started.start),
                boot_id=started.boot_id,
            )
            stop_process(t, live, timeout=5)


def _record_start(store: RunStore, t: Transport, rec: RunRecord, started: Started) -> None:
    """Record the started process; if the store cannot take it, stop that process again
    (it is known from the handshake, no store needed) and say so, with its PID when even
    stopping failed, so nothing runs that no record points at."""
    fields: dict[str, Any] = {
        "pid": started.pid,
        "pgid": started.pgid,
        "proc_start": None if started.start is None else str(started.start),
        "boot_id": started.boot_id,
    }
    try:
        store.update_run(rec.run_id, **fields)
        store.add_event(rec.run_id, "STARTING", None, {"pid": started.pid, "pgid": started.pgid})
    except BaseException as exc:
        live = replace(rec, **fields)
        where = f"run {rec.run_id} on {rec.host} (pid {started.pid}, group {started.pgid})"
        try:
            stop_process(t, live, timeout=5)
        except BaseException as stop_exc:
            raise GlmserveError(
                f"{where} started but could not be recorded ({exc}) nor stopped ({stop_exc}); "
                f"it is still running: stop it by hand (kill -TERM -- -{started.pgid})"
            ) from exc
        if not isinstance(exc, Exception):
            raise  # Ctrl-C: the process it started is stopped; the interrupt goes on
        raise GlmserveError(
            f"{where} started but could not be recorded ({exc or type(exc).__name__}); it was "
            "stopped again"
        ) from exc


# -- stopping --------------------------------------------------------------------------------
def _wait_gone(t: Transport, run: RunRecord, deadline_s: float) -> Ownership:
    end = time.monotonic() + deadline_s
    own = run_ownership(t, run)
    while own.alive and time.monotonic() < end:
        time.sleep(0.1)
        own = run_ownership(t, run)
    return own


def gpu_compute_pids(t: Transport) -> list[int] | None:
    """PIDs nvidia-smi lists as GPU compute processes; None where there is no nvidia-smi."""
    res = t.run(
        "command -v nvidia-smi >/dev/null || { echo NO_NVIDIA_SMI; exit 0; }; "
        "nvidia-smi --query-compute-apps=pid --format=csv,noheader",
        timeout=30,
    )
    if "NO_NVIDIA_SMI" in res.stdout or not res.ok:
        return None
    return [int(x) for x in res.stdout.split() if x.strip().isdigit()]


def stop_process(t: Transport, run: RunRecord, timeout: float = 15.0) -> dict[str, Any]:
    """TERM what provably is the run's, wait ``timeout``, KILL, verify; the store is not used.

    Each signal is sent by :func:`signal_script`, which re-checks start times on the host right
    before it, so nothing but the recorded process's group (or its verified members) is hit.
    """
    own = run_ownership(t, run)
    report: dict[str, Any] = {"run_id": run.run_id, "host": run.host, "signalled": [], "left": []}
    known_pids = set(own.pids) | set(run.meta.get("ready_pids", []))
    if not own.alive:
        report["note"] = own.reason or "not running"
    else:
        report["signalled"] = own.pids
        t.run(signal_script(run, own, "TERM"))
        own = _wait_gone(t, run, timeout)
        if own.alive:
            t.run(signal_script(run, own, "KILL"))  # own was re-verified just now
            report["killed"] = own.pids
            own = _wait_gone(t, run, 10)
        report["left"] = own.pids
    gpu = gpu_compute_pids(t)
    if gpu is not None:
        report["gpu_left"] = sorted(set(gpu) & known_pids)
        report["left"] = sorted(set(report["left"]) | set(report["gpu_left"]))
    if report["left"]:
        raise GlmserveError(
            f"run {run.run_id}: processes still alive after KILL: {report['left']} on {run.host}"
        )
    return report


def _await_launch(store: RunStore, run: RunRecord, wait_s: float = 60.0) -> RunRecord:
    """A run another glmserve is launching right now: wait until its process is recorded
    (stopping it before would mark it stopped while its server comes up, unrecorded)."""
    end = time.monotonic() + wait_s
    while launch_in_progress(run) and time.monotonic() < end:
        time.sleep(0.2)
        run = store.get_run(run.run_id)
    if launch_in_progress(run):
        raise GlmserveError(
            f"run {run.run_id} is still being launched (glmserve pid "
            f"{run.meta.get('launched_by', {}).get('pid')}); stop it once it has started"
        )
    return run


def stop_run(run_id: str, timeout: float = 15.0, store: RunStore | None = None) -> dict[str, Any]:
    """TERM the run's process group, wait ``timeout``, KILL, verify nothing of it is left.

    Recording the stop is best effort: when the store cannot be written (a full disk) the
    processes are stopped all the same and the report says ``recorded: False`` and why."""
    store = store or RunStore.open()
    run = _await_launch(store, store.get_run(run_id))
    # Said before the first signal: a watcher (a `launch` still waiting on this run) or a
    # `status` that finds the processes gone meanwhile must not call it a crash or an exit.
    t = transport_for_run(run)
    note = host_note(run)
    if run.pgid is not None:
        run_ownership(t, run)  # unverifiable: ProcessUnverified, before any STOPPING is said
    with contextlib.suppress(StoreError):
        store.add_event(run.run_id, "STOPPING", None, {"by_pid": os.getpid()})
    if run.meta.get("slurm"):  # a Slurm run: scancel of its verified job
        from glmserve.remote.slurm import cancel_job

        report = cancel_job(t, run, timeout)
    else:
        report = stop_process(t, run, timeout)
    if note:
        report["host_note"] = note  # acted on the recorded host all the same
    with contextlib.suppress(StoreError):
        run = store.get_run(run.run_id)  # a verdict reached meanwhile (CRASHED, STALLED) holds
    fields: dict[str, Any] = {"ended_at": run.ended_at or time.time()}
    if not run.terminal:
        fields["state"] = "STOPPED"
    try:
        store.update_run(run.run_id, **fields)
        store.add_event(run.run_id, "STOPPED", None, report)
        report["recorded"] = True
    except StoreError as exc:
        report["recorded"] = False
        report["store_error"] = str(exc)
    return report


def stop_runs(
    runs: list[RunRecord], timeout: float = 15.0, store: RunStore | None = None
) -> list[dict[str, Any]]:
    """Stop every run in ``runs``, each tried whatever happened to the others: one report per
    run, ``ok`` False with ``error`` (and ``exit_code``) for those that failed."""
    store = store or RunStore.open()
    reports = []
    for run in runs:
        try:
            rep = {**stop_run(run.run_id, timeout=timeout, store=store), "ok": True}
        except GlmserveError as exc:
            rep = {"run_id": run.run_id, "host": run.host, "ok": False, "error": str(exc)}
            rep["exit_code"] = exc.exit_code
            note = host_note(run)
            if note:
                rep["host_note"] = note
        if "group_id" in run.meta:
            rep["node_rank"] = run.meta.get("node_rank")
            rep["group_id"] = run.meta.get("group_id")
        reports.append(rep)
    return reports


def stop_failure(reports: list[dict[str, Any]]) -> StopFailed | None:
    """The error summing up failed stops (None when every run stopped)."""
    failed = [r for r in reports if not r["ok"]]
    if not failed:
        return None
    names = ", ".join(f"{r['run_id']} ({r['host']})" for r in failed)
    return StopFailed(
        f"{len(failed)} of {len(reports)} run(s) not stopped: {names}; first: {failed[0]['error']}",
        int(failed[0]["exit_code"]),
    )


# -- reading ---------------------------------------------------------------------------------
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


@contextlib.contextmanager
def open_endpoint(run_id: str) -> Iterator[str]:
    """Base URL reaching the run's HTTP server from here; an ssh ``-L`` forward when remote."""
    with RunStore.open() as store:
        run = store.get_run(run_id)
    with run_base_url(run, transport_for_run(run)) as base:
        yield base


@contextlib.contextmanager
def run_base_url(run: RunRecord, t: Transport) -> Iterator[str]:
    """The run's server from here: a Slurm job's node address when glmserve runs on the
    login host (an ssh ``-L`` forward via the login host to ``node:port`` when the login is
    reached by ssh: the compute nodes need not be reachable from here), else the address
    the server binds (``run_probe_host``), through an ssh ``-L`` forward when remote."""
    addr = (run.meta.get("slurm") or {}).get("node_addr")
    if addr and t.host.is_local:
        host = f"[{addr}]" if ":" in addr else addr
        yield f"http://{host}:{int(run.port)}"
        return
    if addr:  # a Slurm login host over ssh: the node, directly or forwarded via the login
        from glmserve.remote.slurm import reach_directly

        if reach_directly(t.host, addr, int(run.port)):
            yield f"http://{url_host(addr)}:{int(run.port)}"
            return
        with t.endpoint(run.port, addr) as base:  # to the node, not the login's loopback
            yield base
        return
    with t.endpoint(run.port, run_probe_host(run.spec)) as base:  # the address it binds
        yield base


def health_status(base_url: str, timeout: float = 1.0) -> int | None:
    """Status code of ``GET /health``; None when nothing answered."""
    import httpx

    try:
        return httpx.get(f"{base_url}/health", timeout=timeout).status_code
    except httpx.HTTPError:
        return None


def health_ok(base_url: str, timeout: float = 1.0) -> bool:
    """``GET /health`` answered 200."""
    return health_status(base_url, timeout) == 200
