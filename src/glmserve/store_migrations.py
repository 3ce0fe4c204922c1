"""The run store's schema: append-only, named migrations (``m001_initial``, ...), run in order
by ``RunStore.migrate`` on every open, each inside the opener's write transaction with its
``_migrations`` row, so an old file is upgraded in place and a new one is built from empty by
the same code path. A new migration is a new function at the end of ``MIGRATIONS``; a shipped
one is never edited."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any


def _m001_initial(db: sqlite3.Connection) -> None:
    db.executescript(
        """
        CREATE TABLE runs (
            run_id      TEXT PRIMARY KEY,
            host        TEXT NOT NULL,
            profile     TEXT NOT NULL,
            port        INTEGER NOT NULL,
            run_dir     TEXT NOT NULL,
            launcher    TEXT NOT NULL DEFAULT 'sglang',
            pid         INTEGER,
            pgid        INTEGER,
            proc_start  TEXT,            -- /proc/<pid>/stat field 22 (clock ticks since boot)
            boot_id     TEXT,            -- /proc/sys/kernel/random/boot_id at launch
            state       TEXT NOT NULL DEFAULT 'STARTING',
            category    TEXT,
            root_cause  TEXT,
            hint        TEXT,
            log_offset  INTEGER NOT NULL DEFAULT 0,
            tp_size     INTEGER NOT NULL DEFAULT 1,
            patches     TEXT NOT NULL DEFAULT '[]',   -- JSON list
            spec        TEXT NOT NULL DEFAULT '{}',   -- JSON LaunchSpec.to_dict()
            meta        TEXT NOT NULL DEFAULT '{}',   -- JSON, free-form
            created_at  REAL NOT NULL,
            updated_at  REAL NOT NULL,
            ready_at    REAL,
            ended_at    REAL
        );
        CREATE INDEX runs_host_port ON runs(host, port);
        CREATE INDEX runs_created ON runs(created_at);
        CREATE TABLE events (
            id      INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id  TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            ts      REAL NOT NULL,
            state   TEXT NOT NULL,
            line    TEXT,
            data    TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX events_run ON events(run_id, id);
        CREATE TABLE bench_results (
            id          INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id      TEXT REFERENCES runs(run_id) ON DELETE SET NULL,
            created_at  REAL NOT NULL,
            result      TEXT NOT NULL,   -- JSON: the versioned bench result
            meta        TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX bench_results_run ON bench_results(run_id, id);
        """
    )


def _m002_port_claims(db: sqlite3.Connection) -> None:
    """A launch claims its host:port in the row it writes before anything starts; the unique
    index makes a second live claim on the same host:port fail atomically. Rows written
    before this migration hold no claim (NULL)."""
    db.executescript(
        """
        ALTER TABLE runs ADD COLUMN port_claim INTEGER;  -- 1 while the run holds host:port
        CREATE UNIQUE INDEX runs_port_claim ON runs(host, port) WHERE port_claim IS NOT NULL;
        """
    )


def _m003_run_host_config(db: sqlite3.Connection) -> None:
    """Each run keeps the host entry it was launched with (JSON ``HostConfig``), so later
    verbs reach the host the run is on, not whatever hosts.yaml says today. Rows written
    before this migration have none (NULL): those fall back to today's hosts.yaml."""
    db.executescript(
        """
        ALTER TABLE runs ADD COLUMN host_config TEXT;  -- JSON HostConfig at launch; NULL: older
        """
    )


# Append only: never edit or reorder a shipped migration, add m004_... instead.
MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("m001_initial", _m001_initial),
    ("m002_port_claims", _m002_port_claims),
    ("m003_run_host_config", _m003_run_host_config),
]


def _run_migration(db: sqlite3.Connection, fn: Callable[[sqlite3.Connection], None]) -> None:
    """Run a migration inside the caller's transaction.

    ``executescript`` would COMMIT first, so split the script's statements and run each with
    ``execute``; that keeps the migration and its ``_migrations`` row atomic.
    """

    class _Proxy:
        def executescript(self, script: str) -> None:
            for stmt in _split_sql(script):
                db.execute(stmt)

        def execute(self, *a: Any) -> sqlite3.Cursor:
            return db.execute(*a)

    fn(_Proxy())  # type: ignore[arg-type]


def _split_sql(script: str) -> list[str]:
    """Split a migration script into statements (complete_statement handles quoting)."""
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        if line.strip().startswith("--") and not buf.strip():
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            stmt = buf.strip()
            if stmt and stmt != ";":
                out.append(stmt)
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out
