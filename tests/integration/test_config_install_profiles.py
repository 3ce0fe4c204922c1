"""A normal (non-editable) install ships the profiles: the project is built into a real
wheel and installed with ``pip install --target`` into a temp dir, then that install's
``glmserve profiles --json`` runs from a folder without any ``configs/``.

The build sees a copy of the project's packaging inputs only (no .venv, no build/ or
egg-info left in the checkout). Where the running interpreter has the setuptools that
pyproject.toml asks for, the build uses it (no index needed); otherwise pip fetches it into
an isolated build environment as ``pip install .`` does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

from glmserve.cli import main

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.stem for p in (ROOT / "configs" / "profiles").glob("*.yaml"))
PACKAGING_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "configs", "src")


def _project_copy(dest: Path) -> Path:
    dest.mkdir()
    for name in PACKAGING_INPUTS:
        src = ROOT / name
        if src.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
            shutil.copytree(src, dest / name, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


def _local_setuptools_is_enough() -> bool:
    try:
        return Version(metadata.version("setuptools")) >= Version("77")
    except metadata.PackageNotFoundError:
        return False


@pytest.mark.slow
def test_non_editable_install_lists_the_shipped_profiles(tmp_path: Path) -> None:
    project = _project_copy(tmp_path / "project")
    target = tmp_path / "site"
    isolation = [] if not _local_setuptools_is_enough() else ["--no-build-isolation"]
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", *isolation,
         "--target", str(target), str(project)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    elsewhere = tmp_path / "cwd"  # no ./configs here
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "GLMSERVE_CONFIGS"}
    env["PYTHONPATH"] = str(target)  # ahead of this checkout's editable install
    listed = subprocess.run(
        [str(target / "bin" / "glmserve"), "profiles", "--json"],
        capture_output=True, text=True, timeout=120, cwd=elsewhere, env=env, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert SHIPPED and sorted(r["name"] for r in rows) == SHIPPED
    for row in rows:  # read from the installed package, not from this checkout
        assert Path(row["path"]).is_relative_to(target / "glmserve"), row["path"]
        assert not row["description"].startswith("error:"), row


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    captured = capsys.readouterr()
    return int(rc or 0), captured.out, captured.err


@pytest.mark.parametrize("as_json", [False, True])
def test_an_empty_profile_list_names_the_folders_searched(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    as_json: bool,
) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    monkeypatch.setenv("GLMSERVE_CONFIGS", str(configs))
    code, out, err = _run(capsys, "profiles", *(["--json"] if as_json else []))
    assert code == 0
    user_dir = Path(os.environ["GLMSERVE_CONFIG_DIR"]) / "profiles"
    assert "no profiles found" in err
    assert str(user_dir) in err and str(configs / "profiles") in err
    if as_json:
        assert json.loads(out) == []


def test_unknown_profile_with_none_installed_names_the_folders_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GLMSERVE_CONFIGS", str(tmp_path / "nowhere"))
    code, _, err = _run(capsys, "render", "--profile", "trtllm_mla")
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "unknown profile 'trtllm_mla'" in err and str(tmp_path / "nowhere" / "profiles") in err
