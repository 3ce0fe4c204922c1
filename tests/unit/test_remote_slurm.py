"""``kind: slurm`` hosts (their checked #SBATCH options, the trust rules) and the pure parts
of remote/slurm.py: the job script, ``scontrol`` parsing, the job identity check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from glmserve.errors import ConfigError
from glmserve.remote.hosts import get_host
from glmserve.remote.slurm import job_script, mismatch, parse_job, submit_command

# `scontrol show job -o` of a pending job, as Slurm 22.05 prints it (trimmed)
PENDING = (
    "JobId=7 JobName=glmserve-ab12cd34 UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A "
    "Priority=1 Nice=0 Account=(null) QOS=(null) JobState=PENDING Reason=PartitionDown "
    "Dependency=(null) Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 "
    "RunTime=00:00:00 TimeLimit=00:10:00 TimeMin=N/A SubmitTime=2026-12-04T22:04:49 "
    "EligibleTime=2026-12-04T22:04:49 Partition=debug NodeList=(null) "
    "Command=/shared/runs/ab12cd34/job.sbatch WorkDir=/shared/runs/ab12cd34"
)


@pytest.fixture
def project_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "configs"
    d.mkdir()
    monkeypatch.setenv("GLMSERVE_CONFIGS", str(d))
    return d


def _write(path: Path, body: str) -> None:
    path.write_text("hosts:\n  cl:\n    kind: slurm\n" + body)


def _user_file() -> Path:
    d = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    d.mkdir(parents=True, exist_ok=True)
    return d / "hosts.yaml"


def test_header_is_built_from_the_host_entry(project_dir):
    _write(
        project_dir / "hosts.yaml",
        "    login: alice@login1\n"
        "    slurm:\n      partition: gpu\n      account: proj\n      qos: normal\n"
        "      gres: 'gpu:h100:8'\n      time: '02:00:00'\n      constraint: 'h100&ib'\n"
        "      sbatch_options: {mem: 0, exclusive: true, cpus-per-task: 16}\n",
    )
    host = get_host("cl")
    assert host.is_slurm and host.target == "alice@login1"
    assert job_script(host).splitlines() == [
        "#!/bin/bash",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=proj",
        "#SBATCH --qos=normal",
        "#SBATCH --gres=gpu:h100:8",
        "#SBATCH --time=02:00:00",
        "#SBATCH --constraint=h100&ib",
        "#SBATCH --mem=0",
        "#SBATCH --exclusive",
        "#SBATCH --cpus-per-task=16",
        "exec bash launch.sh",
    ]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("    slurm: {sbatch_options: {wrap: 'rm -rf ~'}}\n", "--wrap runs a command line"),
        ("    slurm: {sbatch_options: {output: /tmp/x}}\n", "--output is set by glmserve"),
        ("    slurm: {sbatch_options: {export: ALL}}\n", "--export decides the job's environment"),
        ("    slurm: {sbatch_options: {uid: 0}}\n", "--uid runs the job as another user"),
        ("    slurm: {sbatch_options: {requeue: true}}\n", "--requeue is set by glmserve"),
        ("    slurm: {sbatch_options: {mem: '1G --wrap=x'}}\n", "not a value sbatch takes"),
        ("    slurm: {sbatch_options: {prolog: x}}\n", "not an sbatch option a hosts file"),
        ("    slurm: {partition: 'gpu\\n#SBATCH --wrap=x'}\n", "is not a valid name"),
        ("    slurm: {time: '1h; rm'}\n", "is not a valid time limit"),
        ("    slurm: {clusters: other}\n", "only your own"),
        ("    slurm: {bogus: 1}\n", "Extra inputs are not permitted"),
    ],
)
def test_a_project_file_cannot_make_sbatch_run_or_go_elsewhere(project_dir, body, words):
    _write(project_dir / "hosts.yaml", body)
    with pytest.raises(ConfigError) as exc:
        get_host("cl")
    msg = str(exc.value)
    assert words in msg and str(project_dir / "hosts.yaml") in msg and "hosts.cl" in msg


def test_only_the_users_own_file_may_name_another_cluster(project_dir):
    _write(_user_file(), "    slurm: {clusters: other}\n")
    assert get_host("cl").slurm.clusters == "other"


def test_login_is_for_slurm_hosts_only(project_dir):
    (project_dir / "hosts.yaml").write_text("hosts:\n  cl:\n    login: a@b\n")
    with pytest.raises(ConfigError, match="login: is for kind: slurm hosts"):
        get_host("cl")


def test_scontrol_line_is_parsed():
    job = parse_job(PENDING)
    assert job is not None
    assert (job.job_id, job.name, job.user, job.state, job.reason, job.nodes) == (
        "7",
        "glmserve-ab12cd34",
        "alice",
        "PENDING",
        "PartitionDown",
        "",
    )
    assert job.queued and job.active and not job.running
    assert parse_job("slurm_load_jobs error: Invalid job id specified") is None


def test_identity_needs_name_user_submit_time_and_script():
    job = parse_job(PENDING)
    assert job is not None
    rec = {
        "job_id": "7",
        "job_name": "glmserve-ab12cd34",
        "user": "alice",
        "submit_time": "2026-12-04T22:04:49",
        "command": "/shared/runs/ab12cd34/job.sbatch",
    }
    assert mismatch(rec, job) is None
    for key, other in [
        ("job_name", "glmserve-ab12cd3"),
        ("user", "bob"),
        ("submit_time", "2026-12-04T22:04:50"),
        ("command", "/x/job.sbatch"),
    ]:
        assert key.replace("_", " ") in (mismatch({**rec, key: other}, job) or "")


def test_submit_command_quotes_the_run_folder():
    cmd = submit_command("/shared/a b/runs/ab12cd34", "ab12cd34")
    assert "--output='/shared/a b/runs/ab12cd34/server.log'" in cmd
    assert "--job-name=glmserve-ab12cd34" in cmd and "--no-requeue" in cmd
