"""A run keeps the host entry it was launched with (issue 21, item 2), through a real sshd.

Before: ``status`` and ``stop`` re-resolved a run's host through today's hosts.yaml, so an
entry whose port was changed (or that was removed) since the launch lost the run: ``status``
said ``READY?`` with an ssh error, ``stop`` exited 5 and the server kept running. Each step of
one command also built its own ssh transport (and re-read hosts.yaml).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from tests.fixtures.cli import run_glmserve as cli

from glmserve.cli import main
from glmserve.remote import hosts as hosts_mod
from glmserve.remote import transport as transport_mod
from glmserve.remote.hosts import get_host
from glmserve.remote.process import probe_group
from glmserve.remote.transport import SshTransport, free_local_port

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


def _launch_args(host: str, port: int) -> list[str]:
    return [
        "launch", "--profile", "trtllm_mla", "--host", host, "--simulate",
        "--set", f"server.port={port}", "--set", "sim.gpu-arch=sm100", "--set", "sim.speed=20",
        "--poll", "0.3", "--json",
    ]  # fmt: skip


def _json(out: str) -> Any:
    return json.loads(out[min(i for i in (out.find("{"), out.find("[")) if i >= 0) :])


@pytest.mark.parametrize("edit", ["port", "removed"])
def test_status_and_stop_reach_the_recorded_host_after_hosts_yaml_changed(
    ssh_host, stop_left_remote_runs, edit
):
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"]) / "hosts.yaml"
    original = cfg.read_text()
    res = cli(*_launch_args(ssh_host, free_local_port()), timeout=90)
    assert res.returncode == 0, res.stderr
    run = _json(res.stdout)["run"]
    try:
        if edit == "port":  # nothing listens there: today's entry cannot reach the run
            cfg.write_text(original + f"    port: {free_local_port()}\n")
            why = "hosts.yaml changed since run"
        else:
            cfg.write_text("hosts: {}\n")
            why = "has no usable hosts.yaml entry now"
        st = cli("status", run["run_id"], "--json")
        assert st.returncode == 0, st.stderr
        row = _json(st.stdout)[0]
        assert row["state"] == "READY", row  # checked live on the host it was launched on
        assert (
            why in row["host_note"]
            and "acting on the entry it was launched with" in (row["host_note"])
        )
        assert [ln for ln in st.stderr.splitlines() if ln.startswith("warning:")] == [
            f"warning: {row['host_note']}"
        ]
        stop = cli("stop", run["run_id"], "--json")
        assert stop.returncode == 0, stop.stderr
        rep = _json(stop.stdout)[0]
        assert run["pid"] in rep["signalled"] and rep["left"] == []
        assert rep["host_note"] == row["host_note"]
        assert f"warning: {row['host_note']}" in stop.stderr.splitlines()
    finally:
        cfg.write_text(original)
    assert probe_group(SshTransport(get_host(ssh_host)), run["pgid"]).live_pids == []


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Entries resolved and ssh transports built since the last ``reset``."""
    n = {"resolve": 0, "ssh": 0}
    build, ssh_init = hosts_mod._build, SshTransport.__init__

    def counted_build(e: Any) -> Any:
        n["resolve"] += 1
        return build(e)

    def counted_ssh(self: Any, host: Any) -> None:
        n["ssh"] += 1
        ssh_init(self, host)

    monkeypatch.setattr(hosts_mod, "_build", counted_build)
    monkeypatch.setattr(SshTransport, "__init__", counted_ssh)
    return n


def _new_command(n: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """What a fresh ``glmserve`` process starts with: nothing resolved, no transport."""
    monkeypatch.setattr(hosts_mod, "_resolved", {}, raising=False)
    monkeypatch.setattr(transport_mod, "_transports", {}, raising=False)
    n.update(resolve=0, ssh=0)


def test_launch_status_stop_resolve_the_host_once_and_build_one_transport(
    ssh_host, stop_left_remote_runs, counted, monkeypatch, capsys
):
    _new_command(counted, monkeypatch)
    assert main(_launch_args(ssh_host, free_local_port())) == 0
    run = _json(capsys.readouterr().out)["run"]
    assert counted == {"resolve": 1, "ssh": 1}  # before: 3 and 4
    for verb in (["status", run["run_id"], "--json"], ["stop", run["run_id"], "--json"]):
        _new_command(counted, monkeypatch)
        rc, cap = main(verb), capsys.readouterr()
        assert rc == 0, cap.err
        assert counted == {"resolve": 1, "ssh": 1}, verb
    assert _json(cap.out)[0]["left"] == []  # the stop's report
