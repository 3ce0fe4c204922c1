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


def require_regular_file(path: Path, what: str, missing: str | None = None) -> None:
    """Refuse (one-line ConfigError naming the path) a user-named file glmserve reads whole
    that is not a regular file: opening a FIFO blocks until a writer comes (``profile FIFO``
    and ``simulate --sim-config FIFO`` hung), a device never ends (``/dev/zero``), a
    directory or socket cannot be read. ``missing`` replaces "<what> is not a regular file"
    when the path does not exist. Every whole-file read goes through here (``read_capped``
    too); a file that is streamed on purpose (``bench --dataset-path <(zcat ...)``) does not.
    """
    try:
        if path.is_file():
            return
        if missing is not None and not path.exists():
            raise ConfigError(f"{path}: {missing}")
    except OSError as exc:  # a name too long, a loop of symlinks
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # e.g. an embedded NUL in the path
        raise ConfigError(f"{path!r}: invalid {what} path: {exc}") from exc
    raise ConfigError(f"{path}: {what} is not a regular file")


def read_capped(path: Path, limit: int, what: str, missing: str | None = None) -> bytes:
    """The bytes of a user-named regular file of at most ``limit`` bytes, else a one-line
    ConfigError naming the path. The size is checked before reading and the read is capped
    too, so ``/dev/zero``, a FIFO or a 10 GiB file can never exhaust memory or hang.
    ``missing`` replaces "<what> is not a regular file" when the path does not exist.
    """
    require_regular_file(path, what, missing)
    try:
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


def _is_own_state(path: Path) -> bool:
    """Whether writing ``path`` would overwrite glmserve's own state: an existing file under
    ``GLMSERVE_HOME`` (the run store ``runs.sqlite`` and its journal, run logs, sweep files),
    or another name (a hard link, a symlink) for the run store."""
    if not path.exists():
        return False
    home = glmserve_home().resolve()
    real = path.resolve()
    if real == home or home in real.parents:
        return True
    store = home / "runs.sqlite"
    try:
        return store.exists() and os.path.samefile(real, store)
    except OSError:
        return False


def check_output_file(flag: str, text: str | os.PathLike[str]) -> Path:
    """The file an output option names, refused before anything is measured or rendered
    (one-line ConfigError naming ``flag``): empty (an unset shell variable), a directory, a
    missing or unwritable directory, an unwritable file, or glmserve's own state. Writing
    ``--output $GLMSERVE_HOME/runs.sqlite`` replaced the run store, losing every result and
    the records ``stop`` needs to find live servers. An existing FIFO, device or socket is
    refused as ``require_regular_file`` refuses one to read."""
    raw = os.fspath(text)
    if not raw.strip():
        raise ConfigError(f"{flag}: empty; name the file to write")
    path = Path(raw)
    if path.is_dir():
        raise ConfigError(f"{flag} {raw}: is a directory; name the file to write")
    if _is_own_state(path):
        raise ConfigError(
            f"{flag} {raw}: is glmserve's own state (under {glmserve_home()}); write elsewhere"
        )
    if path.exists() and not path.is_file():
        # A FIFO blocks the write until a reader comes (``bench --output FIFO`` hung after
        # the measurement), a device swallows or refuses it: only a regular file is written.
        raise ConfigError(
            f"{flag} {raw}: not a regular file (a FIFO, device or socket); name a file to write"
        )
    parent = path.parent
    if not parent.is_dir():
        raise ConfigError(f"{flag} {raw}: no such directory {parent}")
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{flag} {raw}: not writable")
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {raw}: directory {parent} is not writable")
    return path


def check_output_dir(flag: str, path: Path) -> Path:
    """A directory an output option names (one file per item): it may be created, but only
    inside an existing directory (a typo'd ``/nonexist/deep/dir`` is refused, not built), and
    never a file or glmserve's own state."""
    if not str(path).strip():
        raise ConfigError(f"{flag}: empty; name the directory to write into")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {path}: is a file; name a directory")
    if path.exists() and path.resolve() == glmserve_home().resolve():
        raise ConfigError(f"{flag} {path}: is glmserve's data directory; write elsewhere")
    if not path.exists() and not path.parent.is_dir():
        raise ConfigError(f"{flag} {path}: no such directory {path.parent}")
    return path
