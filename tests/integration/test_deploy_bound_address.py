"""A server bound to one address is probed at that address (issue 20, item 4).

Before: with ``server.host=127.0.0.2`` (a private NIC; Linux loopback accepts all of 127/8),
``launch`` said READY from the log, then ``status`` asked ``/health`` on 127.0.0.1, got no
answer, and stored the healthy run as CRASHED ("a worker likely died"); ``bench`` refused it.
Every probe now connects where the server binds.
"""

from __future__ import annotations

import json
import socket

import pytest
from tests.fixtures.cli import run_glmserve

from glmserve.remote.address import bind_host, probe_host
from glmserve.store import RunStore

pytestmark = pytest.mark.slow


def _free_port_on(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


@pytest.fixture
def stop_left():  # type: ignore[no-untyped-def]
    yield
    from glmserve.remote.stop import stop_run

    with RunStore.open() as store:
        for run in store.list_runs():
            if run.pgid is not None and run.ended_at is None:
                stop_run(run.run_id, timeout=5, store=store)


def test_a_run_bound_to_127_0_0_2_is_watched_benched_and_stays_ready(stop_left):
    port = _free_port_on("127.0.0.2")
    launch = run_glmserve(
        "launch", "--profile", "flashinfer", "--simulate", "--set", "server.host=127.0.0.2",
        "--set", f"server.port={port}", "--poll", "0.2", "--json",
    )  # fmt: skip
    assert launch.returncode == 0, launch.stderr
    run_id = json.loads(launch.stdout[launch.stdout.index("{") :])["run"]["run_id"]
    # nothing answers on 127.0.0.1:port: the server is really bound to 127.0.0.2 only
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    status = run_glmserve("status", run_id, "--json")
    assert status.returncode == 0, status.stderr
    (row,) = json.loads(status.stdout)
    assert (row["state"], row["healthy"], row["identity_problems"]) == ("READY", True, [])
    bench = run_glmserve("bench", run_id, "--num-prompts", "2", "--output-len", "8", "--json")
    assert bench.returncode == 0, bench.stderr
    with RunStore.open() as store:
        assert store.get_run(run_id).state == "READY"
        assert len(store.list_bench_results(run_id)) == 1


def test_a_host_no_probe_can_reach_is_refused_at_plan_time():
    res = run_glmserve("check", "--profile", "flashinfer", "--simulate", "--set",
                       "server.host=not a host")  # fmt: skip
    assert res.returncode == 2
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: <--set>") and "--host 'not a host' is not an address" in last


@pytest.mark.parametrize(
    ("argv", "where"),
    [
        ([], "127.0.0.1"),  # SGLang's default (ServerArgs.host, 0.5.9 srt/server_args.py)
        (["--host", "0.0.0.0"], "127.0.0.1"),
        (["--host", "::"], "::1"),
        (["--host", "[::]"], "::1"),
        (["--host=10.1.2.3"], "10.1.2.3"),
        (["--host", "127.0.0.2"], "127.0.0.2"),
        (["--host", "fe80::1"], "fe80::1"),
        (["--host", "gpu8.internal"], "gpu8.internal"),
    ],
)
def test_probe_host_of_each_bind(argv, where):
    assert probe_host(bind_host(argv)) == where


def test_a_stranger_on_another_address_of_the_same_port_is_not_the_runs_listener(stop_left):
    """Another server on 127.0.0.1:P answers none of the probes of a run bound to
    127.0.0.2:P: the launch goes ahead and the run is READY, not PORT_IN_USE."""
    port = _free_port_on("127.0.0.2")
    with socket.socket() as stranger:
        stranger.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            stranger.bind(("127.0.0.1", port))
        except OSError:
            pytest.skip(f"127.0.0.1:{port} is taken")
        stranger.listen()
        launch = run_glmserve(
            "launch", "--profile", "flashinfer", "--simulate", "--set", "server.host=127.0.0.2",
            "--set", f"server.port={port}", "--poll", "0.2", "--json",
        )  # fmt: skip
        assert launch.returncode == 0, launch.stderr
        run_id = json.loads(launch.stdout[launch.stdout.index("{") :])["run"]["run_id"]
        status = run_glmserve("status", run_id, "--json")
        assert status.returncode == 0, status.stderr
        (row,) = json.loads(status.stdout)
        assert (row["state"], row["healthy"]) == ("READY", True), row
