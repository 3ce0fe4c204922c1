"""A bench with another client's streams in flight on the same server is ``contended``: the
run's own decode-batch log lines say more requests were running than the bench ever had in
flight. ``compare`` gives such a level no speedup; a bench alone on the server is not flagged,
and its server-reported throughput agrees with the client's (no warning)."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from tests.fixtures.cli import run_glmserve as cli
from tests.fixtures.simulator import free_port

from glmserve.cli import main
from glmserve.store import RunStore

pytestmark = pytest.mark.slow


@pytest.fixture
def run_id():
    port = free_port()
    res = cli("launch", "--simulate", "--profile", "flashinfer", "--poll", "0.3",
              "--set", "sim.speed=10", "--set", f"server.port={port}",
              "--set", "server.decode-log-interval=4")  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    rid = res.stdout.split()[0]
    yield rid
    cli("stop", rid)


def url_of(run_id: str) -> str:
    with RunStore.open() as store:
        run = store.get_run(run_id)
    return f"http://127.0.0.1:{run.port}"


def foreign_client(url: str, streams: int, stop: threading.Event) -> list[threading.Thread]:
    """Another team's load: ``streams`` long generations, re-sent until ``stop``."""

    def one() -> None:
        with httpx.Client(timeout=120) as c:
            while not stop.is_set():
                body = {"text": "x" * 64, "sampling_params": {"max_new_tokens": 400}}
                c.post(url + "/generate", json=body)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(streams)]
    for t in threads:
        t.start()
    return threads


def bench(capsys, run_id: str) -> dict:
    rc = main(["bench", run_id, "--json", "--warmup", "0", "--output-len", "48",
               "--num-prompts", "3"])  # fmt: skip
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_foreign_streams_make_the_level_contended_and_not_comparable(capsys, run_id):
    alone = bench(capsys, run_id)
    lv = alone["levels"][0]
    assert lv["server_view"]["source"] == "log"
    assert lv["server_view"]["server_max_running"] == 1
    assert not lv.get("contended") and not lv.get("warnings"), lv
    stop = threading.Event()
    threads = foreign_client(url_of(run_id), 6, stop)
    try:
        shared = bench(capsys, run_id)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    lv = shared["levels"][0]
    assert lv["server_view"]["server_max_running"] > 1
    assert "contended" in lv["contended"] and "another client's load" in lv["contended"]
    assert any("contended" in n for n in shared["notes"])
    # the server generated for 7 streams, the client saw 1: the counters disagree
    assert any("gen tok/s" in w for w in lv["warnings"]), lv
    assert main(["compare", str(alone["id"]), str(shared["id"]), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][1]
    assert row["decode_speedup"] is None
    assert "contended" in row["levels"]["1"]["flag"]
