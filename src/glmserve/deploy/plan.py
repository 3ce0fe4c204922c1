"""Planning a deployment: profile + host or host group -> the (host, LaunchSpec) of each node.

A single host is a group of one: every verb and the sweep plan the same way, then hand the plan
to :class:`glmserve.deploy.deployment.Deployment`. Planning reads the profiles and hosts files
and may ask the local ssh what an alias resolves to (``ssh -G``), but starts nothing and
contacts no host.

SGLang 0.5.9 runs a multi-node server as one ``launch_server`` per node with the same flags
plus ``--nnodes N --node-rank i --dist-init-addr <node 0>:<port>``; node rank 0 runs the HTTP
server, tokenizer and its share of the TP ranks, the others run only their schedulers (TP
ranks ``i*tp/N ...``) and a dummy ``/health``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from glmserve.config.flags import Flags
from glmserve.config.spec import LaunchSpec
from glmserve.errors import ConfigError
from glmserve.remote.address import check_bind
from glmserve.remote.host_config import HostConfig
from glmserve.remote.hosts import as_host, get_host

DIST_PORT_OFFSET = 1000  # default dist-init port: the server's --port + this
_NNODES = ("--nnodes",)
_NODE_RANK = ("--node-rank",)
_DIST = ("--dist-init-addr", "--nccl-init-addr")  # sglang 0.5.9: one option, two strings


@dataclass(frozen=True)
class Node:
    """One node of a plan: its rank, its host and the spec it runs (that host's python/venv
    applied; in a group, its rank flags added)."""

    rank: int
    host: HostConfig
    spec: LaunchSpec


@dataclass(frozen=True)
class Plan:
    """What a launch would start: ``spec`` is the profile as planned (``spec.nodes`` names a
    host group, empty for a single host), ``nodes`` each node's host and spec, node 0 first."""

    spec: LaunchSpec
    nodes: tuple[Node, ...]

    @property
    def grouped(self) -> bool:
        """A host group (several nodes, each its own run); False: a single host."""
        return bool(self.spec.nodes)

    @property
    def profile(self) -> str:
        return self.spec.profile

    @property
    def names(self) -> list[str]:
        """The nodes' host names, node 0 first."""
        return [n.host.name for n in self.nodes]

    @property
    def dist_init_addr(self) -> str | None:
        """Node 0's rendezvous address (a group only)."""
        addr = self.nodes[0].spec.extra.get("dist_init_addr")
        return None if addr is None else str(addr)


def parse_nodes(text: str | None) -> list[str] | None:
    """``--nodes a,b`` as host names; None when the option was not given."""
    if text is None:
        return None
    from glmserve.commalist import comma_list

    return comma_list(text, "--nodes", "a,b")


def plan(
    profile: str,
    *,
    host: HostConfig | str | None = None,
    nodes: Sequence[str] | None = None,
    overrides: Sequence[str] = (),
    simulate: bool = False,
    sglang_version: str | None = None,
    host_is_default: bool = False,
    address: Callable[[HostConfig], str] | None = None,
) -> Plan:
    """Plan ``profile`` onto ``host`` (default local) or the host group ``nodes``; without
    either, the profile's own ``nodes:`` when it has them.

    ``host_is_default`` (the sweep and tune): ``host`` is only for profiles without ``nodes:``;
    otherwise a profile that names its nodes while ``host`` is given is an error. The simulator
    runs on node 0's python (this interpreter on a local host: it has glmserve installed).
    """
    from glmserve.config import profiles

    group = list(nodes or [])
    if group and host and not host_is_default:
        raise ConfigError("give --host or --nodes, not both")
    spec: LaunchSpec | None = None
    if not group and (not host or host_is_default):
        spec = profiles.load_profile(profile, list(overrides), sglang_version)
        group = list(spec.nodes)
    # A host named by the profile's own `nodes:` is not one the user named (see get_host).
    # A HostConfig already resolved (the sweep's --host) is used as it is.
    head = as_host(group[0] if group else host, explicit=bool(nodes) or not group)
    if spec is None:
        spec = profiles.load_profile(profile, list(overrides), sglang_version)
    if not group and spec.nodes:
        raise ConfigError(
            f"profile {spec.profile} targets nodes {', '.join(spec.nodes)}; drop --host "
            "(or pass --nodes)"
        )
    if simulate:
        spec = profiles.simulate(spec, python=None if head.is_local else head.python)
    if group:
        spec = replace(spec, nodes=group)
    return plan_spec(spec, head, address, nodes_named=bool(nodes))


def plan_spec(
    spec: LaunchSpec,
    host: HostConfig | None = None,
    address: Callable[[HostConfig], str] | None = None,
    *,
    nodes_named: bool = False,
) -> Plan:
    """The plan of a loaded spec: its ``nodes`` as a group (node 0's ``address`` is the
    rendezvous), else one node on ``host`` (default local). ``nodes_named``: the user gave
    them (``--nodes``), rather than the profile's ``nodes:``. Each host is resolved once
    here (node 0's is ``host`` when the caller resolved it already) and the plan carries the
    HostConfig to every later step: the launch never reads hosts.yaml again."""
    from glmserve.remote.launch import host_adjusted_spec

    if spec.nodes:
        hosts = [
            host if i == 0 and host is not None and host.name == n
            else get_host(n, explicit=nodes_named)
            for i, n in enumerate(spec.nodes)
        ]  # fmt: skip
        if len(hosts) < 2:
            node_specs(spec, [])  # the one-line ConfigError for a group of fewer than 2
        head_addr = (address or node_address)(hosts[0])
        specs = node_specs(spec, [head_addr, *[""] * (len(hosts) - 1)])
    else:
        hosts, specs = [host or get_host(None)], [spec]
    check_bind(spec.argv, _origin(spec, "--host"))  # every probe goes where it binds
    nodes = tuple(
        Node(i, h, host_adjusted_spec(s, h))
        for i, (h, s) in enumerate(zip(hosts, specs, strict=True))
    )
    return Plan(spec, nodes)


def _origin(spec: LaunchSpec, flag: str) -> str:
    """Where ``flag`` was set (file:line (key)), for errors about its value."""
    o = spec.origins.get(flag)
    if o is None:
        return f"profile {spec.profile}"
    return (f"{o.file}:{o.line}" if o.line else o.file) + f" ({o.key})"


# -- per-node launch specs (pure) ----------------------------------------------------------------
def _flag(spec: LaunchSpec, names: tuple[str, ...]) -> str | bool | None:
    """The value of one dest spelled as any of ``names`` (the last written wins)."""
    return spec.flags.get_any(names)


def _where(spec: LaunchSpec, names: tuple[str, ...]) -> str:
    """``file:line`` of the profile key that set one of ``names`` (or the flag name)."""
    for n in names:
        o = spec.origins.get(n)
        if o is not None:
            return f"{o.file}:{o.line}: {o.key}" if o.line else f"{o.file}: {o.key}"
    return names[0]


def drop_flags(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """``argv`` without ``--name value`` / ``--name=value`` / bare ``--name`` for ``names``."""
    return Flags.parse(argv).without(names)


def format_addr(host: str, port: int) -> str:
    """``host:port``, an IPv6 literal in brackets (as SGLang parses --dist-init-addr)."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def node_specs(spec: LaunchSpec, node_addrs: list[str]) -> list[LaunchSpec]:
    """One LaunchSpec per node of ``spec.nodes``, with SGLang's multi-node flags added.

    ``node_addrs[i]`` is how the other nodes reach node i; only node 0's is used (the
    ``--dist-init-addr`` host). A ``--dist-init-addr`` or ``--nnodes`` the profile sets is
    kept (``--nnodes`` must match the group); ``--node-rank`` differs per node, so setting it
    in a group profile is an error. Default dist-init port: ``--port`` + 1000.
    """
    n = len(spec.nodes)
    if n < 2:
        raise ConfigError(f"profile {spec.profile}: a host group needs at least 2 nodes, got {n}")
    if len(set(spec.nodes)) != n:
        raise ConfigError(f"profile {spec.profile}: nodes {spec.nodes} name a host twice")
    if len(node_addrs) != n:
        raise ValueError(f"{len(node_addrs)} addresses for {n} nodes")
    if _flag(spec, _NODE_RANK) is not None:
        raise ConfigError(
            f"{_where(spec, _NODE_RANK)}: --node-rank is set per node by glmserve for a host "
            "group; remove it"
        )
    nn = _flag(spec, _NNODES)
    if nn is not None and str(nn) != str(n):
        raise ConfigError(
            f"{_where(spec, _NNODES)}: --nnodes {nn} but the profile's host group has {n} "
            f"nodes ({', '.join(spec.nodes)})"
        )
    if spec.tp_size % n:
        raise ConfigError(
            f"profile {spec.profile}: --tp-size {spec.tp_size} does not split over {n} nodes"
        )
    dist = _flag(spec, _DIST)
    if not isinstance(dist, str):
        dist = format_addr(node_addrs[0], spec.port + DIST_PORT_OFFSET)
    base = drop_flags(spec.argv, _NNODES + _NODE_RANK + _DIST)
    return [
        replace(
            spec,
            argv=[*base, "--nnodes", str(n), "--node-rank", str(i), "--dist-init-addr", dist],
            nodes=list(spec.nodes),
            extra={**spec.extra, "node_rank": i, "nnodes": n, "dist_init_addr": dist},
        )
        for i in range(n)
    ]


# -- node 0's address ----------------------------------------------------------------------------
def ssh_hostname(config_text: str) -> str | None:
    """The ``hostname`` line of ``ssh -G`` output (the address an alias resolves to)."""
    for line in config_text.splitlines():
        k, _, v = line.partition(" ")
        if k.lower() == "hostname" and v.strip():
            return v.strip()
    return None


def node_address(host: HostConfig) -> str:
    """How other nodes reach ``host``: its ``address:``, else ssh's HostName (``ssh -G`` only
    evaluates the local ssh config), else loopback for this machine."""
    if host.address:
        return host.address
    if host.is_local:
        return "127.0.0.1"
    from glmserve.remote.transport import SshTransport, transport_for

    t = transport_for(host)  # the node's one transport of this command
    if not isinstance(t, SshTransport):  # cannot be: this machine returned above
        return "127.0.0.1"
    try:
        p = subprocess.run(
            [*t.ssh_base(), "-G", t.target], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"host {host.name}: cannot resolve its address (ssh -G): {exc}") from exc
    name = ssh_hostname(p.stdout) if p.returncode == 0 else None
    if not name:
        raise ConfigError(
            f"host {host.name}: cannot resolve its address with ssh -G; set address: in "
            f"hosts.yaml ({host.source})"
        )
    return name
