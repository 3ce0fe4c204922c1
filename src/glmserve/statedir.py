"""Where a resumable command keeps its state: ``$GLMSERVE_HOME/<noun>s/<id>/``.

A sweep and a tune each run for hours and continue with ``--resume <id>``, so both keep one
JSON document (``<noun>.json``) and its markdown (``<noun>.md``) in a directory of their own,
rewritten atomically after every step (a Ctrl-C or a power cut mid-write never leaves half a
file), and hold a ``flock`` on ``.lock`` while they run (a second process resuming the same id
is refused, not left to overwrite the first one's results). ``StateDir`` is that layout, and
the versioned decoding of the document, written once; each command declares its own
(``SWEEPS`` in ``sweep.state``, ``TUNES`` in ``tune.state``) and keeps what differs: the
dataclasses, the markdown, the message naming an unknown id.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from glmserve.errors import ConfigError, StoreError
from glmserve.paths import glmserve_home

T = TypeVar("T")


def dataclass_from(cls: type[T], data: dict[str, Any], **given: Any) -> T:
    """``cls`` built from the keys of ``data`` that are its fields, ``given`` taking over: a
    file written by a newer glmserve may hold more keys, and those are ignored, not an error."""
    names = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    return cls(**{k: v for k, v in data.items() if k in names and k not in given}, **given)


@contextlib.contextmanager
def _disk_errors(what: str, path: Path) -> Iterator[None]:
    """Turn an ``OSError`` on the state folder (a read-only ``$GLMSERVE_HOME``, a file where
    the folder should be, a full disk) into the one-line ``StoreError`` (exit 2) the run store
    gives for the same home: the user's to fix, not a glmserve bug (exit 70)."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or path
        raise StoreError(f"{where}: cannot {what}: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class StateDir:
    """One kind of resumable state: ``sweeps`` of ``sweep.json``, ``tunes`` of ``tune.json``.

    ``busy`` is the refusal a second process gets, formatted with ``ident`` and ``holder``
    (the pid written into the lock file by the process that holds it).
    """

    noun: str  # the file stem, the word in messages and, plural, the directory: "sweep"
    id_prefix: str  # ids read <prefix>-YYYYmmdd-HHMMSS-<4 hex>: "sw"
    busy: str  # "sweep {ident} is being run by another glmserve process (pid {holder})"
    version: int  # of the document; another one is refused (no silent misreading)

    def root(self) -> Path:
        return glmserve_home() / f"{self.noun}s"

    def new_id(self) -> str:
        """A new id: UTC start time (ids sort by age) plus 4 hex digits (two at once differ)."""
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        return f"{self.id_prefix}-{stamp}-{secrets.token_hex(2)}"

    def dir(self, ident: str) -> Path:
        """The id's directory; an id that is not one name (``..``, ``a/b``) is refused."""
        if not ident or "/" in ident or ident.startswith("."):
            raise ConfigError(f"--resume: not a {self.noun} id: {ident!r}")
        return self.root() / ident

    def write(self, ident: str, document: dict[str, Any], markdown: str) -> Path:
        """Write ``<noun>.json`` and ``<noun>.md``, each atomically; returns the JSON's path."""
        d = self.dir(ident)
        with _disk_errors(f"write the {self.noun}'s state", d):
            d.mkdir(parents=True, exist_ok=True)
            for name, text in (
                (f"{self.noun}.json", json.dumps(document, indent=2, default=str)),
                (f"{self.noun}.md", markdown),
            ):
                tmp = d / f".{name}.tmp"
                tmp.write_text(text)
                os.replace(tmp, d / name)
        return d / f"{self.noun}.json"

    def read(self, ident: str) -> tuple[dict[str, Any], str] | None:
        """The stored document and its path (for messages), or None when there is none."""
        path = self.dir(ident) / f"{self.noun}.json"
        if not path.exists():
            return None
        try:
            with _disk_errors(f"read the {self.noun}'s state", path):
                text = path.read_text()
            return json.loads(text), str(path)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{exc.lineno}: corrupt {self.noun} file: {exc.msg}") from exc

    def decode(self, cls: type[T], data: dict[str, Any], where: str, **lists: type) -> T:
        """The stored document ``data`` (read from ``where``) as ``cls``; each of ``lists``
        names a field that holds a list of that dataclass (a sweep's entries)."""
        if data.get("version") != self.version:
            raise ConfigError(f"{where}: unsupported {self.noun} version {data.get('version')!r}")
        items = {name: [dataclass_from(c, x) for x in data[name]] for name, c in lists.items()}
        return dataclass_from(cls, data, **items)

    def ids(self) -> list[str]:
        """Every stored id, oldest first."""
        root = self.root()
        if not root.is_dir():
            return []
        with _disk_errors(f"list the {self.noun}s", root):
            return sorted(p.name for p in root.iterdir() if (p / f"{self.noun}.json").exists())

    @contextlib.contextmanager
    def lock(self, ident: str) -> Iterator[None]:
        """Hold the id's ``.lock`` (with this pid in it) while the body runs; refuse at once
        (``ConfigError``) when another process holds it."""
        d = self.dir(ident)
        with _disk_errors(f"lock the {self.noun}", d):
            d.mkdir(parents=True, exist_ok=True)
            fh = (d / ".lock").open("a+")
        with fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.seek(0)
                holder = fh.read().strip() or "?"
                raise ConfigError(self.busy.format(ident=ident, holder=holder)) from None
            fh.seek(0)
            fh.truncate()
            fh.write(str(os.getpid()))
            fh.flush()
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
