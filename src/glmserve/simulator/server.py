"""The simulated ``sglang.launch_server`` process: start-up, port binding, lifecycle.

``SimServer.run`` goes through SGLang 0.5.9's start-up (``boot``: weights, KV pool, cuda
graphs), then binds ``--port`` and serves the HTTP handlers (``handlers.routes``), then runs
the warmup and logs "The server is fired up and ready to roll!". As in SGLang the listening
socket opens only after the model is loaded (uvicorn starts after the schedulers report
ready), so ``/health`` answers 503 while the server is Starting. Multi-node groups meet at
``--dist-init-addr``; faults fire from ``fault_injection``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sys
import time
from typing import Any

from glmserve.simulator import boot, fault_injection, faults
from glmserve.simulator.engine import Engine
from glmserve.simulator.handlers import routes, trace_capture
from glmserve.simulator.httpserver import (
    Connection,
    HttpRequest,
    Response,
    serve,
    start_send_pool,
)
from glmserve.simulator.logs import ServerLog
from glmserve.simulator.options import SimOptions
from glmserve.simulator.prompts import load_counter
from glmserve.simulator.textmodel import TextModel


class SimServer:
    """One simulated server process (launcher + TP schedulers + tokenizer manager)."""

    def __init__(self, opts: SimOptions, log: ServerLog | None = None) -> None:
        self.opts = opts
        self.log = log or ServerLog()
        self.status = "Starting"  # Starting | Up | UnHealthy
        self.engine: Engine | None = None
        self.pid = os.getpid()
        self.started = time.time()
        self.tp = max(1, int(opts.server.tp_size or 1))
        # Multi-node: each node runs tp/nnodes scheduler ranks (sglang's tp_rank_range).
        self.nnodes = max(1, int(opts.server.nnodes or 1))
        self.node_rank = int(opts.server.node_rank or 0)
        per_node = max(1, self.tp // self.nnodes)
        self.ranks = list(range(per_node * self.node_rank, per_node * (self.node_rank + 1)))
        self.all_joined = asyncio.Event()  # node 0: every other node passed warmup
        self.peers: list[asyncio.StreamWriter] = []
        self.rendezvous: asyncio.AbstractServer | None = None
        self.profile: dict[str, Any] | None = None
        self.http: asyncio.AbstractServer | None = None
        self.health_timeout = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
        self.health_generation = os.environ.get(
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true"
        ).lower() not in ("0", "false", "no")
        self.last_output = 0.0
        self.weight_load_s = 0.0
        # text prompts counted with the model's tokenizer when it is a local directory
        self.prompts = load_counter(opts.server.tokenizer_path, opts.server.model_path)
        fault = opts.output_fault
        if fault is not None and not fault.applies(
            opts.shape.attention_backend, opts.shape.kv_cache_dtype
        ):
            fault = None
        self.text_model = TextModel(fault)  # greedy text with logprobs (textmodel.py)

    async def run(self) -> int:
        """Start up, serve until killed; returns the exit status where SGLang would exit."""
        o = self.opts
        if o.crash_kind == "bad_args":
            return fault_injection.bad_args(self)
        boot.log_backend_choice(self)
        if o.crash_at == "args" and o.crash_kind in faults.SERVER_ARGS_REFUSALS:
            # ServerArgs refuses the backend for this GPU (backend facts): the launcher's
            # traceback, exit status 1, nothing started
            self.log.raw(faults.server_args_refusal(o.crash_kind, o.sglang_version))
            return 1
        boot.log_server_args(self)
        self._set_ulimit()
        if o.unknown:
            self.log.line("glmserve simulator: accepted, not modelled: " + " ".join(o.unknown))
        loop = asyncio.get_running_loop()
        if self.nnodes > 1 and self.node_rank == 0:
            await self._open_rendezvous()
        self.engine = Engine(o, self.log, on_step=self._on_step)
        for phase in ("load", "kv", "graphs"):
            if phase == "graphs" and not o.shape.cuda_graph:
                continue
            await boot.run_phase(self, phase)
        if self.node_rank > 0:
            return await self._follow()
        if o.crash_at == "serve" and o.crash_kind == "port_in_use":
            return await self._bind_failed()
        boot.log_scheduler_ready(self)
        if o.hang_at == "serve":
            await asyncio.Event().wait()
        start_send_pool(o.send_threads)
        try:
            self.http = await serve(o.server.host, o.server.port, self.dispatch, self._access)
        except OSError:
            return await self._bind_failed()
        for ln in faults.port_in_use_lines(self.pid, o.server.host, o.server.port)[:3]:
            self.log.line(ln)
        self.log.line(
            f"INFO:     Uvicorn running on http://{o.server.host}:{o.server.port} "
            "(Press CTRL+C to quit)"
        )
        # Fewer, cheaper GC passes: a gen-2 sweep over thousands of live streams costs whole
        # milliseconds, i.e. a visibly late step (SGLang tunes its GC for the same reason).
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)
        engine_task = loop.create_task(self.engine.run())
        await boot.run_phase(self, "warmup")
        if self.nnodes > 1:
            # The warmup forward is collective: it completes only once every node's ranks
            # ran it. A node that died leaves node 0 blocked here, silent, as in NCCL.
            await self.all_joined.wait()
        self.status = "Up"
        self.log.line("The server is fired up and ready to roll!")
        if o.crash_at == "after-ready":
            loop.call_later(o.crash_after_s, fault_injection.crash_now, self, "after-ready")
        if o.worker_death_after is not None:
            loop.call_later(o.worker_death_after, fault_injection.worker_dies, self)
        await engine_task
        return 0

    async def _follow(self) -> int:
        """Node rank > 0 of a multi-node group: schedulers only, no tokenizer or HTTP server.

        SGLang (``engine._launch_subprocesses``) waits for its schedulers, starts a dummy
        ``/health`` server on ``--port`` (uvicorn at warning level: nothing logged) and joins
        them. The simulator binds nothing, so nodes can share one test machine. These ranks
        still take part in node 0's warmup forward, so warmup and after-ready faults fire here
        at the same scaled times as on node 0.
        """
        o = self.opts
        self.log.line(
            f"glmserve simulator: node rank {self.node_rank} of {self.nnodes} "
            f"(dist-init-addr {o.server.dist_init_addr}): schedulers TP{self.ranks[0]}-"
            f"TP{self.ranks[-1]} ready; HTTP is served by node rank 0 only"
        )
        if o.hang_at == "serve":
            await asyncio.Event().wait()
        if not o.server.skip_server_warmup:
            await asyncio.sleep(self.scaled(o.phase_seconds.get("warmup", 0.0)) / 2)
            await fault_injection.maybe_fault(self, "warmup")
            if (kind := faults.sm100_only_crash(o.shape.attention_backend, o.gpu_arch)) is not None:
                fault_injection.crash_now(self, "warmup", kind=kind)
        await self._join_rendezvous()
        if o.crash_at == "after-ready":
            asyncio.get_running_loop().call_later(
                o.crash_after_s, fault_injection.crash_now, self, "after-ready"
            )
        await asyncio.Event().wait()  # until signalled, as the joined schedulers are
        return 0

    def _dist_addr(self) -> tuple[str, int] | None:
        raw = self.opts.server.dist_init_addr or ""
        host, _, port = raw.rpartition(":")
        if not host or not port.isdigit():
            return None
        return host.strip("[]"), int(port)

    async def _open_rendezvous(self) -> None:
        """Node 0 listens on --dist-init-addr (SGLang's TCPStore is there) for the other
        nodes to report that their ranks passed warmup."""

        async def joined(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if (await reader.readline()).strip() == b"warmup-done":
                self.peers.append(writer)
                if len(self.peers) >= self.nnodes - 1:
                    self.all_joined.set()

        addr = self._dist_addr()
        try:
            if addr is None:
                raise OSError("no --dist-init-addr host:port")
            self.rendezvous = await asyncio.start_server(joined, addr[0], addr[1])
        except OSError as exc:
            self.log.line(f"glmserve simulator: no node rendezvous ({exc}); not waiting for nodes")
            self.all_joined.set()

    async def _join_rendezvous(self) -> None:
        """Tell node 0 this node's ranks passed warmup (retrying until node 0 listens)."""
        addr = self._dist_addr()
        if addr is None:
            return
        while True:
            try:
                _reader, writer = await asyncio.open_connection(addr[0], addr[1])
                break
            except OSError:
                await asyncio.sleep(0.05)
        writer.write(b"warmup-done\n")
        await writer.drain()
        self.peers.append(writer)

    def _set_ulimit(self, target: int = 65535) -> None:
        """Raise RLIMIT_NOFILE as SGLang's ``set_ulimit`` does (thousands of streams need it)."""
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = min(target, hard) if hard != resource.RLIM_INFINITY else target
        if soft < want:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            except (ValueError, OSError) as exc:
                self.log.line(f"Fail to set RLIMIT_NOFILE: {exc}")

    def scaled(self, seconds: float) -> float:
        return seconds / self.opts.speed if self.opts.speed > 0 else seconds

    async def _bind_failed(self) -> int:
        """uvicorn could not bind ``--port``: what SGLang 0.5.9 really does next.

        uvicorn runs the app's lifespan startup before binding (uvicorn/server.py
        ``startup``), and SGLang's lifespan starts the warmup thread there (sglang 0.5.9
        srt/entrypoints/http_server.py:348-352 ``warmup_thread.start()``; uvicorn.run at
        :1966). The bind fails: ``logger.error(exc)``, ``await self.lifespan.shutdown()``,
        ``sys.exit(1)``; but the lifespan's ``finally: warmup_thread.join()`` (:358) first
        waits for the warmup, which polls ``--port`` (``_execute_server_warmup`` :1675-1684:
        ``/model_info`` once a second, 120 times). Another SGLang holding the port answers,
        takes the warmup request (:1762) and this process logs "The server is fired up and
        ready to roll!" (``_wait_and_warmup`` :1836) before it exits with status 1
        (launch_server.py's ``finally: kill_process_tree(..., include_parent=False)``). When
        nobody answers, the thread logs "Initialization failed. warmup error" (:1687) and
        ``kill_process_tree(os.getpid())`` SIGKILLs the process (status 137).
        """
        o = self.opts
        lines = faults.port_in_use_lines(self.pid, o.server.host, o.server.port)
        for ln in lines[:-1]:  # ... bind error, "Waiting for application shutdown."
            self.log.line(ln)
        if not o.server.skip_server_warmup and not await self._warmup_port_holder():
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        self.log.line("The server is fired up and ready to roll!")
        self.log.line(lines[-1])  # "Application shutdown complete."
        return 1

    async def _warmup_port_holder(self) -> bool:
        """``_execute_server_warmup`` against whatever holds ``--port``: True when it took the
        warmup request (the ready line follows), False after logging why not."""
        import urllib.error
        import urllib.request

        o = self.opts
        host = f"[{o.server.host}]" if ":" in o.server.host else o.server.host
        url = f"http://{host}:{o.server.port}"

        def fetch(path: str, body: bytes | None, timeout: float) -> int:
            req = urllib.request.Request(url + path, data=body, method="POST" if body else "GET")
            req.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(req, timeout=timeout) as resp:
                    resp.read()
                    return resp.status
            except urllib.error.HTTPError as exc:
                return exc.code
            except OSError:
                return 0

        for _ in range(120):  # for _ in range(120): time.sleep(1); requests.get(...)
            await asyncio.sleep(self.scaled(1.0))
            if await asyncio.to_thread(fetch, "/model_info", None, self.scaled(5.0)) == 200:
                break
        else:
            tb = faults.model_info_unreachable_traceback(o.server.host, o.server.port)
            self.log.line("Initialization failed. warmup error: " + tb.rstrip("\n"))
            return False
        body = json.dumps(
            {
                "sampling_params": {"temperature": 0, "max_new_tokens": 8},
                "text": "The capital city of France is",
            }
        ).encode()
        status = await asyncio.to_thread(fetch, "/generate", body, self.scaled(600.0))
        if status != 200:
            tb = faults.warmup_timeout_traceback(o.server.host, o.server.port)
            self.log.line("Initialization failed. warmup error: " + tb.rstrip("\n"))
            return False
        return True

    # -- HTTP: the handlers live in handlers/ --------------------------------------------
    def _access(self, req: HttpRequest, status: int) -> None:
        self.log.access(req.client, req.method, req.path, status)

    def _on_step(self, kind: str, batch: int) -> None:
        """After every engine step: scheduler output for /health, a trace capture's count."""
        self.last_output = time.time()
        if self.profile is not None:
            trace_capture.count_step(self)

    async def dispatch(self, req: HttpRequest, conn: Connection) -> Response | None:
        return await routes.dispatch(self, req, conn)
