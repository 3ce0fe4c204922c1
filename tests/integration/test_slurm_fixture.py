"""The Slurm fixture is a real cluster: a job runs on the node and its output lands."""

from __future__ import annotations

import time


def test_a_job_runs_on_the_node(slurm, tmp_path):
    out = tmp_path / "job.out"
    jid = slurm.cmd(
        "sbatch", "--parsable", "-J", "fixture-check", "-o", str(out), "--wrap", "hostname"
    ).strip()
    end = time.monotonic() + 30
    while time.monotonic() < end and not (out.exists() and out.read_text().strip()):
        time.sleep(0.2)
    assert out.read_text().strip() == slurm.node
    assert jid.isdigit()
