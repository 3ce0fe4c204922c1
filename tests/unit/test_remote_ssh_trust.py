"""Config values no program can receive, ssh control paths for any GLMSERVE_HOME, commands
longer than one argv string, and per-host loading of hosts files (issue 11 #7, #11, #12).

The ssh escapes themselves run against a real sshd in tests/integration/test_ssh_security.py.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from glmserve.cli import main
from glmserve.errors import ConfigError
from glmserve.remote.host_config import HostConfig
from glmserve.remote.hosts import get_host
from glmserve.remote.transport import MAX_CONTROL_PATH, LocalTransport, SshTransport


def _hosts_file(text: str) -> Path:
    d = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    d.mkdir(parents=True, exist_ok=True)
    (d / "hosts.yaml").write_text(text)
    return d / "hosts.yaml"


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """(exit status, stderr) of one in-process CLI call; never a traceback."""
    rc = main(list(args))
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err
    return int(rc or 0), err


# -- #11: NUL bytes ----------------------------------------------------------------------------
def test_nul_in_a_profile_value_is_refused_at_load_naming_file_line_and_key(capsys, tmp_path):
    """bash drops NUL from a script, so "a\\0b" would reach the server as "ab"."""
    prof = tmp_path / "nul.yaml"
    prof.write_text('extends: trtllm_mla\nenv:\n  TAG: "a\\0b"\nserver:\n  served-model-name: x\n')
    code, err = _cli(capsys, "render", "--profile", str(prof))
    assert code == 2
    assert f"error: {prof}:3: env.TAG: a NUL byte" in err


def test_nul_in_a_set_value_is_refused_naming_the_key(capsys):
    code, err = _cli(capsys, "render", "--profile", "trtllm_mla", "--set", 'server.model="a\\0b"')
    assert code == 2
    assert "error: --set server.model:1: a NUL byte" in err


def test_nul_in_a_key_or_a_list_item_is_refused_naming_where(capsys, tmp_path):
    prof = tmp_path / "nul.yaml"
    prof.write_text('extends: trtllm_mla\nserver:\n  cuda-graph-bs: [1, "2\\0"]\n')
    code, err = _cli(capsys, "render", "--profile", str(prof))
    assert code == 2 and "server.cuda-graph-bs[1]: a NUL byte" in err
    _hosts_file('hosts:\n  h:\n    target: box\n    ssh_options: {"Compr\\0ession": "yes"}\n')
    code, err = _cli(capsys, "check", "--profile", "trtllm_mla", "--host", "h")
    assert code == 2 and "hosts.yaml:4: hosts.h.ssh_options.Compr" in err
    assert "ession: a NUL byte" in err


# -- #12: oversize values ----------------------------------------------------------------------
@pytest.mark.parametrize("field", ["workdir", "venv", "python"])
@pytest.mark.parametrize(
    "size, message", [(100_000, "value is 100005 characters long"), (5000, "is 5005 characters")]
)
def test_a_path_longer_than_path_max_is_refused_at_load(capsys, field, size, message):
    """It used to reach ``bash -c`` and die with "Argument list too long" (exit 70)."""
    path = _hosts_file(f"hosts:\n  big:\n    {field}: /tmp/{'a' * size}\n")
    code, err = _cli(capsys, "launch", "--profile", "trtllm_mla", "--host", "big", "--simulate")
    assert code == 2
    assert f"error: {path}:3: hosts.big.{field}: {message}" in err


def test_an_oversize_profile_value_is_refused_naming_the_key(capsys):
    code, err = _cli(
        capsys, "render", "--profile", "trtllm_mla", "--set", "server.model=" + "m" * 100_000
    )
    assert code == 2
    assert "error: --set server.model:1: value is 100000 characters long; the limit is" in err


def test_a_command_longer_than_one_argv_string_runs():
    """Over 128 KiB the kernel refuses ``bash -c CMD`` (E2BIG); the command goes over stdin,
    ahead of the command's own input, which still reaches it intact."""
    t = LocalTransport(HostConfig())
    long_word = "x" * 300_000
    res = t.run(f"printf %s {long_word} | wc -c; cat", stdin=b"and the input\n")
    assert res.ok, res.stderr
    assert res.stdout.split("\n", 1) == ["300000", "and the input\n"]
    rc, _out, err, _ = t.run_bytes(f"echo {'y' * 200_000} > /dev/null; exit 7")
    assert rc == 7, err  # the command's own status, as with a short command


# -- #12: ssh option values ssh would reject ---------------------------------------------------
@pytest.mark.parametrize(
    "options, fragment",
    [
        ("{ServerAliveInterval: soon}", "not a value ssh takes"),
        ("{Compression: maybe}", "not a value ssh takes"),
        ("{AddressFamily: ipx}", "not a value ssh takes"),
        ("{Ciphers: 'aes128-ctr aes256-ctr'}", "not a value ssh takes"),
        ("{XAuthLocation: /usr/bin/xauth}", "runs a local command"),
        ("{StrictHostKeyChecking: 'false'}", "known_hosts"),
        ("{UserKnownHostsFile: /dev/null}", "known_hosts"),
        ("{SendEnv: '*'}", "not an ssh option a hosts file may set"),
    ],
)
def test_ssh_option_is_checked_at_load_with_exit_2(capsys, options, fragment):
    path = _hosts_file(f"hosts:\n  h:\n    target: box\n    ssh_options: {options}\n")
    code, err = _cli(capsys, "check", "--profile", "trtllm_mla", "--host", "h")
    assert code == 2
    assert err.startswith(f"error: {path}:4: hosts.h.ssh_options: ") and fragment in err, err


def test_allowed_options_keep_ssh_spelling_whatever_the_case():
    _hosts_file(
        "hosts:\n  h:\n    target: box\n"
        "    ssh_options: {compression: 'yes', serveraliveinterval: 30,\n"
        "                  stricthostkeychecking: 'yes'}\n"
    )
    assert get_host("h").ssh_options == {
        "Compression": "yes",
        "ServerAliveInterval": "30",
        "StrictHostKeyChecking": "yes",
    }


# -- #12: one broken entry does not block the others -------------------------------------------
def test_a_typo_in_one_host_entry_blocks_only_that_host():
    path = _hosts_file(
        "hosts:\n  good:\n    target: box\n  broken:\n    targte: box\n"
        "  'bad name':\n    target: x\n"
    )
    assert get_host("good").target == "box"
    assert get_host(None).is_local and get_host("local").is_local
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:5: hosts\.broken\.targte"):
        get_host("broken")
    with pytest.raises(ConfigError, match=r"host name 'bad name' must be"):
        get_host("nosuch")  # the bad name may be the one meant: say what is wrong with it


def test_ssh_config_flag_must_be_a_plain_existing_file(capsys, tmp_path):
    code, err = _cli(capsys, "--ssh-config", str(tmp_path / "none"), "profiles")
    assert code == 2 and "error: --ssh-config: " in err and "is not a file" in err
    odd = tmp_path / "a b"
    odd.write_text("")
    code, err = _cli(capsys, "--ssh-config", str(odd), "profiles")
    assert code == 2 and "error: --ssh-config: ssh cannot safely take this path" in err


# -- #7: control paths -------------------------------------------------------------------------
@pytest.mark.parametrize("home", ["my home", "pct%h%d~", "q'uote\"s\\", "#hash", "x" * 200])
def test_control_path_is_short_plain_and_private_for_any_home(monkeypatch, tmp_path, home):
    """ssh splits an -o value at spaces/quotes and expands %-tokens in ControlPath: the path
    must be plain characters, short enough for a unix socket, in a directory only we own."""
    monkeypatch.setenv("GLMSERVE_HOME", str(tmp_path / home))
    path = SshTransport(HostConfig(name="g", target="root@h")).control_path
    assert re.fullmatch(r"/[A-Za-z0-9_./-]+", path), path
    assert len(path) <= MAX_CONTROL_PATH
    st = os.lstat(os.path.dirname(path))
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
    assert stat.S_IMODE(st.st_mode) == 0o700


def test_control_paths_differ_per_connection_and_per_home(monkeypatch, tmp_path):
    def cp(**kw: object) -> str:
        return SshTransport(HostConfig(name="g", target="root@h", **kw)).control_path  # type: ignore[arg-type]

    base = cp()
    assert cp() == base  # stable: every call of one invocation finds the same master
    assert cp(port=2222) != base
    assert cp(identity_file="~/.ssh/other") != base
    assert cp(ssh_options={"Compression": "yes"}) != base
    monkeypatch.setenv("GLMSERVE_HOME", str(tmp_path / "other home"))
    assert cp() != base


def test_a_loose_socket_directory_is_made_private(monkeypatch, short_tmp):
    # a short dir: under a long tmp path (pytest-xdist's popen-gwN) the socket path would pass
    # the 104-byte limit and the socket would rightly go to /tmp instead
    tmp_path = short_tmp
    monkeypatch.setenv("GLMSERVE_HOME", str(tmp_path / "h"))
    d = tmp_path / "h" / "ssh"
    d.mkdir(parents=True)
    d.chmod(0o777)
    path = SshTransport(HostConfig(name="g", target="h")).control_path
    assert Path(path).parent == d
    assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700


def test_a_symlinked_socket_directory_is_not_used(monkeypatch, tmp_path):
    """A link could point at a directory someone else controls: use the next candidate."""
    monkeypatch.setenv("GLMSERVE_HOME", str(tmp_path / "h"))
    (tmp_path / "h").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "h" / "ssh").symlink_to(tmp_path / "elsewhere")
    path = SshTransport(HostConfig(name="g", target="h")).control_path
    assert not path.startswith(str(tmp_path))
    assert Path(path).parent.name == f"glmserve-ssh-{os.getuid()}"
    assert Path(path).parent.parent in (Path(tempfile.gettempdir()), Path("/tmp"))


def test_no_ssh_option_value_is_split_by_ssh_whatever_home_is(monkeypatch, tmp_path):
    """``-o K=V`` is a config line to ssh: a value must not gain spaces from $HOME or
    GLMSERVE_HOME (ssh expands the identity file's ``~`` itself)."""
    monkeypatch.setenv("HOME", str(tmp_path / "my home"))
    monkeypatch.setenv("GLMSERVE_HOME", str(tmp_path / "my home" / "gs"))
    host = HostConfig(name="g", target="h", identity_file="~/.ssh/id_ed25519", jump="b")
    argv = SshTransport(host).ssh_base("yes")
    values = [a for a in argv[1:] if a != "-o"]
    assert all(" " not in v and "'" not in v and '"' not in v for v in values), values
    assert "IdentityFile=~/.ssh/id_ed25519" in values


@pytest.fixture
def short_tmp():
    d = Path(tempfile.mkdtemp(prefix="g", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)
