"""The shell ``check`` runs on a host for its python probe: profile values (venv, python)
reach it as data, never as shell code (a profile or hosts.yaml may come from a cloned repo)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from glmserve.config.profiles import load_profile
from glmserve.deploy.preflight import _py


def _bash(cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True, timeout=30)


def test_hostile_venv_is_reported_not_run(tmp_path):
    spec = dataclasses.replace(
        load_profile("trtllm_mla"), venv="/nonexistent/$(touch MARK)`touch MARK2`", python="true"
    )
    res = _bash(_py(spec, "print(1)"), tmp_path)
    assert res.returncode == 1
    assert "no virtualenv at /nonexistent/$(touch MARK)`touch MARK2`" in res.stderr
    assert not (tmp_path / "MARK").exists() and not (tmp_path / "MARK2").exists()


def test_python_is_one_word_like_in_the_launch_script(tmp_path):
    hostile = "python3 -c \"open('MARK','w')\"; touch MARK2; true"
    spec = dataclasses.replace(load_profile("trtllm_mla"), venv=None, python=hostile)
    res = _bash(_py(spec, "print(1)"), tmp_path)
    assert res.returncode == 127  # no executable with that whole name
    assert not (tmp_path / "MARK").exists() and not (tmp_path / "MARK2").exists()
    # and a real interpreter path still works
    ok = dataclasses.replace(spec, python=sys.executable)
    res = _bash(_py(ok, "print(6 * 7)"), tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == "42"
