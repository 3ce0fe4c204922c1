"""The server URL of a Slurm run whose login host is reached by ssh: a forward via the login
host to the allocated node's address (remote/endpoint.py ``run_base_url``), not to the login
host's own loopback (a compute node's server is not there)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field

from glmserve.remote.endpoint import run_base_url
from glmserve.remote.slurm_config import SlurmOptions
from glmserve.store import RunRecord


@dataclass
class FakeHost:
    name: str = "cluster"
    is_local: bool = False
    slurm: SlurmOptions = field(default_factory=lambda: SlurmOptions(reach="forward"))


@dataclass
class FakeSsh:
    host: FakeHost = field(default_factory=FakeHost)
    forwards: list[tuple[int, str]] = field(default_factory=list)

    @contextlib.contextmanager
    def endpoint(self, remote_port: int, remote_host: str = "127.0.0.1") -> Iterator[str]:
        self.forwards.append((remote_port, remote_host))
        yield "http://127.0.0.1:45678"


def _run(**slurm) -> RunRecord:
    spec = {"argv": ["python", "-m", "sglang.launch_server", "--host", "0.0.0.0"]}
    return RunRecord(run_id="r1", host="cluster", profile="p", port=30001, run_dir="/w/r1",
                     spec=spec, meta={"slurm": {"job_id": "5", **slurm}})  # fmt: skip


def test_login_over_ssh_forwards_to_the_node_address_not_its_own_loopback():
    t = FakeSsh()
    with run_base_url(_run(node_addr="10.1.2.3"), t) as base:  # type: ignore[arg-type]
        assert base == "http://127.0.0.1:45678"
    assert t.forwards == [(30001, "10.1.2.3")]


def test_glmserve_on_the_login_host_goes_to_the_node_directly():
    t = FakeSsh(host=FakeHost(is_local=True))
    with run_base_url(_run(node_addr="10.1.2.3"), t) as base:  # type: ignore[arg-type]
        assert base == "http://10.1.2.3:30001"
    assert t.forwards == []


def test_auto_reach_goes_direct_only_when_the_node_answers_from_here():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        run = _run(node_addr="127.0.0.1")
        run.port = port
        t = FakeSsh(host=FakeHost(slurm=SlurmOptions(reach="auto")))
        with run_base_url(run, t) as base:  # type: ignore[arg-type]
            assert base == f"http://127.0.0.1:{port}"
        assert t.forwards == []
    with run_base_url(run, t) as base:  # type: ignore[arg-type]  # nothing listens now
        assert base == "http://127.0.0.1:45678"
    assert t.forwards == [(port, "127.0.0.1")]
