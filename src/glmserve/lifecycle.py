"""Launch, find, stop and read runs on a host: the seeds' by-hand loop, recorded and safe.

A run is ``<workdir>/runs/<run_id>/{launch.sh, meta.json, server.log, runtime/...}`` on the host,
started with ``nohup setsid bash launch.sh > server.log 2>&1 &`` so it survives the ssh session
and owns a fresh process group. The store keeps its PID, process group and the process start
time (``/proc/<pid>/stat`` field 22) plus the host's boot id: before any signal we re-read them
and only touch processes that provably belong to the run, so a reused PID is never hit. Stopping
is by process group (TERM, wait, KILL, verify), never by name.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from glmserve.errors import ConfigError, GlmserveError, RemoteCommandError
from glmserve.hosts import HostConfig, get_host
from glmserve.spec import LaunchSpec
from glmserve.store import RunRecord, RunStore
from glmserve.transport import Transport, shell_path, transport_for

# After ``sed`` drops "pid (comm) " from /proc/<pid>/stat: $1 state, $3 pgrp, $20 starttime.
_STAT_FIELDS = r"sed -E 's/^([0-9]+) \(.*\) /\1 /'"


@dataclass
class GroupProbe:
    """What is running in a run's process group right now, as seen on the host."""

    boot_id: str
    members: list[tuple[int, str, int]] = field(default_factory=list)  # (pid, state, starttime)

    @property
    def live_pids(self) -> list[int]:
        return [pid for pid, st, _ in self.members if st != "Z"]


@dataclass
class Ownership:
    """Result of checking a probe against the recorded run."""

    pids: list[int]  # live processes that provably belong to the run
    reason: str = ""  # why nothing (or not everything) is ours, for messages

    @property
    def alive(self) -> bool:
        return bool(self.pids)


def new_run_id(store: RunStore) -> str:
    """Short, unique, prefix-friendly: 8 hex digits."""
    while True:
        rid = secrets.token_hex(4)
        try:
            store.get_run(rid)
        except GlmserveError:
            return rid


def transport_for_run(run: RunRecord) -> Transport:
    return transport_for(get_host(run.host))


# -- process probing -------------------------------------------------------------------------
def probe_script(pgid: int) -> str:
    """Shell printing the boot id, then ``pid state starttime`` of each member of ``pgid``."""
    return (
        "cat /proc/sys/kernel/random/boot_id; "
        f"cat /proc/[0-9]*/stat 2>/dev/null | {_STAT_FIELDS} "
        f"| awk -v g={int(pgid)} '$4 == g {{print $1, $2, $21}}'"
    )


def probe_group(t: Transport, pgid: int) -> GroupProbe:
    """Boot id and every process whose process group is ``pgid`` (one host command)."""
    res = t.run(probe_script(pgid), check=True, what="process probe", timeout=30)
    return parse_probe(res.stdout)


def parse_probe(text: str) -> GroupProbe:
    lines = text.splitlines()
    probe = GroupProbe(boot_id=lines[0].strip() if lines else "")
    for ln in lines[1:]:
        parts = ln.split()
        if len(parts) == 3 and parts[0].isdigit() and parts[2].isdigit():
            probe.members.append((int(parts[0]), parts[1], int(parts[2])))
    return probe


def verify_ownership(run: RunRecord, probe: GroupProbe) -> Ownership:
    """Which live processes of ``probe`` are provably the run's.

    Same boot; the leader (if still there) has the recorded start time; every other member
    started no earlier than the leader. Anything else means the PID/PGID was reused.
    """
    if run.pgid is None or run.proc_start is None:
        return Ownership([], "run has no recorded process")
    if run.boot_id and probe.boot_id and probe.boot_id != run.boot_id:
        return Ownership([], "host rebooted since launch")
    start = int(run.proc_start)
    live = [(p, st, s) for p, st, s in probe.members if st != "Z"]
    for pid, _st, s in live:
        if pid == run.pid and s != start:
            return Ownership([], f"PID {pid} was reused by another process (start time differs)")
        if s < start:
            return Ownership([], f"process group {run.pgid} now holds process {pid} not ours")
    return Ownership([p for p, _, _ in live])


def run_ownership(t: Transport, run: RunRecord) -> Ownership:
    if run.pgid is None:
        return Ownership([], "never started")
    return verify_ownership(run, probe_group(t, run.pgid))


def port_in_use(t: Transport, port: int) -> bool:
    """True when something accepts TCP connections on ``127.0.0.1:port`` of the host."""
    cmd = f"timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{int(port)}' 2>/dev/null"
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
    """Recorded glmserve runs on host:port whose processes are still there."""
    alive = []
    for run in store.list_runs(host=host, port=port, live_only=True):
        if run.pgid is not None and run_ownership(t, run).alive:
            alive.append(run)
        else:  # seen gone: later launches need not probe it again
            fields: dict[str, Any] = {"ended_at": time.time()}
            if not run.terminal:
                fields["state"] = "EXITED"  # `glmserve status RUN` re-reads its log for why
            store.update_run(run.run_id, **fields)
    return alive


def start_script(t: Transport, run_dir: str) -> tuple[int, int | None, int | None, str]:
    """Start launch.sh detached; (pid, pgid, starttime, boot_id) read on the host.

    pgid/starttime are None when the process was already gone (it failed at once; the log
    says why and the watcher reports it).

    ``setsid`` does not fork here (a background job of a non-interactive shell is not a group
    leader), so ``$!`` is the server's PID and its own process group; we wait until setsid has
    run before reading the group id.
    """
    d = shell_path(run_dir)
    cmd = (
        f"cd {d} || exit 1; nohup setsid bash launch.sh > server.log 2>&1 < /dev/null & "
        "pid=$!; for i in $(seq 100); do "
        f"  st=$({_STAT_FIELDS} /proc/$pid/stat 2>/dev/null) || break; "
        '  set -- $st; [ "$4" = "$pid" ] && break; sleep 0.02; done; '
        f'echo "$pid $({_STAT_FIELDS} /proc/$pid/stat 2>/dev/null | cut -d" " -f4,21)"; '
        "cat /proc/sys/kernel/random/boot_id"
    )
    res = t.run(cmd, check=True, what="start launch.sh")
    lines = res.stdout.split("\n")
    parts = lines[0].split()
    if not parts or not parts[0].isdigit():
        raise RemoteCommandError(res, what="start launch.sh")
    if len(parts) != 3:
        return int(parts[0]), None, None, lines[1].strip()
    pid, pgid, starttime = (int(x) for x in parts)
    return pid, pgid, starttime, lines[1].strip()


def launch_run(
    spec: LaunchSpec,
    host_name: str | None = None,
    *,
    replace_existing: bool = False,
    store: RunStore | None = None,
    say: Callable[[str], None] = lambda _m: None,
    meta: dict[str, Any] | None = None,
) -> RunRecord:
    """Upload and start one run; returns its record (state STARTING). Does not wait.

    ``meta`` is stored with the run (and in its meta.json), e.g. a multi-node group's id and
    this node's rank."""
    host = get_host(host_name)
    spec = host_adjusted_spec(spec, host)
    store = store or RunStore.open()
    t = transport_for(host)
    from glmserve.portable import port_for_host

    spec = port_for_host(spec, t, say)  # the flags as the host's SGLang release spells them
    port = spec.port
    for old in find_alive_runs(store, t, host.name, port):
        if not replace_existing:
            raise ConfigError(
                f"run {old.run_id} (profile {old.profile}) is alive on {host.name}:{port}; "
                f"stop it (glmserve stop {old.run_id}) or launch with --replace"
            )
        say(f"stopping run {old.run_id} on {host.name}:{port} (--replace)")
        stop_run(old.run_id, store=store)
    if port_in_use(t, port):
        raise ConfigError(
            f"port {port} on {host.name} is already in use by a process glmserve did not start; "
            "free it or pick another (--set server.port=N)"
        )
    from glmserve.render import render_script

    run_id = new_run_id(store)
    workdir = resolve_remote_dir(t, host.resolved_workdir)
    run_dir = f"{workdir}/runs/{run_id}"
    meta = {
        "run_id": run_id,
        "profile": spec.profile,
        "host": host.name,
        "port": port,
        "launcher": spec.launcher,
        "created_at": time.time(),
        "spec": spec.to_dict(),
        **(meta or {}),
    }
    files = {"meta.json": json.dumps(meta, indent=2, default=str).encode()}
    if spec.patches:
        from glmserve.runtime import runtime_files

        files.update({f"runtime/{rel}": data for rel, data in runtime_files().items()})
    t.put_tree(run_dir, files)  # one round trip for all of them
    t.put(f"{run_dir}/launch.sh", render_script(spec).encode(), mode=0o755)
    rec = RunRecord(
        run_id=run_id,
        host=host.name,
        profile=spec.profile,
        port=port,
        run_dir=run_dir,
        launcher=spec.launcher,
        tp_size=spec.tp_size,
        patches=list(spec.patches),
        spec=spec.to_dict(),
        meta={"workdir": workdir, **(meta or {})},
    )
    store.add_run(rec)
    try:
        pid, pgid, starttime, boot_id = start_script(t, run_dir)
    except GlmserveError:
        store.update_run(run_id, state="FAILED", ended_at=time.time())
        raise
    store.update_run(
        run_id,
        pid=pid,
        pgid=pgid,
        proc_start=None if starttime is None else str(starttime),
        boot_id=boot_id,
    )
    store.add_event(run_id, "STARTING", None, {"pid": pid, "pgid": pgid})
    return store.get_run(run_id)


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


def stop_run(run_id: str, timeout: float = 15.0, store: RunStore | None = None) -> dict[str, Any]:
    """TERM the run's process group, wait ``timeout``, KILL, verify nothing of it is left."""
    store = store or RunStore.open()
    run = store.get_run(run_id)
    t = transport_for_run(run)
    own = run_ownership(t, run)
    report: dict[str, Any] = {"run_id": run.run_id, "host": run.host, "signalled": [], "left": []}
    known_pids = set(own.pids) | set(run.meta.get("ready_pids", []))
    if not own.alive:
        report["note"] = own.reason or "not running"
    else:
        report["signalled"] = own.pids
        t.run(f"kill -TERM -- -{int(run.pgid or 0)} 2>/dev/null; true")
        own = _wait_gone(t, run, timeout)
        if own.alive:
            # Re-verified just now (same group, same start times): KILL is safe.
            t.run(f"kill -KILL -- -{int(run.pgid or 0)} 2>/dev/null; true")
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
    fields: dict[str, Any] = {"ended_at": run.ended_at or time.time()}
    if not run.terminal:
        fields["state"] = "STOPPED"
    store.update_run(run.run_id, **fields)
    store.add_event(run.run_id, "STOPPED", None, report)
    return report


# -- reading ---------------------------------------------------------------------------------
def read_log_bytes(t: Transport, path: str, offset: int = 0) -> tuple[bytes, int]:
    """Everything of ``path`` from ``offset`` (several reads for a big log)."""
    chunks = []
    while True:
        data, new = t.read_from(path, offset)
        if new < offset:  # truncated under us: start over
            chunks = []
        chunks.append(data)
        offset = new
        if not data:
            return b"".join(chunks), offset


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
    with transport_for_run(run).forward(run.port) as local_port:
        yield f"http://127.0.0.1:{local_port}"


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
