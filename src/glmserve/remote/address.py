"""Which address a run's probes connect to: the one its server binds.

SGLang binds ``--host`` (default ``127.0.0.1``: ``ServerArgs.host`` in 0.5.9's
``srt/server_args.py``). A server bound to one address (``--host 127.0.0.2``, a private NIC)
does not answer on ``127.0.0.1``, so a ``/health`` asked there reads as a dead server and a
healthy run was stored CRASHED. Every probe (watch, identity, bench, status, profile) goes to
:func:`probe_host`: a wildcard bind (``0.0.0.0``, ``::``) is reached on the host's loopback of
that family, a specific address at that address (over ssh, the forward's destination is that
address as the host sees it). A value that cannot be an address is refused at plan time.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Any

from glmserve.config.flags import Flags
from glmserve.errors import ConfigError

SGLANG_DEFAULT_HOST = "127.0.0.1"
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$")  # fmt: skip


def bind_host(argv: Sequence[str]) -> str:
    """The ``--host`` the server binds (the last one given, as argparse takes it);
    ValueError for a ``--host`` without a value (argparse refuses it too)."""
    host = Flags.parse(argv).get("--host")
    if host is True:
        raise ValueError("needs a value (the address the server binds)")
    return SGLANG_DEFAULT_HOST if host is None else str(host)


def probe_host(bind: str) -> str:
    """Where to connect to a server bound to ``bind``; ValueError saying why there is none."""
    text = bind.strip()
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if bare in ("", "0.0.0.0"):
        return "127.0.0.1"
    try:
        ip = ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        if _HOSTNAME.match(bare):
            return bare  # a name: resolved where the connection is made (the host, over ssh)
        raise ValueError(f"{bind!r} is not an address or host name a server can bind") from None
    if ip.is_unspecified:  # "::" (SGLang's dual-stack bind; asyncio sets IPV6_V6ONLY)
        return "::1"
    if ip.is_multicast:
        raise ValueError(f"{bind!r} is a multicast address: a server cannot listen on it")
    return bare


def run_probe_host(spec: dict[str, Any] | None) -> str:
    """:func:`probe_host` of a recorded run's spec (``RunRecord.spec``); the default for a
    record without one. A recorded value no probe can use falls back to loopback (the plan
    refused it before launch; an old record may hold anything)."""
    argv = (spec or {}).get("argv") or []
    try:
        return probe_host(bind_host([str(a) for a in argv]))
    except ValueError:
        return SGLANG_DEFAULT_HOST


def check_bind(argv: Sequence[str], where: str) -> str:
    """The probe host for a launch's argv, or a ConfigError naming ``where`` (the profile
    key's file:line) when the server's ``--host`` cannot be probed."""
    try:
        return probe_host(bind_host(argv))
    except ValueError as exc:
        raise ConfigError(f"{where}: --host {exc}; glmserve could not reach the server") from None


def url_host(host: str) -> str:
    """``host`` as it goes in a URL (IPv6 literals in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
