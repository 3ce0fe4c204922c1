"""Hosts files: merge order, built-in local, errors with file:line and key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from glmserve.errors import ConfigError
from glmserve.remote.hosts import get_host, load_hosts


def _user_file(text: str) -> Path:
    d = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    d.mkdir(parents=True, exist_ok=True)
    (d / "hosts.yaml").write_text(text)
    return d / "hosts.yaml"


def test_local_is_builtin_default():
    h = get_host(None)
    assert h.name == "local" and h.is_local
    assert h.resolved_workdir.endswith("/local")


def test_user_host_fields_and_remote_default_workdir():
    _user_file("hosts:\n  gpu8:\n    target: root@10.0.0.1\n    port: 2222\n    jump: bastion\n")
    h = get_host("gpu8")
    assert (h.target, h.port, h.jump) == ("root@10.0.0.1", 2222, "bastion")
    assert h.resolved_workdir == "~/glmserve"
    assert "local" in load_hosts()


def test_unknown_host_lists_known():
    _user_file("hosts:\n  gpu8:\n    target: a@b\n")
    with pytest.raises(ConfigError, match=r"unknown host 'nope'; known hosts: gpu8, local"):
        get_host("nope")


def test_bad_field_names_file_line_and_key():
    f = _user_file("hosts:\n  gpu8:\n    target: a@b\n    port: notanumber\n")
    with pytest.raises(ConfigError, match=rf"{f}:4: hosts\.gpu8\.port"):
        get_host("gpu8")


def test_unknown_field_and_bad_yaml():
    f = _user_file("hosts:\n  gpu8:\n    targte: a@b\n")
    with pytest.raises(ConfigError, match=rf"{f}:3: hosts\.gpu8\.targte"):
        load_hosts()
    f = _user_file("hosts:\n  gpu8: [\n")
    with pytest.raises(ConfigError, match=rf"{f}:\d+: invalid YAML"):
        load_hosts()


def test_target_with_shell_metacharacters_refused():
    _user_file("hosts:\n  x:\n    target: '-oProxyCommand=sh'\n")
    with pytest.raises(ConfigError, match="not a valid ssh target"):
        load_hosts()


def test_host_python_and_venv_beat_profile_defaults_but_not_the_simulator():
    from glmserve.config.spec import LaunchSpec
    from glmserve.remote.launch import host_adjusted_spec

    _user_file("hosts:\n  gpu8:\n    target: a@b\n    venv: /opt/sgl\n    python: python3.12\n")
    h = get_host("gpu8")
    spec = LaunchSpec(profile="p", argv=[], venv="/root/sglang-venv")
    got = host_adjusted_spec(spec, h)
    assert (got.venv, got.python) == ("/opt/sgl", "python3.12")
    sim = LaunchSpec(profile="p", argv=[], launcher="simulator", python="/usr/bin/python3")
    assert host_adjusted_spec(sim, h) == sim
    plain = _user_file("hosts:\n  gpu8:\n    target: a@b\n")
    assert plain.exists()
    assert host_adjusted_spec(spec, get_host("gpu8")) == spec
