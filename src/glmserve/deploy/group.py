"""Multi-node profiles: one SGLang server spread over a host group (``nodes: [a, b]``).

SGLang 0.5.9 runs a multi-node server as one ``launch_server`` per node with the same flags
plus ``--nnodes N --node-rank i --dist-init-addr <node 0>:<port>``; node rank 0 runs the HTTP
server, tokenizer and its share of the TP ranks, the others run only their schedulers (TP
ranks ``i*tp/N ...``) and a dummy ``/health``. Here each node is a normal recorded run whose
``meta`` links it to its group (``group_id``, ``node_rank``, ``nnodes``, ``nodes``); the group
is READY when node 0 is READY and no node failed, and any node's crash or stall fails the group
and stops every node.
"""

from __future__ import annotations

import contextlib
import queue
import secrets
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from glmserve.config.spec import LaunchSpec
from glmserve.errors import ConfigError, GlmserveError, RunNotFound
from glmserve.remote.hosts import HostConfig, get_host
from glmserve.store import RunRecord, RunStore

DIST_PORT_OFFSET = 1000  # default dist-init port: the server's --port + this
_NNODES = ("--nnodes",)
_NODE_RANK = ("--node-rank",)
_DIST = ("--dist-init-addr", "--nccl-init-addr")  # sglang 0.5.9: one option, two strings


# -- pure: per-node launch specs ---------------------------------------------------------------
def _flag(spec: LaunchSpec, names: tuple[str, ...]) -> str | bool | None:
    for n in names:
        v = spec.flag_value(n)
        if v is not None:
            return v
    return None


def _where(spec: LaunchSpec, names: tuple[str, ...]) -> str:
    """``file:line`` of the profile key that set one of ``names`` (or the flag name)."""
    for n in names:
        o = spec.origins.get(n)
        if o is not None:
            return f"{o.file}:{o.line}: {o.key}" if o.line else f"{o.file}: {o.key}"
    return names[0]


def drop_flags(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """``argv`` without ``--name value`` / ``--name=value`` / bare ``--name`` for ``names``."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        name = tok.split("=", 1)[0]
        if name in names:
            has_value = "=" not in tok and i + 1 < len(argv) and not argv[i + 1].startswith("--")
            i += 2 if has_value else 1
            continue
        out.append(tok)
        i += 1
    return out


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


def ssh_hostname(config_text: str) -> str | None:
    """The ``hostname`` line of ``ssh -G`` output (the address an alias resolves to)."""
    for line in config_text.splitlines():
        k, _, v = line.partition(" ")
        if k.lower() == "hostname" and v.strip():
            return v.strip()
    return None


# -- I/O: addresses, launching, watching, stopping ---------------------------------------------
def node_address(host: HostConfig) -> str:
    """How other nodes reach ``host``: its ``address:``, else ssh's HostName, else loopback."""
    if host.address:
        return host.address
    if host.is_local:
        return "127.0.0.1"
    from glmserve.remote.transport import SshTransport

    t = SshTransport(host)
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


def new_group_id(store: RunStore) -> str:
    """``g`` + 7 hex digits: never a run id (those are hex only), so ``stop g...`` is a group."""
    while True:
        gid = "g" + secrets.token_hex(4)[:7]
        if not group_runs(store, gid, exact=True):
            return gid


def group_runs(store: RunStore, group: str, *, exact: bool = False) -> list[RunRecord]:
    """The runs of group ``group`` (id or unique prefix), node rank order."""
    runs = [
        r
        for r in store.list_runs()
        if isinstance(r.meta.get("group_id"), str)
        and (r.meta["group_id"] == group or (not exact and r.meta["group_id"].startswith(group)))
    ]
    ids = {r.meta["group_id"] for r in runs}
    if len(ids) > 1:
        raise RunNotFound(f"group id prefix {group!r} is ambiguous; give more characters")
    return sorted(runs, key=lambda r: int(r.meta.get("node_rank", 0)))


def resolve_runs(store: RunStore, ident: str) -> list[RunRecord]:
    """A group id, or a run id: every node of the run's group, or just the run."""
    if ident.startswith("g"):
        runs = group_runs(store, ident)
        if runs:
            return runs
    run = store.get_run(ident)
    gid = run.meta.get("group_id")
    return group_runs(store, gid, exact=True) if isinstance(gid, str) else [run]


def plan_group(spec: LaunchSpec) -> tuple[list[HostConfig], list[LaunchSpec]]:
    """Each node's host and its own spec (rank flags added, that host's python/venv applied),
    as ``launch_group`` starts them and ``check`` validates them."""
    from glmserve.remote.process import host_adjusted_spec

    hosts = [get_host(n) for n in spec.nodes]
    if len(hosts) < 2:
        node_specs(spec, [])  # the one-line ConfigError for a group of fewer than 2
    specs = node_specs(spec, [node_address(hosts[0]), *[""] * (len(hosts) - 1)])
    return hosts, [host_adjusted_spec(s, h) for s, h in zip(specs, hosts, strict=True)]


def group_summary(runs: list[RunRecord]) -> dict[str, Any]:
    """What a bench result / sweep entry records of a group: its id and each node's host/run."""
    return {
        "group_id": runs[0].meta.get("group_id"),
        "nnodes": len(runs),
        "dist_init_addr": runs[0].meta.get("dist_init_addr"),
        "nodes": [
            {"node_rank": int(r.meta.get("node_rank", i)), "host": r.host, "run_id": r.run_id}
            for i, r in enumerate(runs)
        ],
    }


def serving_run(store: RunStore, ident: str) -> tuple[RunRecord, list[RunRecord]]:
    """The run that serves HTTP for ``ident`` (a group id or any node's run id: node 0; a
    plain run id: that run) and the group's runs ([] for a plain run)."""
    runs = resolve_runs(store, ident)
    if len(runs) == 1 and "group_id" not in runs[0].meta:
        return runs[0], []
    head = [r for r in runs if int(r.meta.get("node_rank", -1)) == 0]
    if not head:
        raise RunNotFound(
            f"group {runs[0].meta.get('group_id')} has no node 0 run recorded (the only node "
            "serving HTTP); relaunch the group"
        )
    return head[0], runs


def launch_group(
    spec: LaunchSpec,
    *,
    replace_existing: bool = False,
    store: RunStore | None = None,
    say: Callable[[str], None] = lambda _m: None,
) -> tuple[str, list[RunRecord]]:
    """Start one run per node of ``spec.nodes``; (group id, runs by node rank). Does not wait.

    Nodes start from the last rank down, so node 0 (the one that binds ``--port``) checks its
    port last. If any node fails to start, the nodes already started are stopped.
    """
    from glmserve.remote.process import launch_run, stop_run

    store = store or RunStore.open()
    hosts, specs = plan_group(spec)
    gid = new_group_id(store)
    started: list[RunRecord] = []
    try:
        for rank in reversed(range(len(hosts))):
            meta = {
                "group_id": gid,
                "node_rank": rank,
                "nnodes": len(hosts),
                "nodes": list(spec.nodes),
                "dist_init_addr": specs[rank].extra["dist_init_addr"],
            }
            rec = launch_run(
                specs[rank],
                hosts[rank].name,
                replace_existing=replace_existing,
                store=store,
                say=say,
                meta=meta,
            )
            say(f"group {gid}: node {rank} ({hosts[rank].name}) run {rec.run_id}, pid {rec.pid}")
            started.append(rec)
    except BaseException:
        for rec in started:
            with contextlib.suppress(GlmserveError):
                stop_run(rec.run_id, timeout=5, store=store)
        raise
    return gid, sorted(started, key=lambda r: int(r.meta["node_rank"]))


@dataclass
class GroupResult:
    """The group's verdict: READY, or the first node that failed and how."""

    state: str  # READY | CRASHED | STALLED | EXITED | TIMEOUT
    failing_rank: int | None
    results: dict[int, Any] = field(default_factory=dict)  # rank -> WatchResult
    elapsed_s: float = 0.0

    @property
    def decisive(self) -> Any:
        """The WatchResult that decided the verdict (node 0's when READY)."""
        return self.results[self.failing_rank if self.failing_rank is not None else 0]


def watch_group(
    runs: list[RunRecord],
    *,
    poll_s: float = 1.0,
    timeout_s: float | None = None,
    stall_timeout_s: float | None = None,
    stall_budgets: dict[Any, float] | None = None,
    on_tick: Callable[[int, Any], None] | None = None,
) -> GroupResult:
    """Watch every node at once (a thread each); the first decisive verdict ends all watches.

    Node 0 is watched like a single run (log + ``/health``). The other nodes never log READY
    (they run no HTTP server), so they are watched for crashes, exits and stalls only; their
    watch ends when node 0's verdict is in. Every node gets the same stall budgets; the
    overall deadline (``timeout_s``, None: the watcher's default) is node 0's, the others keep
    the default as a backstop. A TransportError from any watch is re-raised.
    """
    from glmserve.deploy.watch import Watcher
    from glmserve.remote.process import transport_for_run

    started = time.monotonic()
    cancel = threading.Event()
    verdicts: queue.Queue[tuple[int, Any, BaseException | None]] = queue.Queue()

    def work(rank: int, run: RunRecord) -> None:
        try:
            with RunStore.open() as store:  # sqlite connections stay in their thread
                w = Watcher(
                    run,
                    transport_for_run(run),
                    store,
                    poll_s=poll_s,
                    timeout_s=timeout_s if rank == 0 else None,
                    stall_timeout_s=stall_timeout_s,
                    stall_budgets=stall_budgets,
                    health=rank == 0,
                    cancel=cancel,
                    on_tick=(lambda tick: on_tick(rank, tick)) if on_tick else None,
                )
                verdicts.put((rank, w.watch(), None))
        except BaseException as exc:  # handed to the main thread
            verdicts.put((rank, None, exc))

    threads = [
        threading.Thread(target=work, args=(int(r.meta.get("node_rank", i)), r), daemon=True)
        for i, r in enumerate(runs)
    ]
    for th in threads:
        th.start()
    result = GroupResult(state="", failing_rank=None)
    error: BaseException | None = None
    try:
        pending = len(threads)
        while pending and not result.state and error is None:
            try:
                rank, res, exc = verdicts.get(timeout=0.2)
            except queue.Empty:
                continue
            pending -= 1
            if exc is not None:
                error = exc
                continue
            result.results[rank] = res
            if res.state == "READY" and rank == 0:
                result.state = "READY"
            elif res.state not in ("READY", "CANCELLED"):
                result.state, result.failing_rank = res.state, rank
    finally:
        cancel.set()
        for th in threads:
            th.join(timeout=30)
    if error is not None:
        raise error
    if not result.state:  # every watch ended without a verdict: cannot happen, be explicit
        raise GlmserveError("group watch ended without a verdict")
    result.elapsed_s = time.monotonic() - started
    return result


def mark_followers_ready(runs: list[RunRecord], store: RunStore) -> None:
    """Group READY: the other nodes are ready too; record them so ``status`` checks them."""
    from glmserve.remote.process import run_ownership, transport_for_run

    now = time.time()
    for run in runs[1:]:
        own = run_ownership(transport_for_run(run), run)
        store.update_run(
            run.run_id,
            state="READY",
            ready_at=now,
            meta={**run.meta, "ready_pids": own.pids},
        )
        store.add_event(run.run_id, "READY", None, {"group": run.meta.get("group_id")})


def stop_group(
    runs: list[RunRecord], timeout: float = 15.0, store: RunStore | None = None
) -> list[dict[str, Any]]:
    """Stop every node's run (each by its verified process group); all are tried, then a
    failure is raised naming every node that was not stopped."""
    from glmserve.remote.process import stop_failure, stop_runs

    reports = stop_runs(runs, timeout=timeout, store=store)
    error = stop_failure(reports)
    if error is not None:
        raise error
    return reports


# -- logs of every node --------------------------------------------------------------------------
def node_prefix(run: RunRecord) -> str:
    """``[node1 hostb] ``: which node a log line came from."""
    return f"[node{run.meta.get('node_rank', '?')} {run.host}] "


class GroupLogs:
    """Every node's server.log as prefixed lines: the existing text, then (``poll``) what is
    appended, until every node's server has ended.

    Lines are split per node so a line written in two chunks is never cut by another node's
    line; a last line without its newline is printed when its node's server ends.
    """

    def __init__(self, runs: list[RunRecord], note: Callable[[str], None] = lambda _m: None):
        from glmserve.deploy.watch import LineSplitter
        from glmserve.remote.process import transport_for_run

        self.runs = runs
        self.note = note
        self.transports = [transport_for_run(r) for r in runs]
        self.offsets = [0] * len(runs)
        self.splitters = [LineSplitter() for _ in runs]
        self.ended = [False] * len(runs)
        self.last_check = [0.0] * len(runs)

    @property
    def done(self) -> bool:
        return all(self.ended)

    def initial(self, last: int | None = None, follow: bool = False) -> list[str]:
        """What every node has logged so far (its last ``last`` lines), node by node. When
        following, an unterminated last line waits for its end (``poll``) instead."""
        from glmserve.remote.process import read_log_bytes, read_log_tail

        out: list[str] = []
        for i, run in enumerate(self.runs):
            t = self.transports[i]
            if last is not None:  # only the tail is read, however big the log
                data, self.offsets[i] = read_log_tail(t, run.log_path, last)
            else:
                data, self.offsets[i] = read_log_bytes(t, run.log_path)
            lines = self.splitters[i].feed(data)
            partial = "" if follow else self.splitters[i].partial.decode("utf-8", "replace")
            shown = [*lines, partial] if partial else lines
            if last is not None:
                shown = shown[-last:] if last > 0 else []
            out += [node_prefix(run) + ln for ln in shown]
        return out

    def poll(self, check_every_s: float = 2.0) -> list[str]:
        """New complete lines of every live node; a node whose server ended (seen when it
        had nothing new) gives its rest and is done."""
        from glmserve.errors import TransportError
        from glmserve.remote.process import read_log_bytes, run_ownership

        out: list[str] = []
        for i, run in enumerate(self.runs):
            if self.ended[i]:
                continue
            t, pre = self.transports[i], node_prefix(run)
            try:
                data, self.offsets[i] = t.read_from(run.log_path, self.offsets[i])
                out += [pre + ln for ln in self.splitters[i].feed(data)]
                now = time.monotonic()
                if data or now - self.last_check[i] < check_every_s:
                    continue
                self.last_check[i] = now
                if run_ownership(t, run).alive:
                    continue
                data, self.offsets[i] = read_log_bytes(t, run.log_path, self.offsets[i])
                lines = self.splitters[i].feed(data) + self.splitters[i].flush()
                out += [pre + ln for ln in lines]
                self.ended[i] = True
                self.note(f"{pre.strip()} run {run.run_id} is no longer running")
            except TransportError as exc:
                self.note(
                    f"{pre.strip()} connection lost: {exc}; retrying at byte {self.offsets[i]}"
                )
        return out
