"""One host entry, checked: how to reach it (ssh target, port, identity file, jump host, ssh
options) and where to work there (workdir, python, venv), or a Slurm cluster's login.

Every value that reaches ssh is kept to words ssh cannot re-parse into a command or an
option (names, paths, an allow-list of ``ssh_options``): a hosts file may come from a
checked-out repo. Where the entries come from, and which file may say what:
:mod:`glmserve.remote.hosts`.
"""

from __future__ import annotations

import ipaddress
import os
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from glmserve.paths import glmserve_home
from glmserve.remote.slurm_config import SlurmOptions

LOCAL = "local"
DEFAULT_REMOTE_WORKDIR = "~/glmserve"
BUILT_IN = "<built-in>"  # the source of the built-in ``local`` host

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
# Paths that reach ssh: -F is copied by ssh into the "ssh -F <path> -W ..." command it hands to
# `sh -c` for a jump host, and IdentityFile is an -o config line, so neither may hold shell or
# ssh-config syntax (spaces, quotes, $, ;, %, #...).
_SAFE_PATH_RE = re.compile(r"^[A-Za-z0-9_./~+@,:=-]+$")
MAX_PATH = 4096  # PATH_MAX: no longer path can exist, and long values only hit argv limits
MAX_OPTION_VALUE = 1024
_WORD_LIST = re.compile(r"^[+^-]?[A-Za-z0-9@._-]+(,[A-Za-z0-9@._-]+)*$")
_YES_NO = re.compile(r"^(yes|no)$", re.IGNORECASE)
_UINT = re.compile(r"^[0-9]{1,6}$")
_TIME = re.compile(r"^([0-9]{1,6}[smhdwSMHDW]?)+$")


def _choice(*words: str) -> re.Pattern[str]:
    return re.compile(rf"^({'|'.join(re.escape(w) for w in words)})$", re.IGNORECASE)


# The ssh options a hosts file may set: an allow-list (what is not here is refused), because
# ssh has many ways to run or load something locally (ProxyCommand, LocalCommand, ProxyJump,
# KnownHostsCommand, XAuthLocation with ForwardX11, Match exec, Include, PKCS11Provider,
# SecurityKeyProvider, IdentityAgent, ControlPath...) and new ones come with new releases.
# Each entry: canonical spelling -> the shape its value must have (so ssh accepts it).
ALLOWED_SSH_OPTIONS: dict[str, re.Pattern[str]] = {
    "AddressFamily": _choice("any", "inet", "inet6"),
    "BindAddress": re.compile(r"^[A-Za-z0-9_.:-]+$"),
    "BindInterface": re.compile(r"^[A-Za-z0-9_.:-]+$"),
    "CheckHostIP": _YES_NO,
    "Ciphers": _WORD_LIST,
    "Compression": _YES_NO,
    "ConnectionAttempts": _UINT,
    "ConnectTimeout": _UINT,
    "GSSAPIAuthentication": _YES_NO,
    "HostKeyAlgorithms": _WORD_LIST,
    "IdentitiesOnly": _YES_NO,
    "IPQoS": re.compile(r"^[A-Za-z0-9]+( [A-Za-z0-9]+)?$"),
    "KexAlgorithms": _WORD_LIST,
    "MACs": _WORD_LIST,
    "PreferredAuthentications": re.compile(r"^[a-z-]+(,[a-z-]+)*$"),
    "PubkeyAcceptedAlgorithms": _WORD_LIST,
    "PubkeyAcceptedKeyTypes": _WORD_LIST,
    "PubkeyAuthentication": _YES_NO,
    "RekeyLimit": re.compile(r"^([0-9]+[KMG]?|default)( ([0-9]+[smhdw]?|none))?$"),
    "ServerAliveCountMax": _UINT,
    "ServerAliveInterval": _TIME,
    "StrictHostKeyChecking": _choice("yes", "true"),
    "TCPKeepAlive": _YES_NO,
}
_ALLOWED_BY_LOWER = {k.lower(): k for k in ALLOWED_SSH_OPTIONS}
# Refused with their own reason (the generic one would not say what the danger is).
_COMMAND_OPTIONS = {
    "proxycommand",
    "proxyjump",
    "localcommand",
    "permitlocalcommand",
    "knownhostscommand",
    "pkcs11provider",
    "securitykeyprovider",
    "xauthlocation",
    "remotecommand",
    "match",
    "include",
}
_HOST_KEY_OPTIONS = {
    "stricthostkeychecking",
    "userknownhostsfile",
    "globalknownhostsfile",
    "nohostauthenticationforlocalhost",
    "hostkeyalias",
    "updatehostkeys",
    "verifyhostkeydns",
}
_OWN_OPTIONS = {"controlpath", "controlmaster", "controlpersist", "batchmode"}


def ssh_option_refusal(key: str, value: str) -> str | None:
    """Why ``key: value`` may not come from a hosts file, or None if it may."""
    low = key.lower()
    if low in _COMMAND_OPTIONS:
        also = " and decides which host keys ssh trusts" if low == "knownhostscommand" else ""
        return (
            f"{key} runs a local command or loads local code{also}; put it in your "
            "~/.ssh/config (a hosts file cannot make ssh run anything)"
        )
    if low in _HOST_KEY_OPTIONS and (
        low != "stricthostkeychecking" or not ALLOWED_SSH_OPTIONS[key_name(key)].match(value)
    ):
        return (
            f"{key}={value} would let ssh connect to a host whose key is not the one in your "
            "known_hosts (host-key checking cannot be weakened from a hosts file); add the "
            "host key with `ssh-keyscan -H HOST >> ~/.ssh/known_hosts` after checking its "
            "fingerprint"
        )
    if low in _OWN_OPTIONS:
        return f"{key} is set by glmserve itself (its ControlMaster connection and BatchMode)"
    if low not in _ALLOWED_BY_LOWER:
        return (
            f"{key} is not an ssh option a hosts file may set (allowed: "
            f"{', '.join(ALLOWED_SSH_OPTIONS)}); put it in your ~/.ssh/config"
        )
    if len(value) > MAX_OPTION_VALUE or not ALLOWED_SSH_OPTIONS[key_name(key)].match(value):
        return f"{key}: {value[:80]!r} is not a value ssh takes for this option"
    return None


def key_name(key: str) -> str:
    """The canonical spelling of an allowed ssh option (ssh keywords ignore case)."""
    return _ALLOWED_BY_LOWER.get(key.lower(), key)


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
    ssh_config: str | None = Field(
        None, description="ssh -F file (instead of ~/.ssh/config); user's hosts.yaml only"
    )
    ssh_options: dict[str, str] = Field(default_factory=dict, description="extra ssh -o K=V")
    connect_timeout: StrictInt = Field(10, ge=1, le=300)
    address: str | None = Field(
        None, description="address other nodes reach it at (multi-node); default ssh HostName"
    )
    source: str | None = None  # file:line the entry came from (for messages)
    # Set by the loader, never by a file: a project-file entry for this machine that names a
    # python/venv/workdir (see the module doc). A file setting it is refused (a duplicate key).
    project_local_code: bool = False
    kind: Literal["ssh", "slurm"] = Field("ssh", description="slurm: each run is a Slurm job")
    slurm: SlurmOptions | None = None  # kind: slurm only

    @model_validator(mode="before")
    @classmethod
    def _slurm_login(cls, v: Any) -> Any:
        """A slurm host's ``login`` (its submit host) is its ssh target."""
        if isinstance(v, dict) and "login" in v:
            v = dict(v)
            if v.get("kind") != "slurm":
                raise ValueError("login: is for kind: slurm hosts (an ssh host has target:)")
            if v.get("target") is not None:
                raise ValueError("give login: or target:, not both")
            v["target"] = v.pop("login")
        return v

    @model_validator(mode="after")
    def _slurm_block(self) -> HostConfig:
        if self.kind == "slurm" and self.slurm is None:
            self.slurm = SlurmOptions()
        if self.kind != "slurm" and self.slurm is not None:
            raise ValueError("slurm: is for kind: slurm hosts")
        return self

    @property
    def is_slurm(self) -> bool:
        return self.kind == "slurm"

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
        if v is not None and (len(v) > MAX_PATH or not _SAFE_PATH_RE.match(v)):
            raise ValueError(
                f"ssh cannot safely take this path: {v[:80]!r} (at most {MAX_PATH} characters "
                "of letters, digits and / . _ ~ + @ , : = -; no spaces, quotes, $, ;, %)"
            )
        return v

    @field_validator("workdir", "venv", "python")
    @classmethod
    def _one_line(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("must not be empty")
        if v is not None and len(v) > MAX_PATH:
            raise ValueError(f"is {len(v)} characters long; a path has at most {MAX_PATH}")
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
        out: dict[str, str] = {}
        for key, value in v.items():
            if not _SSH_OPTION_RE.match(key):
                raise ValueError(f"not an ssh option name: {key!r}")
            _printable(value, f"ssh option {key}")
            why = ssh_option_refusal(key, value)
            if why:
                raise ValueError(why)
            out[key_name(key)] = value
        return out

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
