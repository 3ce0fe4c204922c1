"""The run store: every launch, phase event and bench result in one SQLite file.

Lives at ``$GLMSERVE_HOME/runs.sqlite``. The schema is built by append-only, named migrations
(``m001_initial``, ..., in :mod:`glmserve.store_migrations`) recorded in ``_migrations`` and
applied on every open, so an old file is upgraded in place and a new one is built from empty by
the same code path. WAL journaling plus a busy timeout plus ``BEGIN IMMEDIATE`` for every write
make several glmserve processes (a watch, a bench, a ``stop``) safe to write at once: writers
queue on the lock instead of failing.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from glmserve.errors import GlmserveError, PortClaimed, RunNotFound, StoreError
from glmserve.paths import glmserve_home
from glmserve.store_migrations import MIGRATIONS, _run_migration

BUSY_TIMEOUT_MS = 30_000

# States a run is in once it can no longer change by itself.
TERMINAL_STATES = frozenset(
    {"CRASHED", "STALLED", "EXITED", "STOPPED", "FAILED", "TIME_LIMIT", "NODE_FAIL", "PREEMPTED"}
)  # the last three: a Slurm job ended by the scheduler (remote/slurm.py)


@dataclass
class RunRecord:
    """One launched server, as recorded (the row of ``runs`` with JSON columns decoded)."""

    run_id: str
    host: str
    profile: str
    port: int
    run_dir: str
    launcher: str = "sglang"
    pid: int | None = None
    pgid: int | None = None
    proc_start: str | None = None
    boot_id: str | None = None
    state: str = "STARTING"
    category: str | None = None
    root_cause: str | None = None
    hint: str | None = None
    log_offset: int = 0
    tp_size: int = 1
    patches: list[str] = field(default_factory=list)
    spec: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    ready_at: float | None = None
    ended_at: float | None = None
    port_claim: int | None = None  # 1 while the run holds its host:port (released at its end)
    # The host entry the run was launched with (``HostConfig.model_dump``); None for a run
    # recorded before m003 (later verbs then use today's hosts.yaml, see remote/run_host.py).
    host_config: dict[str, Any] | None = None

    @property
    def log_path(self) -> str:
        return f"{self.run_dir}/server.log"

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


_JSON_COLS = {"patches", "spec", "meta", "host_config"}
_JSON_EMPTY: dict[str, Any] = {"patches": [], "spec": {}, "meta": {}, "host_config": None}
_RUN_COLS = tuple(RunRecord.__dataclass_fields__)
_TABLES = ("runs", "events", "bench_results")
_SQLITE_MAX_LIMIT = 2**63 - 1


# States that end a run's claim on its port (with ``ended_at``): as ``list_runs(live_only)``.
_RELEASING_STATES = frozenset({"STOPPED", "FAILED"})


def _json_col(raw: Any, what: str, empty: Any) -> Any:
    """A JSON column's value; a damaged cell is a StoreError naming the row, not a crash."""
    if not raw:
        return empty
    try:
        return json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"run store: {what} is not valid JSON ({exc})") from exc


def _json_cell(col: str, value: Any) -> str | None:
    """A JSON column's cell: ``host_config`` None stays NULL (a run without a recorded host)."""
    if col == "host_config" and value is None:
        return None
    return json.dumps(value, default=str)


def _row_to_run(row: sqlite3.Row) -> RunRecord:
    d = {k: row[k] for k in row.keys() if k in _RUN_COLS}  # noqa: SIM118 (Row iterates values)
    for k in _JSON_COLS:
        d[k] = _json_col(d.get(k), f"run {d.get('run_id')!r} column {k}", _JSON_EMPTY[k])
    return RunRecord(**d)


_F = TypeVar("_F", bound=Callable[..., Any])


def _db_errors(fn: _F) -> _F:
    """Turn a sqlite error inside a store method into a one-line StoreError naming the file
    (a locked, damaged or foreign runs.sqlite is the user's to fix, not a glmserve bug)."""

    @functools.wraps(fn)
    def wrapper(self: RunStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise _store_error(self.path, exc) from exc

    return wrapper  # type: ignore[return-value]


def _no_room(exc: sqlite3.Error) -> bool:
    """SQLite's words for a disk that cannot take a write (full, or the write failed)."""
    text = str(exc)
    return "disk I/O error" in text or "database or disk is full" in text


def _store_error(path: Path, exc: sqlite3.Error) -> StoreError:
    text = str(exc)
    if "locked" in text or "busy" in text:
        text += f" (another glmserve process held it for over {BUSY_TIMEOUT_MS // 1000} s)"
    return StoreError(f"{path}: run store error: {text}")


def _cannot_write(exc: sqlite3.Error) -> bool:
    """SQLite's words for a file it could not create or write (permissions, among others)."""
    text = str(exc)
    return "unable to open database file" in text or "readonly database" in text


def _unwritable(p: Path) -> str:
    """Why SQLite could not open ``p`` when the cause is its folder, "" otherwise. SQLite's
    own words ("unable to open database file", "attempt to write a readonly database") do
    not say that the folder is the problem: every open writes there (the WAL and shared-memory
    files, the open lock), so the store needs a writable folder even to be read."""
    if not os.access(p.parent, os.W_OK | os.X_OK):
        return (
            f"the directory {p.parent} is not writable (SQLite creates the store's journal "
            "and lock files there, even to read it); make it writable or point GLMSERVE_HOME "
            "at a writable directory"
        )
    return ""


@contextmanager
def _opening(p: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<store>.lock`` while a process opens and migrates.

    Two processes opening a new store at once race on ``PRAGMA journal_mode = WAL`` and the
    first migration, and SQLite answers the loser "database is locked" at once, without its
    busy handler (two concurrent ``launch`` calls on a fresh ``$GLMSERVE_HOME`` hit it). The
    lock is held only for the open; where the lock file cannot be made (a full disk, a
    read-only directory) the open goes on without it, as before."""
    try:
        fd = os.open(f"{p}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class RunStore:
    """Thin, typed access to runs.sqlite. One connection per instance; cheap to open."""

    def __init__(self, db: sqlite3.Connection, path: Path, read_only: str = "") -> None:
        self.db = db
        self.path = path
        # Why the file could only be opened for reading (a full disk), "" when writable.
        self.read_only = read_only

    @classmethod
    def open(cls, path: str | Path | None = None, *, read_only_ok: bool = False) -> RunStore:
        """Open (creating and migrating as needed) the store; default ``$GLMSERVE_HOME``.

        ``read_only_ok``: a store that exists but cannot be written (a read-only
        ``$GLMSERVE_HOME``, not only a full disk) is opened for reading, so ``stop`` can still
        find and stop a run: refusing would leave the server running (``read_only`` says why)."""
        p = Path(path) if path is not None else glmserve_home() / "runs.sqlite"
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{p.parent}: cannot create the run store's directory: {exc}") from exc
        if p.exists() and not p.is_file():
            raise StoreError(f"{p}: cannot open run store: not a regular file")
        db: sqlite3.Connection | None = None
        try:
            with _opening(p):
                db = sqlite3.connect(str(p), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
                db.row_factory = sqlite3.Row
                db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA foreign_keys = ON")
                store = cls(db, p)
                store.migrate()
                store._check_schema()
        except (sqlite3.Error, StoreError) as exc:
            if db is not None:
                db.close()
            if isinstance(exc, StoreError):
                raise
            if _no_room(exc) and p.is_file():
                return cls._open_read_only(p, str(exc))
            why = (_cannot_write(exc) and _unwritable(p)) or str(exc)
            if read_only_ok and _cannot_write(exc) and p.is_file():
                return cls._open_read_only(p, why)
            raise StoreError(f"{p}: cannot open run store: {why}") from exc
        return store

    @classmethod
    def _open_read_only(cls, p: Path, why: str) -> RunStore:
        """The store as it is on disk, for reading only: WAL mode needs to create files to open
        at all, which fails on a full disk. ``stop`` and ``bench`` still work from it; every
        write raises a StoreError naming the file and the reason."""
        try:
            uri = f"{p.resolve().as_uri()}?mode=ro&immutable=1"
            db = sqlite3.connect(uri, uri=True, isolation_level=None)
            db.row_factory = sqlite3.Row
            store = cls(db, p, read_only=why)
            store._check_schema()
        except sqlite3.Error as exc:
            raise StoreError(f"{p}: cannot open run store: {why}; read-only: {exc}") from exc
        return store

    def _check_schema(self) -> None:
        """Refuse a file written by a newer glmserve (migrations this release does not know)
        or one missing glmserve's tables, before any query trips over it."""
        known = {name for name, _ in MIGRATIONS}
        unknown = sorted(set(self.applied_migrations()) - known)
        if unknown:
            raise StoreError(
                f"{self.path}: run store was written by a newer glmserve (schema "
                f"{', '.join(unknown)}); upgrade glmserve or point GLMSERVE_HOME elsewhere"
            )
        have = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = [t for t in _TABLES if t not in have]
        if missing:
            raise StoreError(
                f"{self.path}: not a usable glmserve run store (missing table "
                f"{', '.join(missing)}); move it aside and glmserve starts a new one"
            )

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taking the write lock up front (no upgrade deadlocks)."""
        if self.read_only:
            raise StoreError(f"{self.path}: run store is read-only now ({self.read_only})")
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    @_db_errors
    def migrate(self) -> list[str]:
        """Apply pending migrations; returns the names applied now. Safe to race."""
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL)"
        )
        applied_now: list[str] = []
        with self._write() as db:
            done = {r[0] for r in db.execute("SELECT name FROM _migrations")}
            for name, fn in MIGRATIONS:
                if name in done:
                    continue
                _run_migration(db, fn)
                db.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))
                applied_now.append(name)
        return applied_now

    @_db_errors
    def applied_migrations(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT name FROM _migrations ORDER BY rowid")]

    # -- runs -------------------------------------------------------------------------------
    @_db_errors
    def add_run(self, run: RunRecord) -> RunRecord:
        now = time.time()
        run.created_at = run.created_at or now
        run.updated_at = now
        d = run.to_dict()
        for k in _JSON_COLS:
            d[k] = _json_cell(k, d[k])
        cols = ", ".join(d)
        marks = ", ".join("?" for _ in d)
        try:
            with self._write() as db:
                db.execute(f"INSERT INTO runs ({cols}) VALUES ({marks})", tuple(d.values()))
        except sqlite3.IntegrityError as exc:
            if not run.port_claim or "port" not in str(exc):
                raise
            holder = self.port_holder(run.host, run.port)
            raise PortClaimed(
                f"port {run.port} on {run.host} is claimed by run {holder or '?'} (launching or "
                f"live); see `glmserve status {holder or ''}`".rstrip(),
                holder,
            ) from exc
        return run

    @_db_errors
    def port_holder(self, host: str, port: int) -> str | None:
        """The run holding the claim on host:port, if any."""
        row = self.db.execute(
            "SELECT run_id FROM runs WHERE host = ? AND port = ? AND port_claim IS NOT NULL",
            (host, port),
        ).fetchone()
        return None if row is None else str(row[0])

    @_db_errors
    def check(self) -> None:
        """Refuse a damaged file before anything is started on its behalf (a launch must be
        able to record what it starts): SQLite's own structural check, first problem only."""
        row = self.db.execute("PRAGMA quick_check(1)").fetchone()
        if row is None or row[0] != "ok":
            why = row[0] if row is not None else "no answer"
            raise StoreError(
                f"{self.path}: run store is damaged ({why}); move it aside and glmserve "
                "starts a new one"
            )

    @_db_errors
    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set columns of one run (unknown column names are a programming error)."""
        bad = set(fields) - set(_RUN_COLS)
        if bad:
            raise GlmserveError(f"unknown run fields: {sorted(bad)}")
        fields["updated_at"] = time.time()
        if fields.get("ended_at") is not None or fields.get("state") in _RELEASING_STATES:
            fields.setdefault("port_claim", None)  # the run is over: its port is free to claim
        for k in _JSON_COLS & set(fields):
            fields[k] = _json_cell(k, fields[k])
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._write() as db:
            db.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", (*fields.values(), run_id))

    @_db_errors
    def get_run(self, run_id: str) -> RunRecord:
        """The run with this id or unique id prefix; RunNotFound otherwise (an empty id too:
        it is no prefix of every run but, most likely, an unset shell variable)."""
        if not run_id.strip():
            raise RunNotFound("empty run id (an unset shell variable?); see `glmserve runs`")
        row = self.db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None and run_id:
            like = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows = self.db.execute(
                "SELECT * FROM runs WHERE run_id LIKE ? ESCAPE '\\' LIMIT 2", (like,)
            ).fetchall()
            if len(rows) > 1:
                raise RunNotFound(f"run id prefix {run_id!r} is ambiguous; give more characters")
            row = rows[0] if rows else None
        if row is None:
            raise RunNotFound(f"no run {run_id!r} (see `glmserve runs`)")
        return _row_to_run(row)

    @_db_errors
    def list_runs(
        self,
        host: str | None = None,
        port: int | None = None,
        active_only: bool = False,
        last: int | None = None,
        live_only: bool = False,
    ) -> list[RunRecord]:
        """Runs, newest first, optionally filtered by host/port/non-terminal state.

        ``live_only``: runs whose processes were not yet seen gone (a CRASHED or STALLED
        server may still hold its GPUs until stopped)."""
        where, args = [], []
        if host is not None:
            where.append("host = ?")
            args.append(host)
        if port is not None:
            where.append("port = ?")
            args.append(port)
        if live_only:
            where.append("ended_at IS NULL AND state NOT IN ('STOPPED', 'FAILED')")
        if active_only:
            where.append(f"state NOT IN ({', '.join('?' for _ in TERMINAL_STATES)})")
            args.extend(sorted(TERMINAL_STATES))
        sql = "SELECT * FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, rowid DESC"
        if last and last > 0:
            sql += " LIMIT ?"
            args.append(min(int(last), _SQLITE_MAX_LIMIT))
        return [_row_to_run(r) for r in self.db.execute(sql, args)]

    # -- events -----------------------------------------------------------------------------
    @_db_errors
    def add_event(
        self, run_id: str, state: str, line: str | None = None, data: dict | None = None
    ) -> int:
        with self._write() as db:
            cur = db.execute(
                "INSERT INTO events (run_id, ts, state, line, data) VALUES (?, ?, ?, ?, ?)",
                (run_id, time.time(), state, line, json.dumps(data or {}, default=str)),
            )
        return int(cur.lastrowid or 0)

    @_db_errors
    def stop_requested(self, run_id: str) -> bool:
        """Has ``glmserve stop`` begun on this run? Its STOPPING event is written before the
        first signal, so a watcher or ``status`` that then finds the processes gone knows the
        user ended them: not a crash, not a plain exit."""
        row = self.db.execute(
            "SELECT 1 FROM events WHERE run_id = ? AND state IN ('STOPPING', 'STOPPED') LIMIT 1",
            (run_id,),
        ).fetchone()
        return row is not None

    @_db_errors
    def list_events(self, run_id: str) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT * FROM events WHERE run_id = ? ORDER BY id", (run_id,)
        ).fetchall()
        return [{**dict(r), "data": _json_col(r["data"], f"event {r['id']}", {})} for r in rows]

    # -- bench results ----------------------------------------------------------------------
    @_db_errors
    def add_bench_result(self, run_id: str | None, result: dict, meta: dict | None = None) -> int:
        """Store one result as strict JSON (a non-finite number becomes null: see strictjson)."""
        from glmserve.strictjson import dumps as strict_dumps

        with self._write() as db:
            cur = db.execute(
                "INSERT INTO bench_results (run_id, created_at, result, meta) VALUES (?, ?, ?, ?)",
                (run_id, time.time(), strict_dumps(result)[0], strict_dumps(meta or {})[0]),
            )
        return int(cur.lastrowid or 0)

    @_db_errors
    def get_bench_result(self, result_id: int) -> dict[str, Any]:
        """One stored result; RunNotFound for an id no row can have (beyond SQLite's int64,
        which sqlite3 would refuse with OverflowError) as for one that is not there."""
        if not -(2**63) <= result_id < 2**63:
            raise RunNotFound(f"no bench result {result_id} (see `glmserve results`)")
        row = self.db.execute("SELECT * FROM bench_results WHERE id = ?", (result_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"no bench result {result_id} (see `glmserve results`)")
        return _bench_row(row)

    @_db_errors
    def list_bench_results(
        self, run_id: str | None = None, last: int | None = None
    ) -> list[dict[str, Any]]:
        """Bench results, newest first."""
        sql, args = "SELECT * FROM bench_results", []
        if run_id is not None:
            sql += " WHERE run_id = ?"
            args.append(run_id)
        sql += " ORDER BY id DESC"
        if last and last > 0:
            sql += " LIMIT ?"
            args.append(min(int(last), _SQLITE_MAX_LIMIT))
        return [_bench_row(r) for r in self.db.execute(sql, args)]


def _bench_row(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "run_id": row["run_id"],
        "created_at": row["created_at"],
        "result": _json_col(row["result"], f"bench result {row['id']}", {}),
        "meta": _json_col(row["meta"], f"bench result {row['id']} meta", {}),
    }
