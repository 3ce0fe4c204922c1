"""``sacct``: a job's final state after slurmctld has forgotten it, when the cluster keeps one.

slurmctld drops a finished job from ``scontrol show job`` after ``MinJobAge`` (300 s by
default); a watch or ``status`` that comes later would have only the log to judge by, and a
job ended by its time limit or a node failure would read as a plain exit. The accounting
database (slurmdbd) keeps the job, so the job is looked up there: ``sacct -n -P -X -j ID -o
FIELDS`` (Slurm's sacct(1): ``-P``/``--parsable2`` "Output will be '|' delimited without a
'|' at the end", ``-X``/``--allocations`` the job itself, not its steps).

Accounting is not required: a cluster without slurmdbd (``AccountingStorageType=
accounting_storage/none``, as the tests' cluster) answers every sacct with ``Slurm accounting
storage is disabled`` (rc 1); then the run keeps what ``scontrol`` last said (stored in
``meta.slurm.last_state`` by the watch), and says that it is no more than that.
"""

from __future__ import annotations

from glmserve.remote.transport import Transport

# Slurm 22.05 sacct(1) --helpformat names; Submit is printed as scontrol's SubmitTime
# (same SLURM_TIME_FORMAT), WorkDir is the job's --chdir (the run's folder).
FIELDS = ("JobID", "JobName", "User", "Submit", "State", "Reason", "NodeList", "ExitCode",
          "WorkDir")  # fmt: skip
NO_ACCOUNTING = "accounting storage is disabled"


def sacct_command(job_id: str) -> str:
    return f"sacct -n -P -X -j {int(job_id)} -o {','.join(FIELDS)} 2>&1"


def parse_sacct(out: str, job_id: str):  # -> JobInfo | None (import cycle kept lazy)
    """The allocation line of ``job_id`` in ``sacct -n -P -X`` output; None when absent.

    State is the first word: sacct prints ``CANCELLED by 1000`` for a cancelled job (the
    uid that cancelled it). NodeList is ``None assigned`` for a job that never ran."""
    from glmserve.remote.slurm import JobInfo

    for line in out.splitlines():
        parts = line.rstrip("\n").split("|")
        if len(parts) != len(FIELDS):
            continue
        row = dict(zip(FIELDS, parts, strict=True))
        if row["JobID"].split(";", 1)[0] != str(job_id):  # steps (12.batch) are not the job
            continue
        nodes = row["NodeList"]
        return JobInfo(
            job_id=row["JobID"],
            name=row["JobName"],
            user=row["User"],
            submit_time=row["Submit"],
            state=(row["State"].split() or [""])[0],
            reason=row["Reason"],
            nodes="" if nodes in ("None assigned", "(null)", "None") else nodes,
            exit_code=row["ExitCode"],
            fields={**row, "source": "sacct"},
        )
    return None


def accounting_job(t: Transport, job_id: str):  # -> tuple[JobInfo | None, str]
    """(the job as accounting has it, why not): the reason says "no accounting" when the
    cluster has none, or what sacct said when it failed or did not know the job."""
    res = t.run(sacct_command(job_id), timeout=30)
    text = (res.stdout or "") + (res.stderr or "")
    if NO_ACCOUNTING in text:
        return None, "the cluster keeps no accounting (sacct: Slurm accounting storage is disabled)"
    if not res.ok:
        last = text.strip().splitlines()[-1:] or [f"rc {res.rc}"]
        return None, f"sacct failed: {last[0][:200]}"
    info = parse_sacct(res.stdout, job_id)
    return info, "" if info else f"sacct does not know job {job_id}"
