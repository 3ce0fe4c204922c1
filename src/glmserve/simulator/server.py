"""The simulated ``sglang.launch_server``: start-up phases, HTTP API, faults.

HTTP shapes follow sglang 0.5.9 (``srt/entrypoints/http_server.py``, ``managers/
tokenizer_manager.py``, ``entrypoints/openai/serving_{completions,chat}.py``): the listening
socket opens only after the model is loaded (as uvicorn starts after the schedulers report
ready), ``/health`` and ``/health_generate`` answer 503 while the server is Starting, and with
``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`` (default on) ``/health`` really runs a 1-token
request and polls once a second (scaled by ``--sim-speed``) for scheduler output, answering 503
after ``SGLANG_HEALTH_CHECK_TIMEOUT`` (20 s) without any, e.g. after a worker died.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sys
import time
import uuid
from typing import Any

from glmserve.simulator import costmodel, faults, torch_trace
from glmserve.simulator.engine import Engine, Request
from glmserve.simulator.httpserver import (
    Connection,
    HttpRequest,
    Response,
    serve,
    start_send_pool,
)
from glmserve.simulator.logs import ServerLog, progress_bar
from glmserve.simulator.options import SimOptions
from glmserve.simulator.prompts import load_counter

ARCHITECTURE = "GlmMoeDsaForCausalLM"
MODEL_TYPE = "glm_moe_dsa"
PATCH_LINE = "glmserve patch {name} active (sglang {version}, pid {pid})"
WORKER_PID_BASE = 1000  # fake scheduler PIDs: launcher pid + base + rank
AVAIL_MEM_GIB = 93.42  # free memory SGLang reports on an idle RTX PRO 6000 (96 GB) at start


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
        self.profile_seq = 0
        self.http: asyncio.AbstractServer | None = None
        self.health_timeout = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
        self.health_generation = os.environ.get(
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true"
        ).lower() not in ("0", "false", "no")
        self.last_output = 0.0
        self.weight_load_s = 0.0
        # text prompts counted with the model's tokenizer when it is a local directory
        self.prompts = load_counter(opts.server.tokenizer_path, opts.server.model_path)

    # ===================================================================== start-up
    async def run(self) -> int:
        o = self.opts
        if o.crash_kind == "bad_args":
            return self._bad_args()
        self._log_server_args()
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
            await self._phase(phase)
        if self.node_rank > 0:
            return await self._follow()
        if o.crash_at == "serve" and o.crash_kind == "port_in_use":
            return await self._bind_failed()
        self._log_scheduler_ready()
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
        await self._phase("warmup")
        if self.nnodes > 1:
            # The warmup forward is collective: it completes only once every node's ranks
            # ran it. A node that died leaves node 0 blocked here, silent, as in NCCL.
            await self.all_joined.wait()
        self.status = "Up"
        self.log.line("The server is fired up and ready to roll!")
        if o.crash_at == "after-ready":
            loop.call_later(o.crash_after_s, self._crash_now, "after-ready")
        if o.worker_death_after is not None:
            loop.call_later(o.worker_death_after, self._worker_dies)
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
            await asyncio.sleep(self._scaled(o.phase_seconds.get("warmup", 0.0)) / 2)
            await self._maybe_fault("warmup")
            if (kind := faults.sm100_only_crash(o.shape.attention_backend, o.gpu_arch)) is not None:
                self._crash_now("warmup", kind=kind)
        await self._join_rendezvous()
        if o.crash_at == "after-ready":
            asyncio.get_running_loop().call_later(o.crash_after_s, self._crash_now, "after-ready")
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

    def _scaled(self, seconds: float) -> float:
        return seconds / self.opts.speed if self.opts.speed > 0 else seconds

    async def _phase(self, phase: str) -> None:
        """Log one start-up phase over its configured duration; crash/hang if asked."""
        o = self.opts
        dur = self._scaled(o.phase_seconds.get(phase, 0.0))
        if phase == "load":
            await self._load_weights(dur)
        elif phase == "kv":
            await asyncio.sleep(dur)
            await self._maybe_fault("kv")
            self._log_kv()
            self._maybe_patch_fails("init")  # the attention backend is built after the pool
        elif phase == "graphs":
            self._maybe_patch_fails("cuda_graph")
            await self._capture_graphs(dur)
        elif phase == "warmup":
            await self._warmup(dur)

    async def _maybe_fault(self, phase: str) -> None:
        if self.opts.hang_at == phase:
            await asyncio.Event().wait()  # stop logging, never become ready
        if self.opts.crash_at == phase:
            self._crash_now(phase)

    async def _load_weights(self, dur: float) -> None:
        o = self.opts
        pids = [self.pid + WORKER_PID_BASE + r for r in self.ranks]
        for r in self.ranks:
            self.log.line("Init torch distributed begin.", r)
        for r in self.ranks:
            self.log.line("Init torch distributed ends. elapsed=0.84 s, mem usage=0.78 GB", r)
        if o.crash_at == "load" and o.crash_kind == "nccl_timeout":
            self._crash_now("load")
        for r in self.ranks:
            self.log.line(f"Load weight begin. avail mem={AVAIL_MEM_GIB:.2f} GB", r)
        shards = 83
        t0 = time.perf_counter()
        steps = 6
        for i in range(steps + 1):
            done = shards * i // steps
            self.log.raw(
                progress_bar(
                    "Loading safetensors checkpoint shards",
                    done,
                    shards,
                    time.perf_counter() - t0 + 1e-3,
                )
            )
            if i == steps // 2:
                await self._maybe_fault("load")
            if i < steps:
                await asyncio.sleep(dur / steps)
        self.weight_load_s = time.perf_counter() - t0
        for r, pid in zip(self.ranks, pids, strict=True):
            self.log.line(
                f"Load weight end. elapsed={self.weight_load_s:.2f} s, type={ARCHITECTURE}, "
                f"dtype=torch.bfloat16, avail mem={AVAIL_MEM_GIB - o.model.weight_mem_gib:.2f} GB, "
                f"mem usage={o.model.weight_mem_gib:.2f} GB.",
                r,
            )
            if costmodel.GATHER_CAST_PATCH in o.patches and not self._patch_refusal("import"):
                self.log.line(
                    PATCH_LINE.format(
                        name=costmodel.GATHER_CAST_PATCH, version=o.sglang_version, pid=pid
                    ),
                    r,
                )
        self._maybe_patch_fails("import")

    def _log_kv(self) -> None:
        o = self.opts
        tokens = o.pool_tokens
        size = (
            costmodel.kv_pool_gib(o.model, o.shape)
            if not o.server.max_total_tokens
            else (
                tokens
                * costmodel.KV_ROW_ELEMS
                * costmodel.kv_bytes_per_elem(o.shape.kv_cache_dtype)
                * o.model.layers
                / costmodel.GIB
            )
        )
        avail = AVAIL_MEM_GIB - o.model.weight_mem_gib
        for r in self.ranks:
            self.log.line(f"KV Cache is allocated. #tokens: {tokens}, KV size: {size:.2f} GB", r)
        for r in self.ranks:
            self.log.line(f"Memory pool end. avail mem={avail - size:.2f} GB", r)

    async def _capture_graphs(self, dur: float) -> None:
        o = self.opts
        avail = AVAIL_MEM_GIB - o.model.weight_mem_gib - costmodel.kv_pool_gib(o.model, o.shape)
        for r in self.ranks:
            self.log.line(
                "Capture cuda graph begin. This can take up to several minutes. "
                f"avail mem={avail:.2f} GB",
                r,
            )
        self.log.line(
            "Capture cuda graph bs [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]", self.ranks[0]
        )
        n = 12
        t0 = time.perf_counter()
        for i in range(n + 1):
            self.log.raw(
                progress_bar(
                    f"Capturing batches (bs={64 - 5 * i if i < n else 1} "
                    f"avail_mem={avail - 0.05 * i:.2f} GB)",
                    i,
                    n,
                    time.perf_counter() - t0 + 1e-3,
                )
            )
            if i == n // 2:
                await self._maybe_fault("graphs")
            if i < n:
                await asyncio.sleep(dur / n)
        el = time.perf_counter() - t0
        for r in self.ranks:
            self.log.line(
                f"Capture cuda graph end. Time elapsed: {el:.2f} s. mem usage=0.61 GB. "
                f"avail mem={avail - 0.61:.2f} GB.",
                r,
            )

    def _log_scheduler_ready(self) -> None:
        o = self.opts
        avail = (
            AVAIL_MEM_GIB - o.model.weight_mem_gib - costmodel.kv_pool_gib(o.model, o.shape) - 0.61
        )
        chunked = o.server.chunked_prefill_size or 8192
        self.log.line(
            f"max_total_num_tokens={o.pool_tokens}, chunked_prefill_size={chunked}, "
            f"max_prefill_tokens={o.server.max_prefill_tokens}, "
            f"max_running_requests={o.max_running_requests}, "
            f"context_len={o.server.context_length or o.model.context_len}, "
            f"available_gpu_mem={avail:.2f} GB",
            0,
        )

    async def _warmup(self, dur: float) -> None:
        o = self.opts
        self.log.line('INFO:     127.0.0.1:51234 - "GET /model_info HTTP/1.1" 200 OK')
        if o.server.skip_server_warmup:
            return
        await asyncio.sleep(dur / 2)
        await self._maybe_fault("warmup")
        if (kind := faults.sm100_only_crash(o.shape.attention_backend, o.gpu_arch)) is not None:
            # the first decode at warmup runs the backend's SM100-only kernel: it fails as the
            # seeds' trtllm_mla launch did on SM120 (see spec.SM100_ONLY_ATTENTION_BACKENDS)
            self._crash_now("warmup", kind=kind)
        assert self.engine is not None
        req = Request("warmup-" + uuid.uuid4().hex[:8], 4, 8, None)
        done = asyncio.get_running_loop().create_future()
        req.sink = _FutureSink(done)
        self.engine.submit(req, traced=False)
        timeout = self._scaled(600.0)  # requests.post(..., timeout=600) in _execute_server_warmup
        try:
            await asyncio.wait_for(done, timeout)
        except asyncio.TimeoutError:
            tb = faults.warmup_timeout_traceback(o.server.host, o.server.port)
            self.log.line("Initialization failed. warmup error: " + tb.rstrip("\n"))
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        await asyncio.sleep(dur / 2)
        self.log.line('INFO:     127.0.0.1:51236 - "POST /generate HTTP/1.1" 200 OK')

    # ===================================================================== faults
    def _patch_refusal(self, phase: str) -> str | None:
        """The reason the real gather-cast patch refuses this launch at ``phase`` (import,
        init, cuda_graph), from the patch module's own requirement list, or None."""
        from glmserve.runtime.glmserve_runtime.patches import flashinfer_mla_gather_cast as gtc

        o = self.opts
        if costmodel.GATHER_CAST_PATCH not in o.patches:
            return None
        args = {
            "disable_cuda_graph": not o.shape.cuda_graph,
            "kv_cache_dtype": o.shape.kv_cache_dtype,
            "dtype": getattr(o.server, "dtype", None) or "auto",
        }
        row = (costmodel.KV_ROW_ELEMS, 512, 64)
        for req in gtc.launch_requirement_failures(args, o.sglang_version, kv_row=row):
            if req.phase == phase:
                return f"glmserve patch {gtc.PATCH} FAILED: {req.reason}"
        return None

    def _maybe_patch_fails(self, phase: str) -> None:
        """Die as a worker whose patch refused does: every rank logs the FAILED line
        (``glmserve_runtime.fail``), rank 0's scheduler reports the PatchError, the launcher
        tears the tree down (see patches/flashinfer_mla_gather_cast.py for where each
        refusal is raised: import, backend __init__, init_cuda_graph_state)."""
        line = self._patch_refusal(phase)
        if line is None:
            return
        for r in self.ranks:
            self.log.line(line, r)
        where = {
            "import": "_PatchingLoader.exec_module",
            "init": "FlashInferMLAAttnBackend.__init__",
            "cuda_graph": "init_cuda_graph_state",
        }[phase]
        self.log.line(
            "Scheduler hit an exception: Traceback (most recent call last):\n"
            f'  File "glmserve_runtime/patches/flashinfer_mla_gather_cast.py", in {where}\n'
            f"glmserve_runtime.PatchError: {line}",
            self.ranks[0],
        )
        for tp, msg in faults.cascade_lines(0, len(self.ranks), False):
            self.log.line(msg, None if tp is None else self.ranks[0] + tp)
        sys.stderr.flush()
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)  # kill_process_tree, as for any scheduler crash

    def _crash_now(self, phase: str, kind: str | None = None) -> None:
        """Write the crash log for ``kind`` at ``phase`` and die as SGLang's launcher does."""
        o = self.opts
        kind = kind or o.crash_kind or "illegal_memory_access"
        if kind == "port_in_use":
            sys.exit(self._port_in_use())
        if kind == "bad_args":
            sys.exit(self._bad_args())
        if kind == "nccl_timeout":
            self._nccl_abort(phase)
            return
        base, per_node = self.ranks[0], len(self.ranks)
        crash = faults.scheduler_crash(kind, phase, o.gpu_arch, o.shape.attention_backend, per_node)
        for ln in crash.pre_lines:
            self.log.raw(ln)
        self.log.line(
            "Scheduler hit an exception: " + crash.traceback.rstrip("\n"),
            base + crash.failing_rank,
        )
        for tp, msg in faults.cascade_lines(crash.failing_rank, per_node, phase == "after-ready"):
            self.log.line(msg, None if tp is None else base + tp)
        sys.stderr.flush()
        sys.stdout.flush()
        # kill_process_tree(os.getpid()): SIGKILL to ourselves -> exit status 137
        os.kill(os.getpid(), signal.SIGKILL)

    def _nccl_abort(self, phase: str) -> None:
        """A scheduler aborted by the NCCL watchdog. During init the launcher sees its pipe
        close and exits 1; once the schedulers reported ready nobody notices: the worker is
        just gone (warmup then times out; after start-up /health turns 503)."""
        rank = self.ranks[0] + min(3, len(self.ranks) - 1)
        for ln in faults.nccl_abort_lines(rank):
            self.log.raw(ln)
        if phase in ("load", "kv", "graphs"):
            lines, tb = faults.dead_scheduler_launcher(rank)
            for ln in lines:
                self.log.line(ln)
            self.log.raw(tb)
            sys.stderr.flush()
            os._exit(1)
        self._worker_dies()

    def _port_in_use(self) -> int:
        for ln in faults.port_in_use_lines(self.pid, self.opts.server.host, self.opts.server.port):
            self.log.line(ln)
        return 1

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
            await asyncio.sleep(self._scaled(1.0))
            if await asyncio.to_thread(fetch, "/model_info", None, self._scaled(5.0)) == 200:
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
        status = await asyncio.to_thread(fetch, "/generate", body, self._scaled(600.0))
        if status != 200:
            tb = faults.warmup_timeout_traceback(o.server.host, o.server.port)
            self.log.line("Initialization failed. warmup error: " + tb.rstrip("\n"))
            return False
        return True

    def _bad_args(self) -> int:
        from glmserve.simulator.options import sglang_parser

        bad = " ".join(self.opts.unknown) or "--dsa-decode-backend trtllm"
        parser = sglang_parser()
        sys.stderr.write(parser.format_usage())
        sys.stderr.write(f"{parser.prog}: error: unrecognized arguments: {bad}\n")
        sys.stderr.flush()
        return 2

    def _worker_dies(self) -> None:
        """A scheduler died after start-up: SGLang does not notice; /health turns 503."""
        if self.engine is not None:
            self.engine.dead = True

    # ===================================================================== HTTP
    def _access(self, req: HttpRequest, status: int) -> None:
        self.log.access(req.client, req.method, req.path, status)

    def _on_step(self, kind: str, batch: int) -> None:
        self.last_output = time.time()
        if self.profile is not None and self.profile.get("num_steps"):
            self.profile["left"] -= 1
            if self.profile["left"] <= 0:
                self._stop_profile()

    async def dispatch(self, req: HttpRequest, conn: Connection) -> Response | None:
        route = _ROUTES.get(req.path)
        if route is None:
            return Response.json({"detail": "Not Found"}, 404)
        methods, name = route
        if req.method not in methods and not (req.method == "HEAD" and "GET" in methods):
            return Response.json({"detail": "Method Not Allowed"}, 405)
        if name == "metrics" and not self.opts.server.enable_metrics:
            return Response.json({"detail": "Not Found"}, 404)
        return await getattr(self, "h_" + name)(req, conn)

    async def h_health(self, req: HttpRequest, conn: Connection) -> Response:
        if self.status == "Starting":
            return Response(503)
        if req.path == "/health" and not self.health_generation:
            return Response(200)
        assert self.engine is not None
        tic = time.time()
        rid = f"HEALTH_CHECK_{tic}"
        hreq = Request(rid, 1, 1, None)
        if not self.engine.dead:
            self.engine.quiet_rids.add(rid)
            self.engine.submit(hreq, traced=False)
        deadline = tic + self._scaled(self.health_timeout)
        while time.time() < deadline:
            await asyncio.sleep(self._scaled(1.0))
            if self.last_output > tic and not self.engine.dead:
                self.engine.quiet_rids.discard(rid)
                self.status = "Up"
                return Response(200)
        hreq.abort()
        self.log.line(
            "Health check failed. Server couldn't get a response from detokenizer for last "
            f"{int(self.health_timeout)} seconds. tic start time: "
            f"{time.strftime('%H:%M:%S', time.localtime(tic))}. last_heartbeat time: "
            f"{time.strftime('%H:%M:%S', time.localtime(self.last_output or tic))}"
        )
        self.status = "UnHealthy"
        return Response(503)

    def model_info(self) -> dict[str, Any]:
        s = self.opts.server
        return {
            "model_path": s.model_path,
            "tokenizer_path": s.tokenizer_path or s.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": MODEL_TYPE,
            "architectures": [ARCHITECTURE],
        }

    async def h_model_info(self, req: HttpRequest, conn: Connection) -> Response:
        if req.path == "/get_model_info":
            self.log.line(
                "Endpoint '/get_model_info' is deprecated and will be removed in a future "
                "version. Please use '/model_info' instead."
            )
        return Response.json(self.model_info())

    def server_args(self) -> dict[str, Any]:
        s = vars(self.opts.server).copy()
        s["served_model_name"] = self.opts.served_model_name
        s["tokenizer_path"] = s.get("tokenizer_path") or s["model_path"]
        s["attention_backend"] = self.opts.shape.attention_backend
        s["mem_fraction_static"] = self.opts.shape.mem_fraction_static
        s["max_running_requests"] = self.opts.max_running_requests
        s["context_length"] = s.get("context_length") or self.opts.model.context_len
        return s

    async def h_server_info(self, req: HttpRequest, conn: Connection) -> Response | None:
        if req.path == "/get_server_info":
            self.log.line(
                "Endpoint '/get_server_info' is deprecated and will be removed in a future "
                "version. Please use '/server_info' instead."
            )
        if self.engine is not None and self.engine.dead:
            # 0.5.9 asks the schedulers (tokenizer_manager.get_internal_state through a
            # _Communicator, tokenizer_communicator_mixin.py) and waits with no timeout: a
            # dead scheduler never answers, so neither does the request.
            gone = asyncio.get_running_loop().create_future()
            conn.on_close.append(lambda: gone.done() or gone.set_result(None))
            await gone
            return None
        o = self.opts
        args = self.server_args()
        eng = self.engine
        internal = {
            **args,
            "last_gen_throughput": eng.last_gen_throughput if eng else 0.0,
            "memory_usage": {
                "weight": round(o.model.weight_mem_gib, 2),
                "kvcache": round(costmodel.kv_pool_gib(o.model, o.shape), 2),
                "token_capacity": int(o.pool_tokens),
                "graph": 0.61 if o.shape.cuda_graph else 0.0,
            },
            "effective_max_running_requests_per_dp": o.max_running_requests,
        }
        return Response.json(
            {
                **args,
                "status": "ready",
                "max_total_num_tokens": o.pool_tokens,
                "max_req_input_len": o.pool_tokens - 1,
                "internal_states": [internal],
                "version": o.sglang_version,
            }
        )

    async def h_models(self, req: HttpRequest, conn: Connection) -> Response:
        name = self.opts.served_model_name
        return Response.json(
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": int(self.started),
                        "owned_by": "sglang",
                        "root": name,
                        "parent": None,
                        "max_model_len": self.opts.server.context_length
                        or self.opts.model.context_len,
                    }
                ],
            }
        )

    async def h_flush_cache(self, req: HttpRequest, conn: Connection) -> Response:
        eng = self.engine
        ok = eng is not None and not eng.running and not eng.waiting
        if ok:
            self.log.line("Cache flushed successfully!", 0)
        return Response.text(
            "Cache flushed.\nPlease check backend logs for more details. (When there are running "
            "or waiting requests, the operation will not be performed.)\n",
            200 if ok else 400,
        )

    async def h_sim_config(self, req: HttpRequest, conn: Connection) -> Response:
        o = self.opts
        eng = self.engine
        return Response.json(
            {
                "cost_model": o.model.to_dict(),
                "shape": {
                    "attention_backend": o.shape.attention_backend,
                    "kv_cache_dtype": o.shape.kv_cache_dtype,
                    "cuda_graph": o.shape.cuda_graph,
                    "num_continuous_decode_steps": o.shape.num_continuous_decode_steps,
                    "mem_fraction_static": o.shape.mem_fraction_static,
                    "patches": list(o.shape.patches),
                    "cast_mode": costmodel.cast_mode(o.shape),
                },
                "pool_tokens": o.pool_tokens,
                "max_running_requests": o.max_running_requests,
                "time_scale": 1.0 / o.speed,
                "tokens_per_chunk": o.tokens_per_chunk,
                "single_stream_step_s": costmodel.decode_step_s(o.model, o.shape, 1, 1024),
                "single_stream_terms_s": costmodel.step_terms(o.model, o.shape, 1, 1024),
                "gpu_arch": o.gpu_arch,
                "prompt_tokens": self.prompts.describe(),
                "sglang_version": o.sglang_version,
                "status": self.status,
                "engine_dead": bool(eng and eng.dead),
            }
        )

    async def h_sim_trace(self, req: HttpRequest, conn: Connection) -> Response:
        assert self.engine is not None
        since = int(req.query.get("since_step", "0") or 0)
        doc = self.engine.trace_dict(req.query.get("rid"), since)
        if req.query.get("requests") == "0":  # steps only: cheap to poll during a long run
            doc["requests"] = {}
        return Response.json(doc)

    async def h_metrics(self, req: HttpRequest, conn: Connection) -> Response:
        from glmserve.simulator.metrics import render_metrics

        assert self.engine is not None
        body = render_metrics(self.engine, self.opts)
        return Response(200, body.encode(), "text/plain; version=0.0.4; charset=utf-8")

    # -- profiling -----------------------------------------------------------------
    async def h_start_profile(self, req: HttpRequest, conn: Connection) -> Response:
        try:
            body = req.json() or {}
        except ValueError:
            body = {}
        if self.profile is not None:
            return Response.text(
                "Profiling is already in progress. Call /stop_profile first.\n", 400
            )
        out_dir = body.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
        pid = str(time.time())
        if body.get("profile_prefix"):
            pid = f"{body['profile_prefix']}-{pid}"
        num = body.get("num_steps")
        assert self.engine is not None
        self.profile = {
            "id": pid,
            "dir": out_dir,
            "num_steps": int(num) if num else None,
            "left": int(num) if num else 0,
            "activities": body.get("activities") or ["CPU", "GPU"],
            "first_step": self.engine.step_count + 1,
        }
        for r in range(self.tp):
            self.log.line(
                f"Profiling starts. Traces will be saved to: {out_dir} (with profile id: {pid})", r
            )
        return Response.text("Start profiling.\n")

    async def h_stop_profile(self, req: HttpRequest, conn: Connection) -> Response:
        if self.profile is None:
            return Response.text("Profiling is not in progress. Call /start_profile first.\n", 400)
        self._stop_profile()
        return Response.text("Stop profiling. This will take some time.\n")

    def _stop_profile(self) -> None:
        prof, self.profile = self.profile, None
        if prof is None or self.engine is None:
            return
        steps = [s for s in self.engine.steps if s[0] >= prof["first_step"]]
        if prof["num_steps"]:
            steps = steps[: prof["num_steps"]]
        torch_trace.write_traces(
            prof["dir"],
            prof["id"],
            self.tp,
            self.opts.model,
            self.opts.shape,
            steps,
            prof["activities"],
        )
        for r in range(self.tp):
            self.log.line(f"Profiling done. Traces are saved to: {prof['dir']}", r)

    # -- generation ------------------------------------------------------------------
    async def h_generate(self, req: HttpRequest, conn: Connection) -> Response | None:
        from glmserve.simulator import api

        return await api.generate(self, req, conn)

    async def h_completions(self, req: HttpRequest, conn: Connection) -> Response | None:
        from glmserve.simulator import api

        return await api.openai(self, req, conn, chat=False)

    async def h_chat(self, req: HttpRequest, conn: Connection) -> Response | None:
        from glmserve.simulator import api

        return await api.openai(self, req, conn, chat=True)

    # ===================================================================== logs
    def _log_server_args(self) -> None:
        parts = []
        for k, v in self.server_args().items():
            parts.append(f"{k}={v!r}")
        self.log.line("server_args=ServerArgs(" + ", ".join(parts) + ")")


class _FutureSink:
    def __init__(self, fut: asyncio.Future) -> None:
        self.fut = fut

    def flush(self, req: Request, ntokens: int) -> None:
        req.emit_times.extend([time.perf_counter()] * ntokens)
        if req.finished and not self.fut.done():
            self.fut.set_result(req)


_GET, _POST, _BOTH = ("GET",), ("POST", "PUT"), ("GET", "POST")
_ROUTES: dict[str, tuple[tuple[str, ...], str]] = {
    "/health": (_GET, "health"),
    "/health_generate": (_GET, "health"),
    "/model_info": (_GET, "model_info"),
    "/get_model_info": (_GET, "model_info"),
    "/server_info": (_GET, "server_info"),
    "/get_server_info": (_GET, "server_info"),
    "/v1/models": (_GET, "models"),
    "/generate": (_POST, "generate"),
    "/v1/completions": (("POST",), "completions"),
    "/v1/chat/completions": (("POST",), "chat"),
    "/start_profile": (_BOTH, "start_profile"),
    "/stop_profile": (_BOTH, "stop_profile"),
    "/flush_cache": (_BOTH, "flush_cache"),
    "/metrics": (_GET, "metrics"),
    "/sim/trace": (_GET, "sim_trace"),
    "/sim/config": (_GET, "sim_config"),
}


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))
