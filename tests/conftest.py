"""Shared test setup: user state isolated per test; fixtures for real peers live in
tests/fixtures/ (simulator subprocess, real sshd) and are loaded as plugins."""

from __future__ import annotations

import os

import pytest

# Tables are as wide as COLUMNS says (cli/_app.py reads it once, at import). A developer's
# terminal, or pytest-xdist's workers (which set COLUMNS=80), would otherwise decide what a
# test sees: the suite runs as off a TTY, whatever launched it. Tests that check a width set
# their own.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

# Modules that launch simulated servers on this host through the CLI: several take a
# profile's default port (8000), so two of them at once on two xdist workers would collide.
# They run one after another on one worker (``--dist loadgroup``, pyproject addopts);
# everything else is spread over both.
_LOCAL_SERVER_MARKERS = ("--simulate", '"simulate"')


def pytest_collection_modifyitems(config, items):
    sources: dict[str, bool] = {}
    for item in items:
        path = str(item.path)
        if "/tests/unit/" in path:
            continue
        if path not in sources:
            text = item.path.read_text(errors="replace")
            sources[path] = any(m in text for m in _LOCAL_SERVER_MARKERS)
        if sources[path]:
            item.add_marker(pytest.mark.xdist_group("local-servers"))


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
