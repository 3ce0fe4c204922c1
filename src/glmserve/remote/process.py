"""Which processes are a run's, and how to signal them: process control by recorded PID/PGID.

A run is started (:mod:`glmserve.remote.launch`) with ``nohup setsid bash launch.sh`` so it
owns a fresh process group. The launched process reports itself (``server.proc``, its own
``/proc/<pid>/stat`` written after ``setsid``), and the store keeps that PID, process group and
start time (field 22) plus the host's boot id: before any signal we re-read them and only touch
processes that provably belong to the run, so a reused PID or a stranger's group is never hit.
Signalling is by process group while its leader is the recorded process, else by verified PID,
never by name (stopping: :mod:`glmserve.remote.stop`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from glmserve.errors import ProcessUnverified

# Re-exported for bench/ (telemetry, contention, session imports them from here); the rest
# of glmserve imports them from their homes, and so should bench once its current work lands.
from glmserve.remote.run_host import transport_for_run as transport_for_run
from glmserve.remote.runlog import log_size as log_size
from glmserve.remote.runlog import read_log_bytes as read_log_bytes
from glmserve.remote.transport import Transport
from glmserve.store import RunRecord


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
