"""Hostile and careless hosts.yaml input, through the CLI (``check --host``, which reads the
hosts file before anything else).

ssh re-parses some of what it is given: a target starting with '-' is an option
(``-oProxyCommand=...`` runs a command), ``-o K=V`` values are config lines, and ProxyJump
takes a list. So these must be refused with exit 2 and one line naming file:line and key,
before any ssh process is started.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from glmserve.cli import main
from glmserve.remote.hosts import get_host


def _hosts_file(content: str | bytes) -> Path:
    d = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    d.mkdir(parents=True, exist_ok=True)
    p = d / "hosts.yaml"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return p


def run_check(capsys: pytest.CaptureFixture[str], host: str) -> tuple[int, str]:
    rc = main(["check", "--profile", "trtllm_mla", "--host", host])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return int(rc), lines[0]


def _entry(fields: str) -> str:
    return f"hosts:\n  h:\n    target: box\n{fields}"


@pytest.mark.parametrize(
    "content, line, fragment",
    [
        ("hosts:\n  h:\n    target: '-oProxyCommand=touch /tmp/x'\n", 3, "hosts.h.target"),
        ("hosts:\n  h:\n    target: 'a;touch /tmp/x'\n", 3, "not a valid ssh target"),
        ("hosts:\n  h:\n    target: '$(id)@box'\n", 3, "not a valid ssh target"),
        ('hosts:\n  h:\n    target: "box\\nProxyCommand id"\n', 3, "not a valid ssh target"),
        ("hosts:\n  h:\n    target: 'a b'\n", 3, "not a valid ssh target"),
        ("hosts:\n  h:\n    target: ''\n", 3, "not a valid ssh target"),
        ("hosts:\n  h:\n    target: 5\n", 3, "hosts.h.target"),
        (_entry("    port: 70000\n"), 4, "hosts.h.port"),
        (_entry("    port: 0\n"), 4, "hosts.h.port"),
        (_entry("    port: '22'\n"), 4, "hosts.h.port: Input should be a valid integer"),
        (_entry("    port: true\n"), 4, "hosts.h.port: Input should be a valid integer"),
        (_entry("    port: 22.5\n"), 4, "hosts.h.port"),
        (_entry("    port: yes\n"), 4, "boolean"),
        (_entry("    connect_timeout: soon\n"), 4, "hosts.h.connect_timeout"),
        (_entry("    jump: '-oProxyCommand=id'\n"), 4, "not a valid ProxyJump host"),
        (_entry("    jump: 'ok,-J evil'\n"), 4, "not a valid ProxyJump host: '-J evil'"),
        (_entry("    jump: 'a b;c'\n"), 4, "not a valid ProxyJump host"),
        (_entry('    identity_file: "k\\nProxyCommand id"\n'), 4, "printable"),
        (_entry("    identity_file: '-oProxyCommand=id'\n"), 4, "must not start with '-'"),
        (_entry("    identity_file: '/my keys/id'\n"), 4, "no spaces, quotes"),
        (_entry("    ssh_config: '-oProxyCommand=id'\n"), 4, "must not start with '-'"),
        (_entry("    ssh_options: {ProxyCommand: 'sh -c id'}\n"), 4, "runs a local command"),
        (_entry("    ssh_options: {localcommand: id}\n"), 4, "runs a local command"),
        (_entry("    ssh_options: {'A B': c}\n"), 4, "not an ssh option name: 'A B'"),
        (_entry('    ssh_options: {Compression: "a\\nb"}\n'), 4, "printable"),
        (_entry("    ssh_options: {A: [1]}\n"), 4, "hosts.h.ssh_options.A"),
        (_entry("    address: '1.2.3.4;id'\n"), 4, "not a valid address"),
        (_entry("    address: '-oX'\n"), 4, "not a valid address"),
        (_entry('    workdir: "/a\\nb"\n'), 4, "printable"),
        (_entry("    workdir: ''\n"), 4, "must not be empty"),
        (_entry("    bogus: 1\n"), 4, "hosts.h.bogus"),
        ("hosts:\n  'h;b':\n    target: box\n", 2, "host name 'h;b'"),
        ("hosts:\n  '-h':\n    target: box\n", 2, "host name '-h'"),
        ("hosts:\n  5:\n    target: box\n", 2, "host name 5"),
        ("hosts:\n  h: {target: a}\n  h: {target: b}\n", 3, "duplicate key 'h' (first at line 2)"),
        ("hosts:\n  h: [a]\n", 2, "expected a mapping of fields"),
        ("- a\n", 1, "expected a mapping with a 'hosts:' mapping"),
        ("hosts: " + "[" * 300 + "]" * 300 + "\n", 1, "nested more than 64 levels"),
        (b"hosts:\n  h:\n    target: \xff\n", 3, "not UTF-8"),
        ("hosts:\n  h: [\n", None, "invalid YAML"),
    ],
)
def test_bad_hosts_file_is_exit_2_naming_file_line_and_key(capsys, content, line, fragment):
    path = _hosts_file(content)
    code, msg = run_check(capsys, "h")
    assert code == 2
    prefix = f"error: {path}:{line}: " if line else f"error: {path}"
    assert msg.startswith(prefix), msg
    assert fragment in msg, msg


@pytest.mark.parametrize(
    "fields, attr, value",
    [
        ("    target: root@10.0.0.1\n", "target", "root@10.0.0.1"),
        ("    target: root@fe80::1\n", "target", "root@fe80::1"),
        ("    target: gpu-box.example.com\n", "target", "gpu-box.example.com"),
        ("    target: box\n    jump: 'u@bastion:2222,other'\n", "jump", "u@bastion:2222,other"),
        ("    target: box\n    ssh_options: {Compression: 'yes'}\n", "ssh_options", None),
        ('    target: box\n    workdir: "/srv/my runs/$(x)"\n', "workdir", "/srv/my runs/$(x)"),
    ],
)
def test_ordinary_hosts_still_load(fields, attr, value):
    _hosts_file(f"hosts:\n  gpu8:\n{fields}")
    host = get_host("gpu8")
    if value is not None:
        assert getattr(host, attr) == value
    else:
        assert host.ssh_options == {"Compression": "yes"}


def test_unknown_host_name_is_one_line(capsys):
    code, msg = run_check(capsys, "no;such\nhost")
    assert code == 2
    assert "unknown host 'no;such\\nhost'" in msg


def test_ssh_option_numbers_and_booleans_are_ssh_words():
    _hosts_file(
        "hosts:\n  gpu8:\n    target: box\n"
        "    ssh_options: {ServerAliveInterval: 30, Compression: true, TCPKeepAlive: false}\n"
    )
    assert get_host("gpu8").ssh_options == {
        "ServerAliveInterval": "30",
        "Compression": "yes",
        "TCPKeepAlive": "no",
    }


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ("    target: box\n    ssh_options: {PKCS11Provider: /tmp/evil.so}\n", "runs a local"),
        ("    target: box\n    ssh_options: {SecurityKeyProvider: /tmp/e.so}\n", "runs a local"),
        ("    target: box:2222\n", "not an IPv6 address"),
        ("    target: root@10.0.0.1:22\n", "not an IPv6 address"),
        ("    target: box\n    address: '10.0.0.1:5000'\n", "not an IPv6 address"),
    ],
)
def test_library_loading_options_and_glued_ports_are_refused(capsys, fields, fragment):
    _hosts_file(f"hosts:\n  gpu8:\n{fields}")
    code, msg = run_check(capsys, "gpu8")
    assert code == 2 and fragment in msg, msg


@pytest.mark.parametrize(
    "fields, attr, value",
    [
        ("    target: 'root@[fe80::1]'\n", "target", "root@[fe80::1]"),
        ("    target: box\n    address: 'fd00::5'\n", "address", "fd00::5"),
        ("    target: box\n    address: '[fd00::5]'\n", "address", "[fd00::5]"),
    ],
)
def test_ipv6_literals_still_load(fields, attr, value):
    _hosts_file(f"hosts:\n  gpu8:\n{fields}")
    assert getattr(get_host("gpu8"), attr) == value
