"""Hosts: where a server runs, read from ``configs/hosts.yaml`` and the user's ``hosts.yaml``.

A host is a name -> how to reach it (an ssh alias or ``user@host``, port, identity file, jump
host) and where to work there (workdir, python, venv). The built-in ``local`` host needs no ssh
and is the default. The user's file (``~/.config/glmserve/hosts.yaml``) overrides the project's
per host name. Errors name file:line and the key, and an unknown host lists the known ones.

File format::

    hosts:
      gpu8:
        target: root@10.1.230.174     # or an alias from ~/.ssh/config
        port: 22
        identity_file: ~/.ssh/id_ed25519
        jump: bastion                 # ProxyJump
        workdir: /root/glmserve       # default ~/glmserve
        python: python3
        venv: /root/venv
        address: 10.1.230.174         # multi-node: how other nodes reach it (default: ssh's
                                      # HostName for target)
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from glmserve.errors import ConfigError
from glmserve.paths import glmserve_home, project_configs_dir, user_config_dir
from glmserve.yamlload import load_yaml, read_config_text

LOCAL = "local"
DEFAULT_REMOTE_WORKDIR = "~/glmserve"

# Everything below reaches ssh as one argv word (never a shell), but ssh itself re-parses some
# of it: a target starting with '-' is an option (-oProxyCommand=...), '%h' expansions feed
# ProxyCommand, and `-o K=V` values are config lines. So names are kept to what DNS, IPv6
# literals, ssh aliases and user names use.
HOST_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_USER = r"[A-Za-z0-9_][A-Za-z0-9_.+-]*"
_HOST = r"(?:[A-Za-z0-9_][A-Za-z0-9_.:-]*|\[[0-9A-Fa-f:.%a-z]+\])"
_TARGET_RE = re.compile(rf"^(?:{_USER}@)?{_HOST}$")
_JUMP_RE = re.compile(rf"^(?:ssh://)?(?:{_USER}@)?{_HOST}(?::\d{{1,5}})?$")
_SSH_OPTION_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
# ssh options that run a local command: a hosts file must not be able to do that behind the
# user's back (a checked-out repo's configs/hosts.yaml is read from the cwd). Put them in your
# own ~/.ssh/config (or ssh_config:) where ssh users expect them.
# PKCS11Provider / SecurityKeyProvider load a local shared library, which is the same thing.
_COMMAND_OPTIONS = {
    "proxycommand",
    "localcommand",
    "permitlocalcommand",
    "knownhostscommand",
    "pkcs11provider",
    "securitykeyprovider",
}


def _printable(v: str | None, what: str) -> str | None:
    if v is not None and any(not ch.isprintable() for ch in v):
        raise ValueError(f"{what} must be one line of printable text, got {v!r}")
    return v


def _colon_means_ipv6(host: str | None, what: str) -> str | None:
    """A host part with a ':' must be an IPv6 literal (optionally ``[...]`` and ``%zone``):
    ``10.0.0.1:5000`` or ``host:2222`` is a port glued on, which ssh and --dist-init-addr
    would misread (give ports in their own fields)."""
    if host is None or ":" not in host:
        return host
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.IPv6Address(bare)
    except ValueError:
        raise ValueError(
            f"{what} {host!r} has a ':' but is not an IPv6 address (put a port in port:)"
        ) from None
    return host


def _not_option(v: str | None, what: str) -> str | None:
    if v is not None and v.startswith("-"):
        raise ValueError(f"{what} must not start with '-' (ssh would read it as an option)")
    return v


class HostConfig(BaseModel):
    """One host entry; ``target`` absent (or the name ``local``) means this machine."""

    model_config = ConfigDict(extra="forbid")

    name: str = LOCAL
    target: str | None = Field(None, description="ssh alias or user@host; None = local")
    port: StrictInt | None = Field(None, ge=1, le=65535)
    identity_file: str | None = None
    jump: str | None = Field(None, description="ProxyJump host")
    workdir: str | None = None
    python: str = "python3"
    venv: str | None = None
    ssh_config: str | None = Field(None, description="ssh -F file (instead of ~/.ssh/config)")
    ssh_options: dict[str, str] = Field(default_factory=dict, description="extra ssh -o K=V")
    connect_timeout: StrictInt = Field(10, ge=1, le=300)
    address: str | None = Field(
        None, description="address other nodes reach it at (multi-node); default ssh HostName"
    )
    source: str | None = None  # file:line the entry came from (for messages)

    @field_validator("target")
    @classmethod
    def _no_shell_meta(cls, v: str | None) -> str | None:
        if v is not None and not _TARGET_RE.match(v):
            raise ValueError(
                f"not a valid ssh target: {v!r} (want an ssh alias, host or user@host; "
                "no spaces, quotes, shell characters or leading '-')"
            )
        return v

    @field_validator("jump")
    @classmethod
    def _jump_hosts(cls, v: str | None) -> str | None:
        if v is not None and v.lower() != "none":
            for hop in v.split(","):
                if not _JUMP_RE.match(hop):
                    raise ValueError(f"not a valid ProxyJump host: {hop!r} ([user@]host[:port])")
        return v

    @field_validator("identity_file", "ssh_config")
    @classmethod
    def _ssh_path(cls, v: str | None) -> str | None:
        _not_option(_printable(v, "a path"), "a path")
        if v is not None and (not v.strip() or any(c in v for c in " \t'\"\\")):
            raise ValueError(f"ssh cannot take this path in an option: {v!r} (no spaces/quotes)")
        return v

    @field_validator("workdir", "venv", "python")
    @classmethod
    def _one_line(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("must not be empty")
        return _printable(v, "the value")

    @field_validator("address")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        if v is not None and not re.match(rf"^{_HOST}$", v):
            raise ValueError(f"not a valid address: {v!r} (a host name or IP)")
        return _colon_means_ipv6(v, "address")

    @field_validator("target")
    @classmethod
    def _target_colon(cls, v: str | None) -> str | None:
        if v is not None:
            _colon_means_ipv6(v.rsplit("@", 1)[-1], "target")
        return v

    @field_validator("ssh_options", mode="before")
    @classmethod
    def _ssh_option_values(cls, v: Any) -> Any:
        """ssh config values are words: ``ServerAliveInterval: 30`` and ``Compression: yes``
        (YAML int / bool) mean "30" and "yes"."""
        if isinstance(v, dict):
            return {
                k: ("yes" if x else "no") if isinstance(x, bool) else str(x)
                if isinstance(x, int | float) else x
                for k, x in v.items()
            }  # fmt: skip
        return v

    @field_validator("ssh_options")
    @classmethod
    def _ssh_options(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not _SSH_OPTION_RE.match(key):
                raise ValueError(f"not an ssh option name: {key!r}")
            if key.lower() in _COMMAND_OPTIONS:
                raise ValueError(
                    f"{key} runs a local command; put it in your ~/.ssh/config (or a file "
                    "named by ssh_config:) instead"
                )
            _printable(value, f"ssh option {key}")
        return v

    @property
    def is_local(self) -> bool:
        return self.target is None

    @property
    def resolved_workdir(self) -> str:
        """Workdir on the host; remote ``~`` is left for the remote shell to expand."""
        if self.workdir:
            return os.path.expanduser(self.workdir) if self.is_local else self.workdir
        if self.is_local:
            return str(glmserve_home() / "local")
        return DEFAULT_REMOTE_WORKDIR


def host_files() -> list[Path]:
    """The hosts files read, lowest precedence first."""
    return [project_configs_dir() / "hosts.yaml", user_config_dir() / "hosts.yaml"]


def _key_lines(root: yaml.Node | None) -> dict[str, int]:
    """Map ``host`` and ``host.key`` to their 1-based line in the YAML (for error messages)."""
    lines: dict[str, int] = {}
    if not isinstance(root, yaml.MappingNode):
        return lines
    for k, v in root.value:
        if k.value == "hosts" and isinstance(v, yaml.MappingNode):
            for hk, hv in v.value:
                lines[str(hk.value)] = hk.start_mark.line + 1
                if isinstance(hv, yaml.MappingNode):
                    for fk, _ in hv.value:
                        lines[f"{hk.value}.{fk.value}"] = fk.start_mark.line + 1
    return lines


def _load_file(path: Path) -> dict[str, HostConfig]:
    if not path.exists() and not path.is_symlink():
        return {}
    data, root = load_yaml(read_config_text(path, "hosts file"), str(path), "invalid YAML")
    if data is None:
        return {}
    if not isinstance(data, dict) or not isinstance(data.get("hosts") or {}, dict):
        raise ConfigError(f"{path}:1: expected a mapping with a 'hosts:' mapping of name -> host")
    extra = set(data) - {"hosts"}
    lines = _key_lines(root)
    if extra:
        raise ConfigError(f"{path}:1: unknown top-level key(s) {sorted(extra)}; expected 'hosts'")
    out: dict[str, HostConfig] = {}
    for name, entry in (data.get("hosts") or {}).items():
        line = lines.get(str(name), 1)
        if not isinstance(name, str) or not HOST_NAME_RE.match(name):
            raise ConfigError(
                f"{path}:{line}: host name {name!r} must be letters, digits, '.', '_' or '-', "
                "starting with a letter or digit"
            )
        entry = entry or {}
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}:{line}: hosts.{name}: expected a mapping of fields")
        try:
            out[name] = HostConfig(name=name, source=f"{path}:{line}", **_strs(entry))
        except ValidationError as exc:
            e = exc.errors()[0]
            key = ".".join(str(p) for p in e["loc"])
            kline = lines.get(f"{name}.{e['loc'][0]}", line) if e["loc"] else line
            msg = str(e["msg"]).removeprefix("Value error, ")
            raise ConfigError(f"{path}:{kline}: hosts.{name}.{key}: {msg}") from exc
        except TypeError as exc:  # e.g. a non-string key
            raise ConfigError(f"{path}:{line}: hosts.{name}: {exc}") from exc
    return out


def _strs(entry: dict[Any, Any]) -> dict[str, Any]:
    return {str(k): v for k, v in entry.items()}


def load_hosts() -> dict[str, HostConfig]:
    """All hosts: built-in ``local``, then the project file, then the user's (later wins)."""
    hosts: dict[str, HostConfig] = {LOCAL: HostConfig(name=LOCAL, source="<built-in>")}
    for f in host_files():
        hosts.update(_load_file(f))
    return hosts


def get_host(name: str | None) -> HostConfig:
    """The host called ``name`` (default ``local``); ConfigError listing known hosts if absent."""
    name = name or LOCAL
    hosts = load_hosts()
    if name not in hosts:
        files = ", ".join(str(f) for f in host_files())
        raise ConfigError(
            f"unknown host {name!r}; known hosts: {', '.join(sorted(hosts))} (from {files})"
        )
    return hosts[name]
