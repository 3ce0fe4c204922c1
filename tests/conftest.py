"""Shared test setup: user state isolated per test; fixtures for real peers live in
tests/fixtures/ (simulator subprocess, real sshd) and are loaded as plugins."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

# Tables are as wide as COLUMNS says (cli/_app.py reads it once, at import). A developer's
# terminal, or pytest-xdist's workers (which set COLUMNS=80), would otherwise decide what a
# test sees: the suite runs as off a TTY, whatever launched it. Tests that check a width set
# their own.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

# Tests that launch simulated servers on this host through the CLI often take the shipped
# base profile's port (8000): two pytest-xdist workers doing so at once would collide. Each
# worker therefore reads its own copy of configs/ whose base profile serves on a port of its
# own (``_worker_configs``), and those modules spread over both workers like the rest. The
# Slurm modules stay on one worker: each worker would otherwise start its own cluster
# (about a minute) from the session fixtures in tests/fixtures/slurm.py.
_REPO = Path(__file__).resolve().parents[1]
_BASE_PROFILE = "glm5-nvfp4-tp8.yaml"
_SLURM_FIXTURES = frozenset({"slurm", "slurm_cluster", "slurm_two_nodes"})


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marker (its hook adds "@group")
def pytest_collection_modifyitems(config, items):
    for item in items:
        if _SLURM_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("slurm"))


def worker_port(worker_id: str | None) -> int | None:
    """The base profile's port on xdist worker ``gwN``: 8000 + 100 * (N + 1), below the
    ports tests pick at random (20000 and up) and far enough apart for a sweep's slots
    (``port + k``). None when not distributed: the shipped port, as a user runs it."""
    if not worker_id or not worker_id.startswith("gw"):
        return None
    return 8000 + 100 * (int(worker_id[2:]) + 1)


@pytest.fixture(scope="session")
def _worker_configs(tmp_path_factory) -> Path | None:
    """This worker's copy of configs/ (None when not distributed)."""
    port = worker_port(os.environ.get("PYTEST_XDIST_WORKER"))
    if port is None:
        return None
    copy = tmp_path_factory.mktemp("worker_configs") / "configs"
    shutil.copytree(_REPO / "configs", copy)
    base = copy / "profiles" / _BASE_PROFILE
    text, n = re.subn(r"(?m)^(\s+port:\s*)8000\b", rf"\g<1>{port}", base.read_text())
    assert n == 1, f"{_BASE_PROFILE}: expected one 'port: 8000' line to move, found {n}"
    base.write_text(text)
    return copy


pytest_plugins = [
    "tests.fixtures.simulator",
    "tests.fixtures.sshd",
    "tests.fixtures.sse_server",
    "tests.fixtures.tokenizer",
    "tests.fixtures.runs",
    "tests.fixtures.slurm",
]


@pytest.fixture(autouse=True)
def _isolated_user_state(request, tmp_path_factory, monkeypatch):
    """Every test gets its own GLMSERVE_HOME and config dir; the user's are never touched.
    Outside tests/unit, a distributed run reads its worker's configs/ (see above)."""
    home = tmp_path_factory.mktemp("glmserve_home")
    cfg = tmp_path_factory.mktemp("glmserve_config")
    monkeypatch.setenv("GLMSERVE_HOME", str(home))
    monkeypatch.setenv("GLMSERVE_CONFIG_DIR", str(cfg))
    monkeypatch.delenv("GLMSERVE_PATCHES", raising=False)
    if "/tests/unit/" not in str(request.path):
        configs = request.getfixturevalue("_worker_configs")
        if configs is not None:
            monkeypatch.setenv("GLMSERVE_CONFIGS", str(configs))
    yield
