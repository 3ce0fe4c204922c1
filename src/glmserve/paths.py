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


def shipped_configs_dir() -> Path:
    """The ``configs/`` glmserve ships: the copy a wheel carries inside the package
    (``glmserve/data/configs``, put there by setup.py's build hook), else the source
    checkout's own ``configs/`` (an editable install, or running from the tree)."""
    package = Path(__file__).resolve().parent
    packaged = package / "data" / "configs"
    if packaged.is_dir():
        return packaged
    return package.parents[1] / "configs"


def project_configs_dir() -> Path:
    """The ``configs/`` folder: ``$GLMSERVE_CONFIGS``, else ``./configs`` if present, else the
    shipped one (so any install works from any cwd)."""
    env = os.environ.get("GLMSERVE_CONFIGS")
    if env:
        return Path(env)
    cwd = Path.cwd() / "configs"
    if (cwd / "profiles").is_dir():
        return cwd
    return shipped_configs_dir()


def read_capped(path: Path, limit: int, what: str, missing: str | None = None) -> bytes:
    """The bytes of a user-named regular file of at most ``limit`` bytes, else a one-line
    ConfigError naming the path. The size is checked before reading and the read is capped
    too, so ``/dev/zero``, a FIFO or a 10 GiB file can never exhaust memory or hang.
    ``missing`` replaces "<what> is not a regular file" when the path does not exist.
    """
    try:
        if not path.is_file():
            if missing is not None and not path.exists():
                raise ConfigError(f"{path}: {missing}")
            raise ConfigError(f"{path}: {what} is not a regular file")
        size = path.stat().st_size
        if size > limit:
            raise ConfigError(f"{path}: {what} is {size} bytes; the limit is {limit}")
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # e.g. an embedded NUL in the path
        raise ConfigError(f"{path!r}: invalid {what} path: {exc}") from exc
    if len(data) > limit:
        raise ConfigError(f"{path}: {what} is larger than {limit} bytes")
    return data
