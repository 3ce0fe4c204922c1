"""A run as a Slurm job: submit it, read its state, cancel exactly it.

On a ``kind: slurm`` host glmserve does not own processes: the scheduler does. A run is still
``<workdir>/runs/<run_id>/{launch.sh, meta.json, server.log}`` (on the cluster's shared
filesystem), but ``job.sbatch`` (the host's ``#SBATCH`` header, then ``exec bash launch.sh``)
is handed to ``sbatch`` on the login host, and the store keeps the job's id, name, user,
submit time and cluster instead of a PID.

Those four identify the job the way a PID plus start time identify a process: ``scancel`` is
sent only after ``scontrol show job`` shows the recorded name, user and submit time for the
recorded id, and with ``--name``/``--user`` filters so that even an id reused between the
check and the cancel cannot hit another job. Every command runs on the login host through the
host's transport (locally when there is no ``login``), so the nodes need not be reachable.
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from glmserve.errors import GlmserveError, RemoteCommandError
from glmserve.remote.host_config import HostConfig
from glmserve.remote.process import Ownership
from glmserve.remote.transport import Transport, shell_path
from glmserve.store import RunRecord

JOB_SCRIPT = "job.sbatch"
# A job in one of these states holds (or waits for) its allocation.
ACTIVE = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING"}
)
QUEUED = frozenset({"PENDING", "REQUEUED", "CONFIGURING"})
# How a job that ended by the scheduler's hand is judged (JobState -> verdict). A job that
# ran out its script (COMPLETED/FAILED) is judged by its log, like any exited server.
SCHEDULER_VERDICTS = {
    "TIMEOUT": "TIME_LIMIT",
    "DEADLINE": "TIME_LIMIT",
    "NODE_FAIL": "NODE_FAIL",
    "BOOT_FAIL": "NODE_FAIL",
    "PREEMPTED": "PREEMPTED",
}
_KV = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9/:_]*)=(\S*)")


def job_name(run_id: str) -> str:
    return f"glmserve-{run_id}"


@dataclass
class JobInfo:
    """One job as ``scontrol show job -o`` shows it."""

    job_id: str
    name: str
    user: str
    submit_time: str
    state: str
    reason: str
    nodes: str
    exit_code: str = ""
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def queued(self) -> bool:
        return self.state in QUEUED

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"


def parse_job(line: str) -> JobInfo | None:
    """A ``scontrol show job -o`` line; None when it is not one."""
    kv = dict(_KV.findall(line))
    if "JobId" not in kv:
        return None
    user = kv.get("UserId", "").split("(", 1)[0]
    state = kv.get("JobState", "").split()[0] if kv.get("JobState") else ""
    nodes = kv.get("NodeList", "")
    return JobInfo(
        job_id=kv["JobId"],
        name=kv.get("JobName", ""),
        user=user,
        submit_time=kv.get("SubmitTime", ""),
        state=state,
        reason=kv.get("Reason", ""),
        nodes="" if nodes in ("(null)", "None") else nodes,
        exit_code=kv.get("ExitCode", ""),
        fields=kv,
    )


def job_script(host: HostConfig) -> str:
    """``job.sbatch``: the host's ``#SBATCH`` header, then the rendered launch script.

    The header values were checked for shape when the host entry was read (plain words, no
    spaces or quotes), so each line is exactly one option for sbatch's own parser.
    """
    opts = host.slurm.header_options() if host.slurm else []
    lines = ["#!/bin/bash"]
    lines += [f"#SBATCH --{k}={v}" if v != "" else f"#SBATCH --{k}" for k, v in opts]
    lines += ["exec bash launch.sh", ""]
    return "\n".join(lines)


# The rank-0 node's address as the job sees it: the first host of the allocation, by its
# NodeAddr when slurmctld has one (NodeName need not resolve), else the name itself.
_HEAD_ADDR = (
    'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
    "addr=$(scontrol show node -o \"$head\" | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')\n"
)


def multinode_job_script(host: HostConfig, nnodes: int, dist_port: int, argv: list[str]) -> str:
    """``job.sbatch`` for a multi-node profile as ONE job: ``--nodes N`` and one ``srun`` task
    per node, each starting that node's server (``argv``, the SGLang command without its
    node flags) with ``--nnodes N --node-rank $SLURM_NODEID --dist-init-addr HEAD:PORT``,
    HEAD being the first host of ``scontrol show hostnames $SLURM_JOB_NODELIST``. Every word
    of ``argv`` is shlex-quoted; only the two variables are expanded, by the task's shell.
    ``--kill-on-bad-exit``: one node's server dying ends the others (NCCL would hang)."""
    if nnodes < 2:
        raise ValueError(f"a multi-node job needs at least 2 nodes, got {nnodes}")
    opts = host.slurm.header_options() if host.slurm else []
    opts = [(k, v) for k, v in opts if k not in ("ntasks-per-node", "ntasks")]
    opts += [("nodes", str(nnodes)), ("ntasks-per-node", "1")]
    server = " ".join(shlex.quote(w) for w in argv)
    task = (
        f'exec {server} --nnodes {nnodes} --node-rank "$SLURM_NODEID" '
        '--dist-init-addr "$GLMSERVE_DIST_INIT_ADDR"'
    )
    lines = ["#!/bin/bash"]
    lines += [f"#SBATCH --{k}={v}" if v != "" else f"#SBATCH --{k}" for k, v in opts]
    lines += [
        _HEAD_ADDR.rstrip("\n"),
        f'export GLMSERVE_DIST_INIT_ADDR="${{addr:-$head}}:{int(dist_port)}"',
        f"exec srun --nodes={nnodes} --ntasks={nnodes} --ntasks-per-node=1 "
        f"--kill-on-bad-exit=1 bash -c {shlex.quote(task)}",
        "",
    ]
    return "\n".join(lines)


def submit_command(run_dir: str, run_id: str) -> str:
    """Shell (on the login host) that submits ``job.sbatch`` from ``run_dir`` and prints
    ``jid <id[;cluster]>``, the job's ``scontrol`` line and the cluster's name."""
    d = shell_path(run_dir)
    name = shlex.quote(job_name(run_id))
    out = shlex.quote(f"{run_dir}/server.log")
    return (
        f"cd {d} || exit 1; "
        f"jid=$(sbatch --parsable --job-name={name} --output={out} --open-mode=append "
        f"--no-requeue --chdir={d} {JOB_SCRIPT}) || exit 1; "
        'echo "jid $jid"; scontrol show job -o "${jid%%;*}"; '
        "scontrol show config 2>/dev/null | sed -n 's/^ClusterName *= *//p' | head -n 1"
    )


def submit(
    t: Transport, host: HostConfig, run_dir: str, run_id: str, script: str | None = None
) -> dict[str, Any]:
    """Write ``job.sbatch`` (``script``, default :func:`job_script`) and submit it; the job's
    record (id, name, user, submit time, cluster) for the run's ``meta["slurm"]``.
    RemoteCommandError when sbatch refuses."""
    body = job_script(host) if script is None else script
    t.put(f"{run_dir}/{JOB_SCRIPT}", body.encode(), mode=0o755)
    res = t.run(submit_command(run_dir, run_id), timeout=60)
    if not res.ok:
        raise RemoteCommandError(res, what=f"sbatch on {host.name}")
    lines = res.stdout.splitlines()
    jid_line = next((ln for ln in lines if ln.startswith("jid ")), "")
    jid, _, cluster = jid_line[4:].strip().partition(";")
    info = next((j for j in map(parse_job, lines) if j is not None), None)
    if not jid.isdigit() or info is None or info.job_id != jid:
        raise GlmserveError(f"sbatch on {host.name}: unexpected reply {res.stdout[:200]!r}")
    cluster = cluster or (lines[-1].strip() if lines and "=" not in lines[-1] else "")
    return {
        "job_id": jid,
        "job_name": info.name,
        "user": info.user,
        "submit_time": info.submit_time,
        "command": info.fields.get("Command", ""),
        "cluster": cluster,
        "submitted_at": time.time(),
    }


def job_record(run: RunRecord) -> dict[str, Any] | None:
    """The job a run was submitted as (None: not a Slurm run)."""
    rec = run.meta.get("slurm")
    return rec if isinstance(rec, dict) and rec.get("job_id") else None


def job_info(t: Transport, job_id: str) -> JobInfo | None:
    """The job as slurmctld has it now; None once it has forgotten it (after MinJobAge)."""
    res = t.run(f"scontrol show job -o {int(job_id)} 2>&1", timeout=30)
    if not res.ok:
        if "Invalid job id" in res.stdout:
            return None
        raise RemoteCommandError(res, what=f"scontrol show job on {t.host.name}")
    return next((j for j in map(parse_job, res.stdout.splitlines()) if j), None)


def mismatch(rec: dict[str, Any], info: JobInfo, script: bool = True) -> str | None:
    """Why ``info`` is not the recorded job (None: it is): name, user, submit time and the
    job script's path (the run's own folder: a job of the same name submitted in the same
    second by the same user still differs there)."""
    for key, seen in (
        ("job_name", info.name),
        ("user", info.user),
        ("submit_time", info.submit_time),
        ("command", info.fields.get("Command", "")),
    ):
        if key == "command" and not script:  # sacct has no Command (checked by WorkDir)
            continue
        if rec.get(key) != seen:
            return f"its {key.replace('_', ' ')} is {seen!r}, not the recorded {rec.get(key)!r}"
    return None


def node_address(t: Transport, nodes: str) -> str | None:
    """The address of the first node of ``nodes`` (``scontrol show node``'s NodeAddr)."""
    if not nodes:
        return None
    cmd = (
        f"n=$(scontrol show hostnames {shlex.quote(nodes)} | head -n 1) && "
        'scontrol show node -o "$n"'
    )
    res = t.run(cmd, timeout=30)
    m = re.search(r"(?:^|\s)NodeAddr=(\S+)", res.stdout)
    return m.group(1) if res.ok and m else None


def reach_directly(host: HostConfig, addr: str, port: int, timeout: float = 1.0) -> bool:
    """Whether glmserve talks to a job's server at ``addr:port`` itself rather than through
    an ssh forward via the login host: ``slurm.reach`` (direct/forward), or for ``auto``
    whether a TCP connect from here succeeds (compute nodes are often on a network only
    the login host sees; a forward adds the tunnel to every measured request)."""
    import socket

    mode = host.slurm.reach if host.slurm else "auto"
    if mode != "auto":
        return mode == "direct"
    try:
        socket.create_connection((addr, port), timeout=timeout).close()
    except OSError:
        return False
    return True


@dataclass
class JobOwnership(Ownership):
    """What a Slurm run's "processes" are: its job, alive while it holds or awaits nodes."""

    job: JobInfo | None = None

    @property
    def alive(self) -> bool:
        return self.job is not None and self.job.active


HINTS = {
    "TIME_LIMIT": "the job reached its time limit; raise slurm.time in hosts.yaml",
    "NODE_FAIL": "a node of the job failed or was set DOWN; relaunch (on other nodes)",
    "PREEMPTED": "a higher-priority job preempted it; relaunch, or use another qos",
}


def scheduler_end(own: Ownership) -> tuple[str, str, str | None] | None:
    """(verdict, root cause, hint) when the scheduler ended the run's job (its time limit,
    a node failure, a preemption, a ``scancel``); None otherwise (running, or ended by its
    own script). Callers check ``glmserve stop`` first: its scancel is STOPPED, not this."""
    job = getattr(own, "job", None)
    if job is not None and job.state == "CANCELLED":
        return "EXITED", f"Slurm job {job.job_id} was cancelled outside glmserve (scancel)", None
    verdict = SCHEDULER_VERDICTS.get(job.state) if job is not None else None
    if job is None or verdict is None:
        return None
    return (
        verdict,
        f"Slurm job {job.job_id} ended {job.state} (Reason: {job.reason})",
        HINTS[verdict],
    )


def forgotten_job(t: Transport, rec: dict[str, Any]) -> JobOwnership:
    """A job slurmctld no longer lists (after ``MinJobAge``): its final state from ``sacct``
    when the cluster keeps accounting and the row is this run's job (name, user, submit time,
    and the run's folder as its WorkDir); else no job, the reason naming what ``scontrol``
    last said (``rec["last_state"]``, recorded by the watch) and why sacct could not say."""
    from glmserve.remote.slurm_acct import accounting_job

    jid = str(rec["job_id"])
    info, why_not = accounting_job(t, jid)
    if info is not None:
        rec_dir = str(rec.get("command", "")).rsplit("/", 1)[0]
        why = mismatch({k: v for k, v in rec.items() if k != "command"}, info, script=False)
        if not why and rec_dir and info.fields.get("WorkDir") not in ("", rec_dir):
            why = f"its work dir is {info.fields.get('WorkDir')!r}, not {rec_dir!r}"
        if why:
            return JobOwnership([], f"job {jid} in sacct is not this run's: {why}")
        return JobOwnership([], f"job {jid} {info.state} (sacct)", job=info)
    last = rec.get("last_state")
    seen = f"; scontrol last said {last}" if last else ""
    return JobOwnership([], f"job {jid} is no longer known to slurmctld ({why_not}{seen})")


def job_ownership(t: Transport, run: RunRecord) -> JobOwnership:
    """The run's job, if it is still the recorded one (same name, user, submit time)."""
    rec = job_record(run)
    if rec is None:
        return JobOwnership([], "never submitted")
    info = job_info(t, str(rec["job_id"]))
    if info is None:
        return forgotten_job(t, rec)
    why = mismatch(rec, info)
    if why:
        return JobOwnership([], f"job {rec['job_id']} is not this run's: {why}")
    return JobOwnership([], "" if info.active else f"job {info.job_id} {info.state}", job=info)


def cancel_job(t: Transport, run: RunRecord, timeout: float = 15.0) -> dict[str, Any]:
    """``scancel`` the run's job, only after checking it is the recorded one; wait for it to
    leave the queue/nodes. The report says what was done (``note`` when nothing was)."""
    rec = job_record(run)
    report: dict[str, Any] = {"run_id": run.run_id, "host": run.host, "signalled": [], "left": []}
    if rec is None:
        report["note"] = "never submitted"
        return report
    jid = str(rec["job_id"])
    report["job_id"] = jid
    info = job_info(t, jid)
    if info is None:
        report["note"] = f"job {jid} is no longer known to slurmctld (ended)"
        return report
    why = mismatch(rec, info)
    if why:
        raise GlmserveError(f"run {run.run_id}: job {jid} is not this run's ({why}); not cancelled")
    if not info.active:
        report["note"] = f"job {jid} already {info.state}"
        report["job_state"] = info.state
        return report
    cmd = (
        f"scancel --name={shlex.quote(rec['job_name'])} --user={shlex.quote(rec['user'])} "
        f"{int(jid)}"
    )
    res = t.run(cmd, timeout=30)
    if not res.ok:
        raise RemoteCommandError(res, what=f"scancel on {t.host.name}")
    report["signalled"] = [f"job {jid}"]
    end = time.monotonic() + max(timeout, 1.0)
    while info is not None and (info.active or info.state == "COMPLETING"):
        if time.monotonic() > end:
            report["left"] = [f"job {jid} ({info.state})"]
            raise GlmserveError(
                f"run {run.run_id}: job {jid} still {info.state} {timeout:g}s after scancel"
            )
        time.sleep(0.2)
        info = job_info(t, jid)
    report["job_state"] = info.state if info else "gone"
    return report
