"""Where glmserve keeps its state and finds its shipped configs."""

from __future__ import annotations

import os
from pathlib import Path

from glmserve.errors import ConfigError


def glmserve_home() -> Path:
    """``$GLMSERVE_HOME`` or ``~/.local/share/glmserve``: run store, caches, fetched files."""
    env = os.environ.get("GLMSERVE_HOME")
    home = Path(env) if env else Path.home() / ".local" / "share" / "glmserve"
    what = "GLMSERVE_HOME" if env else "glmserve's data directory"
    try:
        home.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise ConfigError(f"{what} {home} exists but is not a directory") from exc
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{what} {home}: cannot create it ({reason})") from exc
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
