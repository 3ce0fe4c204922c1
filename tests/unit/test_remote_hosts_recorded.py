"""A host is resolved once per command and a run keeps the entry it was launched with (issue 21,
item 2): later verbs act on the recorded entry and say so when today's hosts.yaml differs.

Before: ``plan`` resolved ``--host``, then ``launch_run`` read hosts.yaml again by name (an edit
in between launched somewhere else than planned), each step built its own transport, and
``stop``/``status`` re-resolved a stored run through today's hosts.yaml (a changed port or a
removed entry lost the run; a project file edited since could redirect it).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from glmserve.cli import main
from glmserve.deploy.deployment import Deployment, status_rows
from glmserve.deploy.plan import plan
from glmserve.remote import hosts as hosts_mod
from glmserve.remote import launch as launch_mod
from glmserve.remote import run_host as run_host_mod
from glmserve.remote import transport as transport_mod
from glmserve.remote.hosts import get_host, recorded_host
from glmserve.store import RunRecord, RunStore


def _user_hosts(text: str) -> Path:
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    path = cfg / "hosts.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often an entry is resolved (validated into a HostConfig) and a transport built."""
    n = {"resolve": 0, "ssh": 0, "local": 0}
    build, ssh_init, local_init = (
        hosts_mod._build,
        transport_mod.SshTransport.__init__,
        transport_mod.LocalTransport.__init__,
    )

    def counted_build(e: Any) -> Any:
        n["resolve"] += 1
        return build(e)

    def counted_ssh(self: Any, host: Any) -> None:
        n["ssh"] += 1
        ssh_init(self, host)

    def counted_local(self: Any, host: Any) -> None:
        n["local"] += 1
        local_init(self, host)

    monkeypatch.setattr(hosts_mod, "_build", counted_build)
    monkeypatch.setattr(transport_mod.SshTransport, "__init__", counted_ssh)
    monkeypatch.setattr(transport_mod.LocalTransport, "__init__", counted_local)
    return n


# -- recorded_host (pure over the files) -----------------------------------------------------
def test_unchanged_entry_is_used_without_a_note():
    _user_hosts("hosts:\n  box:\n    target: me@10.0.0.5\n    port: 2222\n")
    rec = get_host("box").model_dump(mode="json")
    host, note = recorded_host("box", rec, "aaaa0001")
    assert (host.target, host.port, note) == ("me@10.0.0.5", 2222, None)


def test_changed_port_acts_on_the_recorded_entry_and_names_the_field():
    path = _user_hosts("hosts:\n  box:\n    target: me@10.0.0.5\n    port: 2222\n")
    rec = get_host("box").model_dump(mode="json")
    path.write_text("hosts:\n  box:\n    target: me@10.0.0.5\n    port: 2299\n")
    host, note = recorded_host("box", rec, "aaaa0001")
    assert host.port == 2222
    assert note is not None and "\n" not in note
    assert "hosts.yaml changed since run aaaa0001 was launched (port)" in note


def test_removed_entry_acts_on_the_recorded_entry_and_says_so():
    path = _user_hosts("hosts:\n  box:\n    target: me@10.0.0.5\n")
    rec = get_host("box").model_dump(mode="json")
    path.write_text("hosts: {}\n")
    host, note = recorded_host("box", rec, "aaaa0001")
    assert host.target == "me@10.0.0.5"
    assert note is not None and "no usable hosts.yaml entry now" in note
    assert "unknown host 'box'" in note


def test_run_recorded_before_the_migration_uses_todays_entry_and_says_so():
    _user_hosts("hosts:\n  box:\n    target: me@10.0.0.9\n")
    host, note = recorded_host("box", None, "aaaa0001")
    assert host.target == "me@10.0.0.9"
    assert note is not None and "recorded before glmserve kept each run's host entry" in note


def test_old_local_run_without_an_entry_needs_no_note():
    """The built-in ``local`` is code, not a file: nothing can have differed."""
    host, note = recorded_host("local", None, "aaaa0001")
    assert host.is_local and note is None


def test_editing_the_project_file_cannot_swap_a_recorded_entry(tmp_path, monkeypatch):
    """A run launched on a project-file host keeps its target; a later edit of the (untrusted)
    project file only earns a warning, and the ssh config it now names is never used."""
    configs = tmp_path / "repo" / "configs"
    configs.mkdir(parents=True)
    monkeypatch.setenv("GLMSERVE_CONFIGS", str(configs))
    (configs / "hosts.yaml").write_text("hosts:\n  gpu:\n    target: me@10.0.0.5\n")
    rec = get_host("gpu").model_dump(mode="json")
    (configs / "hosts.yaml").write_text(
        "hosts:\n  gpu:\n    target: attacker@10.6.6.6\n    jump: evil.example\n"
    )
    host, note = recorded_host("gpu", rec, "aaaa0001")
    assert (host.target, host.jump) == ("me@10.0.0.5", None)
    assert note is not None and "(target, jump)" in note
    run = RunRecord("aaaa0001", "gpu", "p", 30000, "/x", host_config=rec)
    t = run_host_mod.transport_for_run(run)
    assert t.host.target == "me@10.0.0.5"
    assert "ProxyJump=evil.example" not in " ".join(t.ssh_base())  # type: ignore[attr-defined]


def test_run_host_warns_once_on_stderr(capsys):
    path = _user_hosts("hosts:\n  box:\n    target: me@10.0.0.5\n")
    rec = get_host("box").model_dump(mode="json")
    path.write_text("hosts:\n  box:\n    target: me@10.0.0.7\n")
    run = RunRecord("aaaa0042", "box", "p", 30000, "/x", host_config=rec)
    for _ in range(3):
        assert run_host_mod.run_host(run).target == "me@10.0.0.5"
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("warning: host box: hosts.yaml changed"), err


# -- the store keeps the entry ---------------------------------------------------------------
def test_new_run_record_keeps_the_entry_it_was_launched_with():
    _user_hosts("hosts:\n  box:\n    target: me@10.0.0.5\n    port: 2222\n")
    from glmserve.config import profiles

    host = get_host("box")
    spec = profiles.load_profile("trtllm_mla", [])
    rec, meta_json = launch_mod.new_run_record("aaaa0001", host, spec, "/w", None)
    store = RunStore.open()
    store.add_run(rec)
    back = store.get_run("aaaa0001").host_config
    assert back is not None and (back["target"], back["port"]) == ("me@10.0.0.5", 2222)
    assert "host_config" not in meta_json  # the host's meta.json carries no local paths


# -- one resolution, one transport per node per command --------------------------------------
def test_a_plan_resolves_each_node_of_a_group_once(counts):
    _user_hosts(
        "hosts:\n  na:\n    target: me@10.0.0.1\n    address: 10.0.0.1\n"
        "  nb:\n    target: me@10.0.0.2\n    address: 10.0.0.2\n"
    )
    p = plan("trtllm_mla", nodes=["na", "nb"], simulate=True)
    assert p.names == ["na", "nb"]
    assert counts["resolve"] == 2  # before: node 0 twice (plan, then plan_spec)


def test_a_sweep_of_two_profiles_on_one_host_resolves_it_once(counts):
    from glmserve.sweep.backend import LifecycleBackend, check_plans
    from glmserve.sweep.state import SweepOptions

    _user_hosts("hosts:\n  box:\n    target: me@10.0.0.5\n")
    opts = SweepOptions()
    check_plans(["trtllm_mla", "flashinfer"], "box", [], opts, False)
    backend = LifecycleBackend("box", False)
    plans = [backend.prepare(name, opts) for name in ("trtllm_mla", "flashinfer")]
    assert plans[0].nodes[0].host is plans[1].nodes[0].host is backend.host
    assert counts["resolve"] == 1  # before: 6 (check_plans 3, the backend 1, each prepare 1)


def _fake_launch_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything of a launch that would touch the host, answered here."""
    from glmserve.deploy import preflight

    started = launch_mod.Started(pid=4242, pgid=4242, start=1, boot_id="b")
    monkeypatch.setattr(preflight, "port_for_host", lambda spec, t, say=None: spec)
    monkeypatch.setattr(launch_mod, "find_alive_runs", lambda *a: [])
    monkeypatch.setattr(launch_mod, "port_in_use", lambda *a: False)
    monkeypatch.setattr(launch_mod, "resolve_remote_dir", lambda t, path: path)
    monkeypatch.setattr(launch_mod, "_upload", lambda *a: None)
    monkeypatch.setattr(launch_mod, "start_script", lambda t, d: started)


def test_launch_uses_the_planned_host_even_if_hosts_yaml_changes_meanwhile(counts, monkeypatch):
    """The plan's HostConfig goes to the launch: an edit of hosts.yaml between planning and
    starting does not send the run elsewhere (before: launch_run read the file again)."""
    _fake_launch_steps(monkeypatch)
    path = _user_hosts("hosts:\n  box:\n    target: me@10.0.0.5\n    workdir: /srv/planned\n")
    p = plan("flashinfer", host="box")
    path.write_text("hosts:\n  box:\n    target: me@10.0.0.6\n    workdir: /srv/edited\n")
    dep = Deployment.launch(p, store=RunStore.open())
    run = dep.runs[0]
    assert run.run_dir.startswith("/srv/planned/runs/")
    assert counts["resolve"] == 1  # the plan's: the launch read hosts.yaml no more
    assert counts["ssh"] == 1  # one transport for the node, this whole command
    assert dep.transport(run).host.target == "me@10.0.0.5"


def test_host_adjusted_spec_runs_once_per_launch(monkeypatch):
    _fake_launch_steps(monkeypatch)
    _user_hosts("hosts:\n  box:\n    target: me@10.0.0.5\n    venv: /opt/venv\n")
    calls: list[str] = []
    real = launch_mod.host_adjusted_spec

    def spy(spec: Any, host: Any) -> Any:
        calls.append(host.name)
        return real(spec, host)

    monkeypatch.setattr(launch_mod, "host_adjusted_spec", spy)
    dep = Deployment.launch(plan("flashinfer", host="box"), store=RunStore.open())
    assert calls == ["box"]  # before: 3 (plan, Deployment.launch, launch_run)
    assert dep.runs[0].spec["venv"] == "/opt/venv"


# -- later verbs: status --json carries the note ---------------------------------------------
def _recorded_local_run(tmp_path: Path, workdir: str) -> tuple[Path, RunRecord]:
    path = _user_hosts(f"hosts:\n  la:\n    workdir: {workdir}\n")
    d = tmp_path / "run0"
    d.mkdir()
    (d / "server.log").write_text("")
    rec = RunRecord(
        "c0ffee01", "la", "p", 30000, str(d), created_at=time.time(),
        host_config=get_host("la").model_dump(mode="json"),
    )  # fmt: skip
    RunStore.open().add_run(rec)
    return path, rec


def test_status_json_carries_the_note_and_checks_the_recorded_host(tmp_path, capsys):
    path, _rec = _recorded_local_run(tmp_path, "/tmp/wa")
    path.write_text("hosts:\n  la:\n    workdir: /tmp/wb\n")
    assert main(["status", "c0ffee01", "--json"]) == 0
    cap = capsys.readouterr()
    rows = json.loads(cap.out)
    assert "hosts.yaml changed since run c0ffee01 was launched (workdir)" in rows[0]["host_note"]
    assert [ln for ln in cap.err.splitlines() if "c0ffee01" in ln] == [
        f"warning: {rows[0]['host_note']}"
    ]


def test_status_rows_have_no_note_when_nothing_changed(tmp_path):
    _recorded_local_run(tmp_path, "/tmp/wa")
    rows = status_rows(RunStore.open(), "c0ffee01", False)
    assert "host_note" not in rows[0]
