"""Shared test setup: user state isolated per test; fixtures for real peers live in
tests/fixtures/ (simulator subprocess, real sshd) and are loaded as plugins."""

from __future__ import annotations

import pytest

pytest_plugins = [
    "tests.fixtures.simulator",
    "tests.fixtures.sshd",
    "tests.fixtures.sse_server",
    "tests.fixtures.tokenizer",
    "tests.fixtures.runs",
    "tests.fixtures.slurm",
]


@pytest.fixture(autouse=True)
def _isolated_user_state(tmp_path_factory, monkeypatch):
    """Every test gets its own GLMSERVE_HOME and config dir; the user's are never touched."""
    home = tmp_path_factory.mktemp("glmserve_home")
    cfg = tmp_path_factory.mktemp("glmserve_config")
    monkeypatch.setenv("GLMSERVE_HOME", str(home))
    monkeypatch.setenv("GLMSERVE_CONFIG_DIR", str(cfg))
    monkeypatch.delenv("GLMSERVE_PATCHES", raising=False)
    yield
