"""Reaching a run's HTTP server from here (an ssh ``-L`` forward when remote) and its /health."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from glmserve.remote.address import run_probe_host, url_host
from glmserve.remote.run_host import transport_for_run
from glmserve.remote.transport import Transport
from glmserve.store import RunRecord, RunStore


@contextlib.contextmanager
def open_endpoint(run_id: str) -> Iterator[str]:
    """Base URL reaching the run's HTTP server from here; an ssh ``-L`` forward when remote."""
    with RunStore.open() as store:
        run = store.get_run(run_id)
    with run_base_url(run, transport_for_run(run)) as base:
        yield base


@contextlib.contextmanager
def run_base_url(run: RunRecord, t: Transport) -> Iterator[str]:
    """The run's server from here: a Slurm job's node address when glmserve runs on the
    login host (an ssh ``-L`` forward via the login host to ``node:port`` when the login is
    reached by ssh: the compute nodes need not be reachable from here), else the address
    the server binds (``run_probe_host``), through an ssh ``-L`` forward when remote."""
    addr = (run.meta.get("slurm") or {}).get("node_addr")
    if addr and t.host.is_local:
        host = f"[{addr}]" if ":" in addr else addr
        yield f"http://{host}:{int(run.port)}"
        return
    if addr:  # a Slurm login host over ssh: the node, directly or forwarded via the login
        from glmserve.remote.slurm import reach_directly

        if reach_directly(t.host, addr, int(run.port)):
            yield f"http://{url_host(addr)}:{int(run.port)}"
            return
        with t.endpoint(run.port, addr) as base:  # to the node, not the login's loopback
            yield base
        return
    with t.endpoint(run.port, run_probe_host(run.spec)) as base:  # the address it binds
        yield base


def health_status(base_url: str, timeout: float = 1.0) -> int | None:
    """Status code of ``GET /health``; None when nothing answered."""
    import httpx

    try:
        return httpx.get(f"{base_url}/health", timeout=timeout).status_code
    except httpx.HTTPError:
        return None


def health_ok(base_url: str, timeout: float = 1.0) -> bool:
    """``GET /health`` answered 200."""
    return health_status(base_url, timeout) == 200
