"""Multi-node as one Slurm job, on a real two-node cluster on this machine (two ``slurmd -N``,
tests/fixtures/slurm.py): the generated job script word for word, what ``sbatch --test-only``
says of it, and a real run in which each node's task gets its rank and the same
``--dist-init-addr`` (the allocation's first host, by its NodeAddr). The server is a stand-in
that prints its argv: wiring this script into ``launch`` is not done (see notes/slurm.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from glmserve.remote.hosts import HostConfig
from glmserve.remote.slurm import multinode_job_script
from glmserve.remote.slurm_config import SlurmOptions

pytestmark = pytest.mark.slow

ECHO = 'import json, sys; print("ARGV " + json.dumps(sys.argv[1:]), flush=True)'


def _host(partition: str) -> HostConfig:
    return HostConfig(
        name="cluster",
        kind="slurm",
        slurm=SlurmOptions(
            partition=partition, time="05:00", sbatch_options={"ntasks-per-node": "4"}
        ),
    )


EXPECTED = """\
#!/bin/bash
#SBATCH --partition=debug
#SBATCH --time=05:00
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
addr=$(scontrol show node -o "$head" | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')
export GLMSERVE_DIST_INIT_ADDR="${addr:-$head}:5757"
exec srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c 'exec {py} \
-c '"'"'{echo}'"'"' --model '"'"'m; rm -rf /'"'"' --nnodes 2 --node-rank "$SLURM_NODEID" \
--dist-init-addr "$GLMSERVE_DIST_INIT_ADDR"'
"""


def test_the_multinode_job_script_word_for_word_accepted_and_run_on_two_nodes(
    slurm_two_nodes, tmp_path
):
    c = slurm_two_nodes
    argv = [sys.executable, "-c", ECHO, "--model", "m; rm -rf /"]
    script = multinode_job_script(_host(c.partition), 2, 5757, argv)
    assert script == EXPECTED.replace("{py}", sys.executable).replace("{echo}", ECHO)
    (tmp_path / "job.sbatch").write_text(script)
    test_only = subprocess.run(
        ["sbatch", "--test-only", str(tmp_path / "job.sbatch")],
        env=c.env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert test_only.returncode == 0 and "on nodes n[1-2]" in test_only.stderr, test_only.stderr
    out = tmp_path / "server.log"
    run = subprocess.run(
        ["sbatch", "--parsable", "--wait", f"--output={out}", f"--chdir={tmp_path}",
         str(tmp_path / "job.sbatch")],
        env=c.env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert run.returncode == 0, (run.stderr, out.read_text() if out.exists() else "")
    end = time.monotonic() + 5  # the output file is complete once the job is
    while time.monotonic() < end and out.read_text().count("ARGV ") < 2:
        time.sleep(0.1)
    argvs = [json.loads(ln[5:]) for ln in out.read_text().splitlines() if ln.startswith("ARGV ")]
    ranks = sorted(a[a.index("--node-rank") + 1] for a in argvs)
    assert ranks == ["0", "1"], argvs
    for a in argvs:
        assert a[:2] == ["--model", "m; rm -rf /"]  # quoted words arrive as they were
        assert a[a.index("--nnodes") + 1] == "2"
        assert a[a.index("--dist-init-addr") + 1] == "127.0.0.1:5757"
