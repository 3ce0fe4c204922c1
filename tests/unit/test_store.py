"""Run store: migrations from empty, lookups, bench results, concurrent writer processes."""

from __future__ import annotations

import multiprocessing
import sqlite3

import pytest

from glmserve.errors import RunNotFound
from glmserve.store import RunRecord, RunStore
from glmserve.store_migrations import MIGRATIONS


def _run(rid: str, **kw) -> RunRecord:  # type: ignore[no-untyped-def]
    return RunRecord(run_id=rid, host="local", profile="p", port=8000, run_dir=f"/r/{rid}", **kw)


def test_migrations_build_schema_from_empty_and_are_idempotent(tmp_path):
    path = tmp_path / "runs.sqlite"
    s = RunStore.open(path)
    assert s.applied_migrations() == [name for name, _ in MIGRATIONS]
    cols = {r[1] for r in s.db.execute("PRAGMA table_info(runs)")}
    assert {"run_id", "pid", "pgid", "proc_start", "boot_id", "state", "spec"} <= cols
    assert {r[1] for r in s.db.execute("PRAGMA table_info(bench_results)")} >= {"run_id", "result"}
    assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    s.close()
    again = RunStore.open(path)
    assert again.migrate() == []


def test_get_run_by_unique_prefix_and_errors():
    s = RunStore.open()
    s.add_run(_run("abcd1234", patches=["x"], meta={"k": 1}))
    s.add_run(_run("abff0000"))
    got = s.get_run("abcd")
    assert got.patches == ["x"] and got.meta == {"k": 1}
    with pytest.raises(RunNotFound, match="ambiguous"):
        s.get_run("ab")
    with pytest.raises(RunNotFound, match="no run"):
        s.get_run("zz")
    with pytest.raises(RunNotFound):
        s.get_run("a%")  # LIKE wildcards are literal


def test_update_list_events_and_bench_results():
    s = RunStore.open()
    s.add_run(_run("r1"))
    s.add_run(_run("r2"))
    s.update_run("r1", state="CRASHED", category="OOM", ended_at=1.0)
    assert [r.run_id for r in s.list_runs(live_only=True)] == ["r2"]
    assert [r.run_id for r in s.list_runs(active_only=True)] == ["r2"]
    s.add_event("r2", "READY", "fired up", {"line_no": 3})
    assert s.list_events("r2")[0]["data"] == {"line_no": 3}
    i = s.add_bench_result("r2", {"version": 2, "tok_s": 10.0}, {"cmd": "bench"})
    j = s.add_bench_result(None, {"version": 2}, {})
    assert s.get_bench_result(i)["result"]["tok_s"] == 10.0
    assert [b["id"] for b in s.list_bench_results()] == [j, i]
    assert [b["id"] for b in s.list_bench_results(run_id="r2")] == [i]
    assert len(s.list_bench_results(last=1)) == 1
    with pytest.raises(RunNotFound):
        s.get_bench_result(999)


def _writer(path: str, n: int, tag: str) -> None:
    s = RunStore.open(path)
    for k in range(n):
        rid = f"{tag}-{k}"
        s.add_run(_run(rid))
        s.add_event(rid, "STARTING", None, {})
        s.update_run(rid, state="READY")
        s.add_bench_result(rid, {"k": k}, {})


def test_concurrent_writer_processes_lose_nothing(tmp_path):
    path = str(tmp_path / "runs.sqlite")  # created and migrated by the racing writers
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, 40, f"w{i}")) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    db = sqlite3.connect(path)
    assert db.execute("SELECT COUNT(*) FROM runs WHERE state='READY'").fetchone()[0] == 160
    assert db.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 160
    assert db.execute("SELECT COUNT(*) FROM bench_results").fetchone()[0] == 160
    assert db.execute("SELECT COUNT(*) FROM _migrations").fetchone()[0] == len(MIGRATIONS)


def _open_at_once(path: str, barrier, errors) -> None:  # type: ignore[no-untyped-def]
    barrier.wait()
    try:
        RunStore.open(path).close()
    except Exception as exc:  # the test reports whatever the open raised
        errors.put(str(exc))


def test_processes_opening_a_new_store_at_the_same_moment_all_succeed(tmp_path):
    """Two launches on a fresh $GLMSERVE_HOME once got "database is locked" from the open:
    the WAL switch and first migration race, and SQLite fails the loser without waiting.
    Processes released by one barrier open each new store; every open must succeed."""
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    for round_ in range(25):
        path = str(tmp_path / f"r{round_}" / "runs.sqlite")
        barrier = ctx.Barrier(4)
        procs = [ctx.Process(target=_open_at_once, args=(path, barrier, errors)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
    seen = []
    while not errors.empty():
        seen.append(errors.get())
    assert seen == []


# -- m003: the host entry a run was launched with ------------------------------------------------
_HOST = {"name": "box", "target": "me@10.0.0.5", "port": 2222, "source": "/u/hosts.yaml:2"}


def test_m003_from_empty_keeps_a_runs_host_entry(tmp_path):
    s = RunStore.open(tmp_path / "runs.sqlite")
    assert "m003_run_host_config" in s.applied_migrations()
    assert "host_config" in {r[1] for r in s.db.execute("PRAGMA table_info(runs)")}
    s.add_run(_run("a0000001", host_config=_HOST))
    s.add_run(_run("a0000002"))  # none recorded: NULL, read back as None (not {})
    assert s.get_run("a0000001").host_config == _HOST
    assert s.get_run("a0000002").host_config is None
    assert (
        s.db.execute("SELECT host_config FROM runs WHERE run_id = 'a0000002'").fetchone()[0] is None
    )


def _store_before_m003(path) -> None:  # type: ignore[no-untyped-def]
    """A runs.sqlite as the previous release wrote it: m001 and m002, one live run."""
    import time

    from glmserve.store_migrations import _run_migration

    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    db.execute("BEGIN")
    for name, fn in MIGRATIONS[:2]:
        _run_migration(db, fn)
        db.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))
    db.execute(
        "INSERT INTO runs (run_id, host, profile, port, run_dir, created_at, updated_at, "
        "port_claim) VALUES ('01d00001', 'box', 'p', 30000, '/x', 1, 1, 1)"
    )
    db.execute("COMMIT")
    db.close()


def test_m003_upgrades_the_previous_schema_in_place(tmp_path):
    path = tmp_path / "runs.sqlite"
    _store_before_m003(path)
    s = RunStore.open(path)
    assert s.applied_migrations() == [name for name, _ in MIGRATIONS]
    old = s.get_run("01d00001")
    assert old.host_config is None and old.port_claim == 1  # older row: kept as it was
    s.update_run("01d00001", state="READY")  # an update leaves it NULL
    assert s.get_run("01d00001").host_config is None
    s.add_run(_run("new00001", host_config=_HOST))
    assert s.get_run("new00001").host_config == _HOST


def test_a_previous_schema_opened_read_only_reads_its_runs_without_the_column(tmp_path):
    """``stop`` on a full disk opens the file read-only, unmigrated: the rows still load."""
    path = tmp_path / "runs.sqlite"
    _store_before_m003(path)
    s = RunStore._open_read_only(path, "test")
    assert s.get_run("01d00001").host_config is None
