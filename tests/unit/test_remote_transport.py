"""Transports: local read_from by offset (truncation), put, Result; ssh argv safety."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from glmserve.errors import ConfigError, RemoteCommandError
from glmserve.remote.host_config import HostConfig
from glmserve.remote.transport import LocalTransport, SshTransport, log_read_script, parse_log_read


def test_local_run_result_and_check():
    t = LocalTransport(HostConfig())
    r = t.run("echo out; echo err >&2; exit 3")
    assert (r.rc, r.stdout, r.stderr, r.ok) == (3, "out\n", "err\n", False)
    with pytest.raises(RemoteCommandError, match=r"exit 3.*err"):
        t.run("echo err >&2; exit 3", check=True)


@pytest.mark.parametrize("kind", ["local", "shell"])
def test_read_from_offsets_and_truncation(tmp_path, kind):
    t = LocalTransport(HostConfig())
    f = tmp_path / "a b.log"
    if kind == "local":
        read = t.read_from
    else:  # the shell script ssh hosts run, executed locally

        def read(path, off, limit=1 << 20):  # type: ignore[no-untyped-def]
            rc, out, _e, _d = t.run_bytes(log_read_script(path, off, limit))
            assert rc == 0
            return parse_log_read(out, off, "x")

    assert read(str(f), 7) == (b"", 7)  # missing file: nothing, same offset
    t.put(str(f), b"one\ntwo\n")
    assert read(str(f), 0) == (b"one\ntwo\n", 8)
    assert read(str(f), 4) == (b"two\n", 8)
    assert read(str(f), 8) == (b"", 8)
    assert read(str(f), 0, 3) == (b"one", 3)
    f.write_bytes(b"new\n")  # truncated below the offset: start over
    assert read(str(f), 8) == (b"new\n", 4)


def test_ssh_options_are_safe(tmp_path):
    h = HostConfig(name="g", target="root@h", port=2222, jump="bastion", identity_file="~/k")
    argv = SshTransport(h).ssh_base()
    opts = dict(a.split("=", 1) for a in argv[2::2])
    assert opts["BatchMode"] == "yes" and opts["ProxyJump"] == "bastion"
    assert opts["Port"] == "2222" and opts["IdentitiesOnly"] == "yes"
    assert "StrictHostKeyChecking" not in opts
    assert len(opts["ControlPath"]) <= 100
    with pytest.raises(ValidationError, match="known_hosts"):
        HostConfig(name="g", target="h", ssh_options={"StrictHostKeyChecking": "no"})
    # A HostConfig built without validation is checked again before ssh sees it.
    built = HostConfig.model_construct(name="g", target="h", ssh_options={"ProxyCommand": "id"})
    built.connect_timeout, built.port, built.identity_file, built.jump = 10, None, None, None
    built.ssh_config = None
    with pytest.raises(ConfigError, match="runs a local command"):
        SshTransport(built).ssh_base()
