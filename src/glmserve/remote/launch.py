"""Upload and start one run on a host: the seeds' by-hand loop, recorded and safe.

A run is ``<workdir>/runs/<run_id>/{launch.sh, meta.json, server.log, runtime/...}`` on the host,
started with ``nohup setsid bash launch.sh > server.log 2>&1 &`` so it survives the ssh session
and owns a fresh process group. The launched process reports itself (the ``server.proc``
handshake) and the store records it before anything else happens, so no server runs that the
store does not know (what is recorded, and why: :mod:`glmserve.remote.process`).
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from glmserve.config.spec import LaunchSpec
from glmserve.errors import ConfigError, GlmserveError, PortClaimed
from glmserve.remote.address import bind_host, probe_host
from glmserve.remote.host_config import HostConfig
from glmserve.remote.hosts import as_host
from glmserve.remote.launcher import launch_in_progress, launcher_identity
from glmserve.remote.process import run_ownership
from glmserve.remote.stop import stop_process, stop_run
from glmserve.remote.transport import Transport, shell_path, transport_for
from glmserve.store import RunRecord, RunStore


def new_run_id(store: RunStore) -> str:
    """Short, unique, prefix-friendly: 8 hex digits."""
    while True:
        rid = secrets.token_hex(4)
        try:
            store.get_run(rid)
        except GlmserveError:
            return rid


def port_in_use(t: Transport, port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on ``host:port`` of the host (``host``:
    where the server will bind, see :mod:`glmserve.remote.address`)."""
    addr = shlex.quote(f"exec 3<>/dev/tcp/{host}/{int(port)}")
    cmd = f"timeout 3 bash -c {addr} 2>/dev/null"
    return t.run(cmd, timeout=15).rc == 0


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


def adopt_started(store: RunStore, t: Transport, run: RunRecord) -> RunRecord:
    """A run recorded without its process whose launch is over (its glmserve killed between
    starting the server and recording it: SIGKILL, a lost machine): the server may be up all
    the same, and its own handshake in the run dir says which process it is. Record it, so
    ``status`` and ``stop`` judge that server instead of "never started" (a false "nothing
    left" for a server that serves). Unchanged when there is no handshake; when the store
    cannot be written (``stop`` on a read-only home) the returned record carries it anyway."""
    if (
        run.pid is not None
        or run.ended_at is not None
        or run.terminal
        or run.meta.get("slurm")
        or launch_in_progress(run)
    ):
        return run
    started = read_handshake(t, run.run_dir)
    if started is None:
        return run
    fields = _process_fields(started)
    try:
        store.update_run(run.run_id, **fields)
        store.add_event(run.run_id, "STARTING", None, {"pid": started.pid, "adopted": True})
    except GlmserveError:
        return replace(run, **fields)
    return store.get_run(run.run_id)


def _process_fields(started: Started) -> dict[str, Any]:
    """The run record's process identity from a start handshake (what stop verifies)."""
    return {
        "pid": started.pid,
        "pgid": started.pgid,
        "proc_start": None if started.start is None else str(started.start),
        "boot_id": started.boot_id,
    }


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
            stop_process(t, replace(rec, **_process_fields(started)), timeout=5)


def _record_start(store: RunStore, t: Transport, rec: RunRecord, started: Started) -> None:
    """Record the started process; if the store cannot take it, stop that process again
    (it is known from the handshake, no store needed) and say so, with its PID when even
    stopping failed, so nothing runs that no record points at."""
    fields = _process_fields(started)
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
