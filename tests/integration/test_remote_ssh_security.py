"""A hosts file must not make ssh run or load anything locally, nor connect past a wrong host key.

Every case drives the real ``glmserve`` CLI against the real sshd fixture. A hostile program
would create a marker file; each test asserts the marker does not exist afterwards (the
program never ran) and that glmserve refused with exit 2 naming the key. Host-key cases use a
second sshd (the "impostor", its own host key) whose ``authorized_keys`` forces a command that
creates a marker: if that marker exists, a session was opened on a host whose key did not match.

The trust model under test (README "Hosts"): ``ssh_options`` is an allow-list in every hosts
file; ``ssh_config`` is honoured only from the user's own hosts.yaml (a relative path is
relative to the user's config dir) or the ``--ssh-config`` flag, never from a ``configs/``
folder found in the current directory (a checked-out repo).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.fixtures.cli import GLMSERVE
from tests.fixtures.sshd import SshdServer, start_sshd

from glmserve.remote.transport import free_local_port

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def glmserve(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, from ``cwd`` (a repo checkout, for the cwd cases)."""
    return subprocess.run(
        [*GLMSERVE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


_USED: list[tuple[str, Path | None, dict[str, str], tuple[str, ...]]] = []


def check(host: str, *, cwd: Path | None = None, env: dict[str, str] | None = None, pre=()):  # type: ignore[no-untyped-def]
    """``glmserve check`` over ssh: connects, runs commands, opens a forward."""
    _USED.append((host, cwd, env or {}, tuple(pre)))
    # A free port: the profile's own (8000) may be held by anything else on this machine,
    # and check would then block on it, which is not what these tests are about.
    port = f"server.port={free_local_port()}"
    return glmserve(
        *pre,
        "check",
        "--profile",
        "trtllm_mla",
        "--host",
        host,
        "--simulate",
        "--set",
        port,
        cwd=cwd,
        env=env,
    )


@pytest.fixture(autouse=True)
def _close_masters(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close the ssh master each ``check`` left (ControlPersist) once the test is done, found
    exactly as glmserve finds it (same env, cwd and --ssh-config), never by name."""
    from glmserve.errors import GlmserveError
    from glmserve.remote import hosts
    from glmserve.remote.transport import SshTransport

    _USED.clear()
    yield
    for host, cwd, env, pre in _USED:
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            if cwd is not None:
                m.chdir(cwd)
            if pre:
                m.setattr(hosts, "CLI_SSH_CONFIG", Path(pre[1]))
            with contextlib.suppress(GlmserveError):  # refused: no master was started
                SshTransport(hosts.get_host(host)).disconnect()


def user_hosts(text: str) -> Path:
    d = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    d.mkdir(parents=True, exist_ok=True)
    (d / "hosts.yaml").write_text(text)
    return d / "hosts.yaml"


def yaml_map(options: dict[str, str]) -> str:
    """A YAML flow mapping with every value single-quoted (values hold ``$``, ``;``, ``'``)."""
    quoted = ", ".join(f"{k}: '{v.replace(chr(39), chr(39) * 2)}'" for k, v in options.items())
    return "{" + quoted + "}"


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """The file a hostile program would create (no spaces: it must survive ssh's parsing)."""
    return tmp_path / "ran"


@pytest.fixture
def evil(tmp_path: Path, marker: Path) -> Path:
    """An executable that records that it ran."""
    prog = tmp_path / "evil.sh"
    prog.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\n')
    prog.chmod(0o755)
    return prog


def _assert_refused(res: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


# -- ssh_options: an allow-list ----------------------------------------------------------------
def _escapes(evil: Path, marker: Path) -> dict[str, dict[str, str]]:
    touch = f"touch {marker}"
    return {
        "XAuthLocation": {"XAuthLocation": str(evil), "ForwardX11": "yes"},
        "LocalCommand": {"PermitLocalCommand": "yes", "LocalCommand": touch},
        "ProxyCommand": {"ProxyCommand": touch},
        # ssh builds "ssh -W ... <jump host>" and hands it to sh -c: a jump "host" is a command.
        "ProxyJump": {"ProxyJump": f"x;touch${{IFS}}{marker}"},
        "KnownHostsCommand": {"KnownHostsCommand": str(evil)},
        "RemoteCommand": {"RemoteCommand": touch},  # the "remote" is this machine
        "Match": {"Match": f'exec "{touch}"'},
        "Include": {"Include": "/etc/passwd"},
        "IdentityAgent": {"IdentityAgent": str(marker)},
        "SecurityKeyProvider": {"SecurityKeyProvider": str(evil)},
        "ControlPath": {"ControlPath": str(marker)},
        "ControlMaster": {"ControlMaster": "no"},
        "ControlPersist": {"ControlPersist": "yes"},
        "SendEnv": {"SendEnv": "*"},
        "SetEnv": {"SetEnv": "LD_PRELOAD=/tmp/x.so"},
        "CanonicalizeHostname": {
            "CanonicalizeHostname": "always",
            "CanonicalizePermittedCNAMEs": "*:*",
        },
        "LocalForward": {"LocalForward": "127.0.0.1:1 127.0.0.1:22"},
        "ForwardAgent": {"ForwardAgent": "yes"},
    }


ESCAPES = sorted(_escapes(Path("e"), Path("m")))


@pytest.mark.parametrize("case", ESCAPES)
def test_ssh_option_outside_the_allow_list_is_refused_and_nothing_runs(
    sshd_server: SshdServer, evil: Path, marker: Path, case: str
) -> None:
    options = _escapes(evil, marker)[case]
    path = user_hosts(sshd_server.hosts_yaml("h", ssh_options=yaml_map(options)))
    res = check("h", env={"DISPLAY": ":0"})
    assert not marker.exists(), marker.read_text()
    _assert_refused(res, f"{path}:", "hosts.h.ssh_options")


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build the library")
def test_pkcs11_provider_library_is_never_loaded(
    sshd_server: SshdServer, tmp_path: Path, marker: Path
) -> None:
    """A shared library whose constructor creates the marker: loading it is running it."""
    src = tmp_path / "evil.c"
    src.write_text(
        "#include <stdio.h>\n__attribute__((constructor)) static void run(void) {\n"
        f'  FILE *f = fopen("{marker}", "w"); if (f) fclose(f);\n}}\n'
    )
    lib = tmp_path / "evil.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    user_hosts(sshd_server.hosts_yaml("h", ssh_options=yaml_map({"PKCS11Provider": str(lib)})))
    res = check("h")
    assert not marker.exists()
    _assert_refused(res, "hosts.h.ssh_options")


def test_allowed_ssh_options_still_connect(sshd_server: SshdServer) -> None:
    """The allow-list's members reach ssh (numbers and booleans as ssh words) and work."""
    options = "{Compression: true, ServerAliveInterval: 7, TCPKeepAlive: 'yes', IPQoS: throughput}"
    user_hosts(sshd_server.hosts_yaml("h", ssh_options=options))
    res = check("h")
    assert res.returncode == 0, res.stderr


def test_an_option_value_ssh_rejects_is_a_config_error_not_a_connection_error(
    sshd_server: SshdServer,
) -> None:
    """``Ciphers: nope`` passes the value's shape but ssh refuses it: exit 2 naming ssh's line."""
    user_hosts(sshd_server.hosts_yaml("h", ssh_options="{Ciphers: nope}"))
    res = check("h")
    assert res.returncode == 2, res.stderr
    assert "Bad SSH2 cipher spec" in res.stderr


def test_a_bad_line_in_the_users_ssh_config_is_exit_2_naming_it(
    sshd_server: SshdServer, tmp_path: Path
) -> None:
    conf = tmp_path / "ssh_config"
    conf.write_text("NoSuchKeyword yes\n" + sshd_server.ssh_config.read_text())
    user_hosts(sshd_server.hosts_yaml("h").replace(str(sshd_server.ssh_config), str(conf)))
    res = check("h")
    assert res.returncode == 2, res.stderr
    assert f"{conf}: line 1: Bad configuration option" in res.stderr


# -- ssh_config: trusted only from the user's config dir or --ssh-config ------------------------
HOSTILE_SSH_CONFIG = {
    "Match exec": 'Match exec "touch {marker}"\n',
    "ProxyCommand": "Host *\n  ProxyCommand touch {marker}\n",
    "LocalCommand": "Host *\n  PermitLocalCommand yes\n  LocalCommand touch {marker}\n",
    "KnownHostsCommand": "Host *\n  KnownHostsCommand /bin/sh -c 'touch {marker}'\n",
    "Include": "Include {include}\n",
}


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repo checkout: ``configs/profiles`` (so glmserve reads ``./configs``, which
    $GLMSERVE_CONFIGS would take precedence over: unset here)."""
    monkeypatch.delenv("GLMSERVE_CONFIGS", raising=False)
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "configs" / "profiles", repo / "configs" / "profiles")
    return repo


def _hostile_config(sshd: SshdServer, kind: str, marker: Path, where: Path) -> str:
    include = where / "included"
    include.write_text(f"Host *\n  ProxyCommand touch {marker}\n")
    hostile = HOSTILE_SSH_CONFIG[kind].format(marker=marker, include=include)
    return hostile + sshd.ssh_config.read_text()


@pytest.mark.parametrize("kind", sorted(HOSTILE_SSH_CONFIG))
def test_a_checked_out_repo_cannot_name_an_ssh_config(
    sshd_server: SshdServer, checkout: Path, marker: Path, kind: str
) -> None:
    """``configs/hosts.yaml`` in the cwd naming ``configs/ssh_config``: refused, nothing ran."""
    cfg = checkout / "configs"
    (cfg / "ssh_config").write_text(_hostile_config(sshd_server, kind, marker, cfg))
    text = sshd_server.hosts_yaml("evil").replace(str(sshd_server.ssh_config), "configs/ssh_config")
    (cfg / "hosts.yaml").write_text(text)
    res = check("evil", cwd=checkout)
    assert not marker.exists()
    _assert_refused(res, "configs/hosts.yaml:4: hosts.evil.ssh_config", "--ssh-config")


def test_an_absolute_ssh_config_from_a_repo_is_refused_too(
    sshd_server: SshdServer, checkout: Path, marker: Path
) -> None:
    cfg = checkout / "configs"
    (cfg / "ssh_config").write_text(_hostile_config(sshd_server, "Match exec", marker, cfg))
    text = sshd_server.hosts_yaml("evil").replace(
        str(sshd_server.ssh_config), str(cfg / "ssh_config")
    )
    (cfg / "hosts.yaml").write_text(text)
    res = check("evil", cwd=checkout)
    assert not marker.exists()
    _assert_refused(res, "hosts.evil.ssh_config")


def test_users_relative_ssh_config_is_read_from_the_config_dir_not_the_cwd(
    sshd_server: SshdServer, checkout: Path, marker: Path
) -> None:
    """The user's ``ssh_config: ssh_config`` is ``$GLMSERVE_CONFIG_DIR/ssh_config``; a hostile
    ``ssh_config`` file in the current directory is never read."""
    (checkout / "ssh_config").write_text(
        _hostile_config(sshd_server, "Match exec", marker, checkout)
    )
    path = user_hosts(
        sshd_server.hosts_yaml("h").replace(str(sshd_server.ssh_config), "ssh_config")
    )
    shutil.copy(sshd_server.ssh_config, path.parent / "ssh_config")
    res = check("h", cwd=checkout)
    assert not marker.exists()
    assert res.returncode == 0, res.stderr


def test_ssh_config_flag_reaches_a_repo_host(
    sshd_server: SshdServer, checkout: Path, marker: Path
) -> None:
    """A repo's host (an alias, no ssh_config) reached through ``--ssh-config`` the user gave."""
    text = sshd_server.hosts_yaml("box").replace(f"    ssh_config: {sshd_server.ssh_config}\n", "")
    (checkout / "configs" / "hosts.yaml").write_text(text)
    res = check("box", cwd=checkout, pre=("--ssh-config", str(sshd_server.ssh_config)))
    assert res.returncode == 0, res.stderr


def test_ssh_config_path_is_never_handed_to_a_shell(
    sshd_server: SshdServer, tmp_path: Path
) -> None:
    """With a jump host, ssh runs ``ssh -F <config> -W ...`` through ``sh -c``: a config path
    holding ``$(...)`` would be a command. Such a path is refused, from the flag or a file."""
    d = tmp_path / "cfgdir"
    d.mkdir()
    name = "c$(touch${IFS}pwned)"
    shutil.copy(sshd_server.ssh_config, d / name)
    user_hosts(
        sshd_server.hosts_yaml("h", jump=sshd_server.alias).replace(
            str(sshd_server.ssh_config), f"'{d / name}'"
        )
    )
    res = check("h", cwd=tmp_path)
    assert not (tmp_path / "pwned").exists()
    _assert_refused(res, "hosts.h.ssh_config")
    user_hosts(sshd_server.hosts_yaml("h2", jump=sshd_server.alias))
    res = check("h2", cwd=tmp_path, pre=("--ssh-config", str(d / name)))
    assert not (tmp_path / "pwned").exists()
    _assert_refused(res, "--ssh-config")


# -- host keys ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def impostor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdServer]:
    """A second sshd with its own host key; any session on it creates ``<dir>/connected``."""
    server = start_sshd(Path(tmp_path_factory.mktemp("impostor")))
    key = (server.dir / "authorized_keys").read_text()
    (server.dir / "authorized_keys").write_text(f'command="touch {server.dir}/connected" {key}')
    yield server
    server.stop()


HOST_KEY_BYPASSES = {
    "false": {"StrictHostKeyChecking": "false"},
    "FALSE": {"StrictHostKeyChecking": "FALSE"},
    "Off": {"StrictHostKeyChecking": "Off"},
    "no": {"StrictHostKeyChecking": "no"},
    "accept-new+devnull": {
        "UserKnownHostsFile": "/dev/null",
        "StrictHostKeyChecking": "accept-new",
    },
    "accept-new": {"StrictHostKeyChecking": "accept-new"},
    "localhost": {"NoHostAuthenticationForLocalhost": "yes"},
    "other-known-hosts": {"UserKnownHostsFile": "{trusting}"},
    "GlobalKnownHostsFile": {"GlobalKnownHostsFile": "{trusting}"},
    "HostKeyAlias": {"HostKeyAlias": "trusted-alias"},
    "KnownHostsCommand": {"KnownHostsCommand": "/bin/cat {trusting}"},
}


@pytest.mark.parametrize("case", sorted(HOST_KEY_BYPASSES))
def test_host_key_checking_cannot_be_weakened(
    impostor: SshdServer, sshd_server: SshdServer, tmp_path: Path, case: str
) -> None:
    """known_hosts holds the *real* server's key for the impostor's address: every option that
    would let ssh go on anyway is refused with its reason, and no session is ever opened."""
    connected = impostor.dir / "connected"
    connected.unlink(missing_ok=True)
    real_key = sshd_server.known_hosts.read_text().split()[1:3]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{impostor.port} {' '.join(real_key)}\n")
    trusting = tmp_path / "trusting"  # a known_hosts that vouches for the impostor
    impostor_key = impostor.known_hosts.read_text().split()[1:3]
    trusting.write_text(
        f"[127.0.0.1]:{impostor.port} {' '.join(impostor_key)}\n"
        f"trusted-alias {' '.join(impostor_key)}\n"
    )
    conf = tmp_path / "ssh_config"
    conf.write_text(impostor.ssh_config.read_text().replace(str(impostor.known_hosts), str(known)))
    options = {k: v.format(trusting=trusting) for k, v in HOST_KEY_BYPASSES[case].items()}
    text = impostor.hosts_yaml("spoof", ssh_options=yaml_map(options))
    user_hosts(text.replace(str(impostor.ssh_config), str(conf)))
    res = check("spoof")
    assert not connected.exists(), "a session was opened on a host with the wrong key"
    _assert_refused(res, "hosts.spoof.ssh_options")
    assert "host key" in res.stderr.lower()
    assert known.read_text().count("\n") == 1  # nothing was added


def test_wrong_host_key_without_options_is_exit_5(
    impostor: SshdServer, sshd_server: SshdServer, tmp_path: Path
) -> None:
    connected = impostor.dir / "connected"
    connected.unlink(missing_ok=True)
    real_key = sshd_server.known_hosts.read_text().split()[1:3]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{impostor.port} {' '.join(real_key)}\n")
    conf = tmp_path / "ssh_config"
    conf.write_text(impostor.ssh_config.read_text().replace(str(impostor.known_hosts), str(known)))
    user_hosts(impostor.hosts_yaml("spoof").replace(str(impostor.ssh_config), str(conf)))
    res = check("spoof")
    assert res.returncode == 5, res.stderr
    assert "Host key verification failed" in res.stderr
    assert not connected.exists()


# -- control path: safe for any GLMSERVE_HOME --------------------------------------------------
@pytest.mark.parametrize("home", ["my home", "pct%h%d", "q'uote\"s", "x" * 150])
def test_any_glmserve_home_reaches_an_ssh_host(
    sshd_server: SshdServer, tmp_path: Path, home: str
) -> None:
    """A space, ``%`` tokens, quotes or a long path in GLMSERVE_HOME: the control socket still
    works (a short hashed path ssh neither tokenizes nor expands)."""
    user_hosts(sshd_server.hosts_yaml("h"))
    env = {"GLMSERVE_HOME": str(tmp_path / home)}
    res = check("h", env=env)
    assert res.returncode == 0, res.stderr


# -- one broken host entry blocks only that host -----------------------------------------------
def test_a_typo_in_another_host_entry_does_not_block_stop_or_status_of_a_local_run(
    tmp_path: Path,
) -> None:
    from glmserve.remote.transport import free_local_port

    port = free_local_port()
    res = glmserve(
        "launch",
        "--profile",
        "trtllm_mla",
        "--simulate",
        "--set",
        f"server.port={port}",
        "--set",
        "sim.gpu-arch=sm100",
        "--no-wait",
    )
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.split()[0]
    try:
        path = user_hosts("hosts:\n  gpu9:\n    targte: root@10.0.0.9\n")
        status = glmserve("status", "--json")
        assert status.returncode == 0, status.stderr
        assert run_id in status.stdout
        used = check("gpu9")
        _assert_refused(used, f"{path}:3: hosts.gpu9.targte")
    finally:
        stop = glmserve("stop", run_id)
        if stop.returncode != 0:  # the old behaviour: stop the run without the hosts file
            Path(os.environ["GLMSERVE_CONFIG_DIR"], "hosts.yaml").unlink()
            glmserve("stop", run_id)
    assert stop.returncode == 0, stop.stderr


# -- values no program can receive -------------------------------------------------------------
def test_a_command_longer_than_one_argv_string_runs_over_ssh(ssh_host: str) -> None:
    """The remote command is one argv string locally and on the host's sshd (128 KiB at most):
    a longer one goes over stdin, ahead of the command's own input."""
    from glmserve.remote.hosts import get_host
    from glmserve.remote.transport import SshTransport

    t = SshTransport(get_host(ssh_host))
    res = t.run(f"printf %s {'x' * 300_000} | wc -c; cat", stdin=b"input\n")
    assert res.ok, res.stderr
    assert res.stdout.split("\n", 1) == ["300000", "input\n"]


def test_a_nul_byte_never_reaches_the_host(ssh_host: str) -> None:
    """It used to be accepted, stored as "a\\u0000b" and reach the server as "ab"."""
    res = glmserve(
        "check",
        "--profile",
        "trtllm_mla",
        "--host",
        ssh_host,
        "--simulate",
        "--set",
        'server.served-model-name="a\\0b"',
    )
    _assert_refused(res, "--set server.served-model-name:1: a NUL byte")
