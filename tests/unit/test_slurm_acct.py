"""``sacct`` for a job slurmctld has forgotten (remote/slurm_acct.py), and its absence.

The output shapes are Slurm 22.05's: ``sacct -n -P -X -o FIELDS`` prints one ``|``-separated
line per job without a trailing ``|`` (sacct(1), ``--parsable2``); a cancelled job's State is
``CANCELLED by <uid>`` (sacct's ``"%s by %u"`` format); a job that never ran has NodeList
``None assigned`` (libslurmfull.so); a cluster without slurmdbd answers ``Slurm accounting
storage is disabled`` with rc 1 (seen on the tests' real cluster, see
tests/integration/test_slurm_login.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from glmserve.errors import Result
from glmserve.remote.slurm import job_ownership, scheduler_end
from glmserve.remote.slurm_acct import accounting_job, parse_sacct, sacct_command
from glmserve.store import RunRecord

REC = {
    "job_id": "12",
    "job_name": "glmserve-ab12cd34",
    "user": "alice",
    "submit_time": "2026-12-04T22:04:49",
    "command": "/shared/runs/ab12cd34/job.sbatch",
}
TIMEOUT_ROW = (
    "12|glmserve-ab12cd34|alice|2026-12-04T22:04:49|TIMEOUT|None|node1|0:0|/shared/runs/ab12cd34"
)
FORGOTTEN = "slurm_load_jobs error: Invalid job id specified\n"
DISABLED = "Slurm accounting storage is disabled\n"


@dataclass
class FakeHost:
    name: str = "cl"


@dataclass
class FakeTransport:
    """scontrol has forgotten the job; sacct answers ``sacct_out`` with ``sacct_rc``."""

    sacct_out: str
    sacct_rc: int = 0
    host: FakeHost = field(default_factory=FakeHost)
    cmds: list[str] = field(default_factory=list)

    def run(self, cmd: str, timeout: float | None = 60, **_kw) -> Result:
        self.cmds.append(cmd)
        if cmd.startswith("scontrol show job"):
            return Result(cmd, 1, FORGOTTEN)
        return Result(cmd, self.sacct_rc, self.sacct_out)


def _run(**slurm) -> RunRecord:
    return RunRecord(
        run_id="ab12cd34", profile="p", host="cl", port=30000, pid=None,
        run_dir="/shared/runs/ab12cd34", state="READY",
        meta={"slurm": {**REC, **slurm}},
    )  # fmt: skip


def test_the_allocation_line_is_parsed_not_its_steps():
    out = TIMEOUT_ROW + "\n12.batch|batch|alice|2026-12-04T22:04:49|CANCELLED|None|node1|0:15|\n"
    job = parse_sacct(out, "12")
    assert job is not None
    assert (job.job_id, job.name, job.user, job.submit_time, job.state, job.nodes) == (
        "12", "glmserve-ab12cd34", "alice", "2026-12-04T22:04:49", "TIMEOUT", "node1",
    )  # fmt: skip
    assert job.fields["source"] == "sacct" and not job.active
    assert parse_sacct(out, "13") is None
    assert sacct_command("12") == (
        "sacct -n -P -X -j 12 -o JobID,JobName,User,Submit,State,Reason,NodeList,ExitCode,"
        "WorkDir 2>&1"
    )


def test_cancelled_by_uid_and_never_ran_shapes():
    row = "12|glmserve-ab12cd34|alice|2026-12-04T22:04:49|CANCELLED by 1000|None|None assigned"
    row += "|0:0|/w"
    job = parse_sacct(row, "12")
    assert job is not None and (job.state, job.nodes) == ("CANCELLED", "")


def test_a_forgotten_job_is_judged_by_its_accounting_record():
    """Before sacct, a job gone from scontrol had no state: a TIME_LIMIT read as an exit."""
    t = FakeTransport(TIMEOUT_ROW + "\n")
    own = job_ownership(t, _run())  # type: ignore[arg-type]
    assert own.job is not None and own.job.state == "TIMEOUT"
    ended = scheduler_end(own)
    assert ended is not None and ended[0] == "TIME_LIMIT"
    assert any(c.startswith("sacct ") for c in t.cmds)


def test_an_accounting_row_of_another_job_is_not_this_runs():
    other = TIMEOUT_ROW.replace("|alice|", "|bob|")
    own = job_ownership(FakeTransport(other), _run())  # type: ignore[arg-type]
    assert own.job is None and "not this run's" in own.reason and "bob" in own.reason
    moved = TIMEOUT_ROW.replace("/shared/runs/ab12cd34", "/elsewhere")
    own = job_ownership(FakeTransport(moved), _run())  # type: ignore[arg-type]
    assert own.job is None and "work dir" in own.reason


def test_no_accounting_falls_back_to_what_scontrol_last_said():
    t = FakeTransport(DISABLED, sacct_rc=1)
    own = job_ownership(t, _run(last_state="RUNNING"))  # type: ignore[arg-type]
    assert own.job is None and not own.alive
    assert "no accounting" in own.reason and "scontrol last said RUNNING" in own.reason
    assert scheduler_end(own) is None  # judged by the log, as before; never invented


def test_sacct_failing_or_not_knowing_is_said():
    job, why = accounting_job(FakeTransport("sacct: error: slurmdbd: down\n", 1), "12")  # type: ignore[arg-type]
    assert job is None and why == "sacct failed: sacct: error: slurmdbd: down"
    job, why = accounting_job(FakeTransport(""), "12")  # type: ignore[arg-type]
    assert job is None and why == "sacct does not know job 12"
