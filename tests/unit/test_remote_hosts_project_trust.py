"""The project's hosts.yaml (a checked-out repo) may not redefine ``local`` nor the user's
hosts, and its entries that run a local python/venv/workdir need ``--host`` (issue 20, item 7).

Before: ``hosts: {local: {python: ./evil, venv: ./venv}}`` in ``./configs/hosts.yaml`` made a
plain ``glmserve check --profile flashinfer`` run the repo's program, with no warning.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from glmserve.errors import ConfigError
from glmserve.paths import shipped_configs_dir
from glmserve.remote import hosts as hosts_mod
from glmserve.remote.hosts import get_host, load_hosts

GLMSERVE = [sys.executable, "-c", "from glmserve.__main__ import main; raise SystemExit(main())"]


@pytest.fixture
def project(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """A checked-out repo's configs/ (profiles copied from the shipped ones), and an evil
    program that leaves a marker when anything runs it."""
    configs = tmp_path / "repo" / "configs"
    shutil.copytree(shipped_configs_dir() / "profiles", configs / "profiles")
    marker = tmp_path / "ran"
    evil = tmp_path / "repo" / "evil"
    evil.write_text(f'#!/bin/sh\ntouch {marker}\nexec {sys.executable} "$@"\n')
    evil.chmod(0o755)
    monkeypatch.setenv("GLMSERVE_CONFIGS", str(configs))
    monkeypatch.setattr(hosts_mod, "_announced", set(), raising=False)
    return configs, evil, marker


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_project_file_cannot_redefine_local(project):
    configs, evil, marker = project
    _write(configs / "hosts.yaml", f"hosts:\n  local:\n    python: {evil}\n    venv: ./venv\n")
    for h in (get_host(None), get_host("local"), load_hosts()["local"]):
        assert (h.python, h.venv, h.source) == ("python3", None, "<built-in>")
    res = subprocess.run(
        [*GLMSERVE, "check", "--profile", "flashinfer", "--json"],
        capture_output=True, text=True, timeout=120, env=os.environ.copy(),
    )  # fmt: skip
    assert not marker.exists(), res.stderr  # the repo's program never ran
    assert str(evil) not in res.stdout + res.stderr


def test_users_own_file_defines_local_and_wins_over_the_project(project):
    configs, evil, _ = project
    _write(configs / "hosts.yaml", f"hosts:\n  box:\n    python: {evil}\n")
    user = _write(
        Path(os.environ["GLMSERVE_CONFIG_DIR"]) / "hosts.yaml",
        "hosts:\n  box:\n    target: me@10.0.0.9\n  local:\n    python: /opt/py\n",
    )
    assert get_host("box").target == "me@10.0.0.9"
    assert get_host("local").python == "/opt/py"
    assert get_host("local").source == f"{user}:4"


def test_project_local_code_entry_needs_host_and_is_announced(project, capsys):
    configs, evil, _ = project
    f = _write(configs / "hosts.yaml", f"hosts:\n  box:\n    python: {evil}\n")
    with pytest.raises(
        ConfigError, match=rf"^{f}:2: host box comes from the project file .*--host box"
    ):
        get_host("box", explicit=False)  # as named by a profile's `nodes:`
    h = get_host("box")
    assert h.python == str(evil)
    assert capsys.readouterr().err == (
        f"note: host box comes from the project file {f}:2 (python {evil})\n"
    )


def test_project_remote_entry_is_used_as_before(project, capsys):
    configs, _, _ = project
    _write(configs / "hosts.yaml", "hosts:\n  gpu:\n    target: a@b\n    venv: /opt/v\n")
    assert get_host("gpu", explicit=False).venv == "/opt/v"
    assert capsys.readouterr().err == ""


def test_a_file_cannot_mark_its_own_entry_trusted(project):
    configs, evil, _ = project
    _write(
        configs / "hosts.yaml",
        f"hosts:\n  box:\n    python: {evil}\n    project_local_code: false\n",
    )
    with pytest.raises(ConfigError, match=r"hosts\.box"):
        get_host("box")


def test_profile_nodes_naming_a_project_local_code_host_are_refused(project):
    from glmserve.deploy.plan import plan

    configs, evil, _ = project
    f = _write(
        configs / "hosts.yaml", f"hosts:\n  a:\n    python: {evil}\n  b:\n    workdir: /tmp\n"
    )
    prof = configs / "profiles" / "two.yaml"
    prof.write_text("extends: flashinfer\nnodes: [a, b]\n")
    with pytest.raises(ConfigError, match=rf"{f}:2: host a comes from the project file"):
        plan("two", simulate=True)
