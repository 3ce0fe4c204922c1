"""The run store's port claim (issue 10 #12) and bounded log reads (issue 11 #8) without a
host: one live claim per host+port, released when the run ends; a store written before the
claim existed still opens; ``read_log_tail`` returns exactly the last lines."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from glmserve.errors import PortClaimed
from glmserve.remote.hosts import get_host
from glmserve.remote.runlog import read_log_bytes, read_log_tail
from glmserve.remote.transport import LocalTransport
from glmserve.store import RunRecord, RunStore
from glmserve.store_migrations import MIGRATIONS, _run_migration


def _run(run_id: str, port: int = 30000, host: str = "local", claim: bool = True) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        host=host,
        profile="p",
        port=port,
        run_dir="/x",
        port_claim=1 if claim else None,
    )


def test_second_live_claim_on_a_host_port_is_refused(tmp_path):
    store = RunStore.open(tmp_path / "runs.sqlite")
    store.add_run(_run("aaaa0001"))
    with pytest.raises(PortClaimed) as exc:
        store.add_run(_run("aaaa0002"))
    assert exc.value.holder == "aaaa0001" and "port 30000 on local" in str(exc.value)
    store.add_run(_run("aaaa0003", port=30001))  # another port
    store.add_run(_run("aaaa0004", host="gpu8"))  # another host
    assert [r.run_id for r in store.list_runs()] == ["aaaa0004", "aaaa0003", "aaaa0001"]


@pytest.mark.parametrize(
    "fields", [{"state": "STOPPED"}, {"state": "FAILED"}, {"ended_at": 1.0, "state": "EXITED"}]
)
def test_claim_is_released_when_the_run_ends(tmp_path, fields):
    store = RunStore.open(tmp_path / "runs.sqlite")
    store.add_run(_run("aaaa0001"))
    store.update_run("aaaa0001", state="CRASHED")  # may still hold GPUs and port: kept
    with pytest.raises(PortClaimed):
        store.add_run(_run("aaaa0002"))
    store.update_run("aaaa0001", **fields)
    assert store.get_run("aaaa0001").port_claim is None
    store.add_run(_run("aaaa0002"))
    assert store.port_holder("local", 30000) == "aaaa0002"


def _main_store(path: Path) -> None:
    """A runs.sqlite as today's main writes it: only m001, with live rows on one port."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    name, fn = MIGRATIONS[0]
    db.execute("BEGIN")
    _run_migration(db, fn)
    db.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))
    for rid in ("01d00001", "01d00002"):  # two live rows on one port: possible before claims
        db.execute(
            "INSERT INTO runs (run_id, host, profile, port, run_dir, created_at, updated_at) "
            "VALUES (?, 'local', 'p', 30000, '/x', 1, 1)",
            (rid,),
        )
    db.execute("COMMIT")
    db.close()


def test_store_written_by_main_opens_and_gains_the_claim(tmp_path):
    path = tmp_path / "runs.sqlite"
    _main_store(path)
    store = RunStore.open(path)
    assert store.applied_migrations() == [name for name, _ in MIGRATIONS]
    old = store.list_runs(live_only=True)
    assert {r.run_id for r in old} == {"01d00001", "01d00002"}
    assert all(r.port_claim is None for r in old)
    store.add_run(_run("new00001"))  # old rows hold no claim; find_alive_runs probes them
    with pytest.raises(PortClaimed):
        store.add_run(_run("new00002"))


def test_damaged_store_is_refused_by_check(tmp_path):
    path = tmp_path / "runs.sqlite"
    store = RunStore.open(path)
    store.add_run(_run("aaaa0001"))
    store.check()  # a sound file passes
    page = store.db.execute("PRAGMA page_size").fetchone()[0]
    root = store.db.execute("SELECT rootpage FROM sqlite_master WHERE name='events'").fetchone()[0]
    store.close()
    with path.open("r+b") as f:
        f.seek((root - 1) * page)
        f.write(b"\xa5" * page)
    from glmserve.errors import StoreError

    with pytest.raises(StoreError, match="damaged"):
        RunStore.open(path).check()


@pytest.mark.parametrize(
    ("text", "n", "want"),
    [
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc", 2, b"b\nc"),
        (b"a\nb\n", 5, b"a\nb\n"),
        (b"", 3, b""),
        (b"a\nb\n", 0, b""),
    ],
)
def test_read_log_tail_small(tmp_path, text, n, want):
    p = tmp_path / "server.log"
    p.write_bytes(text)
    data, end = read_log_tail(LocalTransport(get_host("local")), str(p), n)
    assert data == want and end == len(text)


def test_read_log_tail_across_blocks_reads_only_the_end(tmp_path):
    """Lines longer than the first block, and a big file: the tail is exact, and far less
    than the file is read."""
    p = tmp_path / "server.log"
    body = b"".join(b"line %d %s\n" % (i, b"y" * (i % 300)) for i in range(200_000))
    long_tail = b"".join(b"long %d %s\n" % (i, b"z" * 50_000) for i in range(3))
    p.write_bytes(body + long_tail)
    reads: list[int] = []

    class Counting(LocalTransport):
        def read_from(self, path: str, offset: int, limit: int = 1 << 22) -> tuple[bytes, int]:
            data, new = super().read_from(path, offset, limit)
            reads.append(len(data))
            return data, new

    data, end = read_log_tail(Counting(get_host("local")), str(p), 4)
    assert data == (body + long_tail).splitlines(keepends=True)[-4] + long_tail
    assert end == p.stat().st_size and sum(reads) < 1_000_000 < end


def test_read_log_bytes_stops_at_the_size_it_started_with(tmp_path):
    """A log that grows while it is read: the read ends at the size seen first."""
    p = tmp_path / "server.log"
    p.write_bytes(b"x" * 10)

    class Growing(LocalTransport):
        def read_from(self, path: str, offset: int, limit: int = 1 << 22) -> tuple[bytes, int]:
            with open(path, "ab") as f:
                f.write(b"y" * 5)  # the server keeps writing between our reads
            return super().read_from(path, offset, min(limit, 4))

    data, end = read_log_bytes(Growing(get_host("local")), str(p))
    assert data == b"x" * 10 and end == 10
