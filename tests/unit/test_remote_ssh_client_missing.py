"""No ``ssh`` program on PATH: every verb that would reach an ssh host says so in one line and
exits 5 (a host it cannot reach), never exit 70 with subprocess's FileNotFoundError."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from glmserve.cli import main
from glmserve.store import RunRecord, RunStore

MESSAGE = (
    "ssh client not found on PATH: host box is reached with ssh; install the OpenSSH "
    "client or add its directory to PATH"
)


@pytest.fixture
def no_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hosts.yaml with one ssh host, a recorded live run on it, and a PATH of bash and sh
    only (glmserve runs local commands with bash)."""
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "hosts.yaml").write_text("hosts:\n  box:\n    target: user@192.0.2.1\n")
    with RunStore.open() as store:
        store.add_run(
            RunRecord(
                run_id="abcd1234", host="box", profile="trtllm_mla", port=30000,
                run_dir="~/glmserve/runs/abcd1234", pid=4242, pgid=4242, state="READY",
            )
        )  # fmt: skip
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for prog in ("bash", "sh"):
        found = shutil.which(prog)
        assert found is not None
        (bin_dir / prog).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert shutil.which("ssh") is None


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--profile", "trtllm_mla", "--host", "box", "--simulate"],
        ["launch", "--profile", "trtllm_mla", "--host", "box", "--simulate"],
        ["status"],
        ["status", "abcd1234", "--json"],
        ["stop", "abcd1234"],
        ["stop", "--all"],
        ["logs", "abcd1234"],
        ["diagnose", "abcd1234"],
        ["bench", "abcd1234", "--num-prompts", "1"],
        ["profile", "abcd1234"],
        ["sweep", "--host", "box", "--profiles", "trtllm_mla", "--simulate"],
        [
            "tune",
            "--hosts",
            "box",
            "--profile",
            "trtllm_mla",
            "--simulate",
            "--search",
            "server.max-running-requests=8,32",
        ],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_verb_reaching_an_ssh_host_without_ssh_says_so_and_exits_5(no_ssh, capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err
    assert rc == 5, err
    last = err.strip().splitlines()[-1]  # `stop --all` first names the run it could not stop
    assert last.startswith("error: ") and last.endswith(MESSAGE), err
