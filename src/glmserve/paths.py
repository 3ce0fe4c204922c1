"""Where glmserve keeps its state and finds its shipped configs."""

from __future__ import annotations

import os
from pathlib import Path


def glmserve_home() -> Path:
    """``$GLMSERVE_HOME`` or ``~/.local/share/glmserve``: run store, caches, fetched files."""
    env = os.environ.get("GLMSERVE_HOME")
    home = Path(env) if env else Path.home() / ".local" / "share" / "glmserve"
    home.mkdir(parents=True, exist_ok=True)
    return home


def user_config_dir() -> Path:
    """``$GLMSERVE_CONFIG_DIR`` or ``~/.config/glmserve`` (user hosts.yaml, user profiles)."""
    env = os.environ.get("GLMSERVE_CONFIG_DIR")
    return Path(env) if env else Path.home() / ".config" / "glmserve"


def project_configs_dir() -> Path:
    """The ``configs/`` folder: ``$GLMSERVE_CONFIGS``, else ``./configs`` if present, else the
    one next to the source checkout (so an editable install works from any cwd)."""
    env = os.environ.get("GLMSERVE_CONFIGS")
    if env:
        return Path(env)
    cwd = Path.cwd() / "configs"
    if (cwd / "profiles").is_dir():
        return cwd
    return Path(__file__).resolve().parents[2] / "configs"
