"""One ``glmserve bench`` from start to stored result: probe, warm up, levels, metadata, store.

The CLI verb only parses options and calls ``run_bench``; everything a result must carry
(settings, server readings, run metadata, versions) is gathered here.
"""

from __future__ import annotations

import contextlib
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glmserve import __version__
from glmserve.bench.contention import ServerView
from glmserve.bench.contention import judge as judge_contention
from glmserve.bench.contention import notes as contention_notes
from glmserve.bench.progress import Progress, SilenceWatch
from glmserve.bench.ratesweep import level_plan, saturation
from glmserve.bench.results import BenchResult, build_result, evaluate_gates, summarize_level
from glmserve.bench.runner import prepare_requests, run_level, run_warmup
from glmserve.bench.server_probe import (
    last_gen_throughput,
    metrics_notes,
    probe_server_noted,
    resolve_model,
)
from glmserve.bench.settings import BenchSettings, Gates, LevelRun, RunningBench, resolve_inputs
from glmserve.bench.telemetry import LevelTelemetry
from glmserve.bench.validate import validate_settings
from glmserve.deploy.identity import RunMonitor, UrlMonitor, Verdict
from glmserve.errors import (
    BenchIncomplete,
    ConfigError,
    GlmserveError,
    NoRequestSucceeded,
    TransportError,
)
from glmserve.sigterm import sigterm_as_interrupt


@dataclass
class BenchOutcome:
    result: BenchResult
    result_id: int | None
    interrupted: bool
    store_error: str | None = None  # why the result could not be stored (a full disk)
    # Why the bench is an error although a (partial) result was stored: the server died
    # (ServerCrashed, with the log's diagnosis), became unreachable, or no request succeeded.
    failure: GlmserveError | None = None


def git_sha() -> str | None:
    """glmserve's commit when running from a git checkout (editable install), else None."""
    src = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(src), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def bench_run(ident: str | None) -> tuple[str | None, dict[str, Any] | None]:
    """The run to bench and store the result against, and its group's summary.

    A multi-node group (its ``g...`` id or any node's run id) is benched through node 0, the
    only node serving HTTP; the result is stored against node 0's run and records every node.
    """
    if ident is None:
        return None, None
    from glmserve.deploy.deployment import Deployment
    from glmserve.store import RunStore

    with RunStore.open() as store:
        dep = Deployment.resolve(store, ident)
        head = dep.head
    group = dep.summary()
    if group is None:
        return head.run_id, None
    _check_followers_alive(dep.followers)
    for node, run in zip(group["nodes"][1:], dep.followers, strict=True):  # node 0: run_metadata
        node["gpus"] = (run.meta or {}).get("gpus") or host_gpus(run)
    return head.run_id, group


def _check_followers_alive(followers: list[Any]) -> None:
    """Refuse to bench a group with a dead node > 0: node 0 still answers HTTP, but its
    requests would hang in the collectives that need the missing ranks."""
    from glmserve.errors import ServerCrashed
    from glmserve.remote.process import run_ownership, transport_for_run

    for run in followers:
        owned = run_ownership(transport_for_run(run), run)
        if not owned.alive:
            rank = (run.meta or {}).get("node_rank", "?")
            raise ServerCrashed(
                f"node {rank} ({run.host}) of group {(run.meta or {}).get('group_id')} is not "
                f"running ({owned.reason or 'no process left'}); see `glmserve status "
                f"{run.run_id}`, then stop and relaunch the group"
            )


def run_metadata(run_id: str | None) -> dict[str, Any]:
    """Profile, rendered argv, host and GPUs from the run record (RunNotFound if unknown)."""
    if run_id is None:
        return {}
    from glmserve.store import RunStore

    with RunStore.open() as store:
        run = store.get_run(run_id)
    spec = run.spec or {}
    meta = run.meta or {}
    gpus = meta.get("gpus") or meta.get("host_gpus") or host_gpus(run)
    return {
        "run_id": run.run_id,
        "profile": run.profile,
        "host": run.host,
        "launcher": run.launcher,
        "argv": spec.get("command") or spec.get("argv"),
        "env": spec.get("env"),  # part of the config (GLMSERVE_PATCHES): kept with the result
        "patches": run.patches,
        "tp_size": run.tp_size,
        "gpus": gpus,
        "sglang_version": meta.get("sglang_version"),
    }


GPU_QUERY = "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader"


def host_gpus(run: Any) -> list[str] | None:
    """The run host's GPUs (one ``nvidia-smi`` line each), None where there is no nvidia-smi
    (a simulated run on a CPU box) or the host does not answer within a few seconds."""
    from glmserve.errors import GlmserveError
    from glmserve.remote.process import transport_for_run

    try:
        res = transport_for_run(run).run(GPU_QUERY, timeout=15)
    except GlmserveError:
        return None
    lines = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
    return lines if res.ok and lines else None


SERVER_ARG_KEYS = ("model_path", "tp_size", "attention_backend", "kv_cache_dtype",
                   "disable_cuda_graph", "cuda_graph_max_bs", "max_running_requests",
                   "mem_fraction_static", "speculative_algorithm", "stream_interval",
                   "enable_metrics")  # fmt: skip


def simulator_speed(base: str) -> dict[str, Any]:
    """``{"simulated": True, "sim_speed": S}`` from the simulator's ``/sim/config``; {} for a
    real SGLang server (no such route). A sim-speed-10 result is not comparable with speed 1."""
    import httpx

    try:
        r = httpx.get(base + "/sim/config", timeout=5.0)
        scale = float(r.json()["time_scale"]) if r.status_code == 200 else 0.0
    except (httpx.HTTPError, ValueError, KeyError, TypeError, OverflowError, RecursionError):
        return {}
    return {"simulated": True, "sim_speed": round(1.0 / scale, 6)} if scale > 0 else {}


def comparable_meta(
    meta: dict[str, Any], server: dict[str, Any], labels: dict[str, str] | None
) -> dict[str, Any]:
    """The fields that decide comparability, flat in the stored meta (see bench.comparable)."""
    from glmserve.bench.comparable import argv_hash, gpu_summary

    model, count = gpu_summary(meta.get("gpus"))
    return {
        "labels": dict(labels or {}),
        "argv_hash": argv_hash(meta.get("argv")),
        "gpu_model": model,
        "gpu_count": count,
        "sim_speed": server.get("sim_speed"),
    }


def server_summary(info: dict[str, Any]) -> dict[str, Any]:
    """What the server says about itself: version, throughput gauge, the flags that matter."""
    version = info.get("version")
    out: dict[str, Any] = {
        # a string, or nothing: another shape (a hostile or broken server) is not a version
        "version": version[:100] if isinstance(version, str) else None,
        "last_gen_throughput": last_gen_throughput(info),
    }
    out["args"] = {k: info[k] for k in SERVER_ARG_KEYS if k in info}
    return out


@dataclass
class Target:
    """What is benched: the base URL, and for a run its verified identity and a monitor."""

    base: str
    # a run's (node 0 first, for a group), or the --url server's /health watch
    monitors: list[RunMonitor | UrlMonitor] = field(default_factory=list)
    identity: dict[str, Any] | None = None

    def verdict(self, settle_s: float = 0.0) -> Verdict | None:
        """Whether a benched run (any node of a group) stopped serving; None while not."""
        for i, m in enumerate(self.monitors):
            v = m.check(settle_s=settle_s if i == 0 else 0.0)
            if v is not None:
                return v
        return None


@contextlib.contextmanager
def endpoint(
    run_id: str | None,
    url: str | None,
    abort: threading.Event | None = None,
    failed: threading.Event | None = None,
) -> Iterator[Target]:
    """The server to bench: ``--url`` as given, or the run's (via ssh forward if remote),
    verified to be that run's live server and watched while it is measured (the monitor sets
    ``abort`` when it dies)."""
    if url:
        base = url.rstrip("/")
        stop = abort.set if abort is not None else (lambda: None)
        with UrlMonitor(base, on_dead=stop, suspect=failed) as monitor:
            yield Target(base, [monitor])
        return
    if run_id is None:
        raise ConfigError("give a RUN id or --url URL")
    from glmserve.deploy.deployment import Deployment
    from glmserve.deploy.identity import serving_endpoint
    from glmserve.remote.process import transport_for_run
    from glmserve.store import RunStore

    with RunStore.open() as store:
        followers = Deployment.resolve(store, run_id).followers  # run_id: node 0 (bench_run)
    stop = abort.set if abort is not None else (lambda: None)
    with serving_endpoint(run_id) as (base, run, ident), contextlib.ExitStack() as stack:
        watched = [run, *followers]  # a group: node 0 serves, every node must stay up
        monitors = [
            stack.enter_context(
                RunMonitor(r, transport_for_run(r), on_dead=stop, suspect=failed, base_url=base)
                if i == 0  # node 0 serves HTTP: only its /health says anything
                else RunMonitor(r, transport_for_run(r), on_dead=stop)
            )
            for i, r in enumerate(watched)
        ]
        yield Target(base.rstrip("/"), monitors, ident.to_dict())


def flush_cache(base: str) -> dict[str, Any]:
    from glmserve.bench.gsp_bench import flush_cache as flush

    return flush(base)


def run_bench(
    settings: BenchSettings,
    run_id: str | None,
    gates: Gates,
    progress: Progress,
    store_result: bool = True,
    labels: dict[str, str] | None = None,
    probe: Any = None,
    validated: bool = False,
) -> BenchOutcome:
    """Measure, assemble, evaluate gates and store; Ctrl-C yields a partial, marked result.

    ``probe`` (a ``bench.probe.ProbeSpec``): after the levels, the probe set is sent and, with
    a reference, judged (``WRONG_OUTPUT`` fails the ``output-agreement`` gate).

    Telemetry (``bench.telemetry``): ``/metrics`` every ``settings.metrics_interval`` s (0:
    off) and, with ``settings.gpu_telemetry``, one ``nvidia-smi`` loop on the server's host
    for the whole bench."""
    if not validated:  # BenchOptions.plan() validated the CLI's settings already
        validate_settings(settings, gates)
    # From here on ``settings`` is the running bench; the caller's value is never changed.
    settings = RunningBench.start(resolve_inputs(settings))
    if run_id and settings.base_url:
        # The result would be filed under the run (its profile, argv, GPUs) while measured
        # on whatever answers the URL, unchecked: a speedup of one server over itself.
        raise ConfigError(
            f"give a RUN id or --url, not both (run {run_id} is benched on its own server, "
            "found and verified from the store)"
        )
    run_id, group = bench_run(run_id)
    meta = run_metadata(run_id)
    if group is not None:
        group["nodes"][0]["gpus"] = meta.get("gpus")
        meta["group"] = group
    started = time.time()
    levels: list[dict[str, Any]] = []
    stopped: str | None = None
    interrupted = False
    server: dict[str, Any] = {}
    telemetry_notes: list[str] = []
    # SIGTERM (a CI timeout, `kill`) is Ctrl-C here: workers stopped, partial result kept.
    # Without it the bench died at once with 143, its worker processes orphaned and still
    # sending load, nothing stored (an audit).
    with (
        sigterm_as_interrupt(),
        endpoint(run_id, settings.base_url or None, settings.abort, settings.failed) as target,
        SilenceWatch(progress, settings.failed) as watch,
    ):
        settings.base_url = target.base
        if target.identity is not None:
            meta["identity"] = target.identity
        try:
            info, info_problem = probe_server_noted(target.base)
        except TransportError:
            # /server_info hangs when a scheduler is dead; /health then says 503 (exit 3,
            # a crash), where "cannot reach server" (exit 5) would send the user to the network
            verdict = target.monitors[0].check_health(target.base) if target.monitors else None
            if verdict is not None:
                raise verdict.error() from None
            raise
        server = server_summary(info)
        if info_problem is not None:  # a broken answer, not a missing one: noted, measured
            server["info_problem"] = info_problem
            telemetry_notes.append(info_problem)
        server.update(simulator_speed(target.base))
        model = settings.model or (
            resolve_model(target.base) if settings.api != "native" else "default"
        )
        settings.model = model
        requests = prepare_requests(settings, model)
        gpu = _start_gpu(run_id, target.base, telemetry_notes) if settings.gpu_telemetry else None
        try:
            run_warmup(settings, requests, watch)
            for c, rate in level_plan(settings, levels):
                run = LevelRun(concurrency=c, workers=settings.workers_for(c, rate), rate=rate)
                view = ServerView(run_id, target.base).start()  # bench.contention
                tel = LevelTelemetry(target.base, settings.metrics_interval, gpu)
                flushed = flush_cache(target.base) if settings.flush_cache else {}
                try:
                    with tel:
                        run_level(settings, c, requests, watch, run)
                finally:
                    levels.append(
                        summarize_level(
                            run.records,
                            c,
                            run.workers,
                            run.server,
                            run.stopped,
                            settings=settings,
                            rate=rate,
                            not_run=run.not_run,
                        )
                    )
                    tel.attach(levels[-1])
                    levels[-1].update(flushed)
                    judge_contention(view.stop(), levels[-1])
                if run.stopped or any(not r.ok for r in run.records):
                    verdict = _server_verdict(target)
                    if verdict is not None:
                        stopped = f"server {verdict.state}: {verdict.reason}"
                        break
                if run.stopped:
                    stopped = run.stopped
                    break
        except KeyboardInterrupt:
            interrupted = True
            stopped = "interrupted (Ctrl-C or SIGTERM)"
            if not levels:  # the warmup's requests are discarded by design
                stopped = "interrupted during the warmup (Ctrl-C or SIGTERM): nothing measured"
        except TransportError as exc:  # the warmup found no server: a dead run says why
            verdict = _server_verdict(target)
            if verdict is None:
                raise
            raise verdict.error() from exc
        finally:
            if gpu is not None:
                gpu.stop()  # by its recorded process group, with the bench
        verdict = next((m.verdict for m in target.monitors if m.verdict), None)  # seen so far
        probe_doc = None
        if probe is not None and not interrupted and not stopped:
            from glmserve.bench.probe import probe_step

            probe_doc = probe_step(target.base, probe, settings.model, settings.api)
    meta.update(
        url=settings.base_url,
        started_at=started,
        finished_at=time.time(),
        glmserve_version=__version__,
        git_sha=git_sha(),
        client_host=platform.node(),
        python=platform.python_version(),
        argv=meta.get("argv"),
        bench_argv=sys.argv[1:],
        sglang_version=server.get("version") or meta.get("sglang_version"),
    )
    meta.update(comparable_meta(meta, server, labels))
    res = build_result(settings.mode, levels, settings.to_dict(), server, meta, stopped)
    if settings.dataset_rows is not None and settings.dataset_rows < settings.prompts_needed():
        res.notes.append(
            f"the dataset gave {settings.dataset_rows} distinct prompts for "
            f"{settings.prompts_needed()} requests: they repeat, and a real server's prefix "
            f"cache may serve a repeat faster (bench_serving sends only {settings.dataset_rows})"
        )
    res.notes.extend(contention_notes(levels))
    res.notes.extend(metrics_notes(levels))
    res.notes.extend(telemetry_notes)
    for lv in levels:
        if lv.get("cache_flushed") is False:  # the level did not start cold: say why
            res.notes.append(f"--flush-cache: not flushed before level {lv['concurrency']} "
                             f"({lv.get('cache_flush_error')})")  # fmt: skip
    if settings.rate_sweep:
        res.sweep = saturation(levels)
    res.gates = evaluate_gates(
        res, gates.min_decode_tok_s, gates.max_ttft_ms, gates.min_output_tok_s
    )
    if probe_doc is not None:
        from glmserve.bench.probe import probe_gate

        res.probe = probe_doc
        if (g := probe_gate(probe_doc)) is not None:
            res.gates.append(g)
    result_id, store_error = None, None
    if store_result:
        from glmserve.errors import StoreError
        from glmserve.store import RunStore

        try:  # a store that cannot take it must not lose the measurement: the CLI keeps it
            with RunStore.open() as store:
                result_id = store.add_bench_result(run_id, res.to_dict(), meta)
        except StoreError as exc:
            store_error = str(exc)
    failure = None if interrupted else _failure(res, verdict)
    return BenchOutcome(res, result_id, interrupted, store_error, failure)


def _start_gpu(run_id: str | None, base: str, notes: list[str]) -> Any:
    """The bench's ``nvidia-smi`` loop on the server's host, or None with a note saying why
    (no nvidia-smi there, an unknown host): never an error."""
    from glmserve.bench.gpu_telemetry import GpuSampler
    from glmserve.bench.telemetry import gpu_transport

    try:
        transport, why = gpu_transport(run_id, base)
    except GlmserveError as exc:
        transport, why = None, f"no GPU telemetry: {exc}"
    if transport is None:
        notes.append(why or "no GPU telemetry")
        return None
    sampler = GpuSampler(transport).start()
    if sampler.pid is None:
        notes.append(sampler.note or "no GPU telemetry")
        return None
    return sampler


def _server_verdict(target: Target) -> Verdict | None:
    """After failed requests: is the run's server gone? Polls for up to two seconds, since a
    crash's last lines and the exit land a moment after the connections drop."""
    verdict = target.verdict(settle_s=2.0)
    if verdict is None and target.monitors:  # processes up: is the server healthy?
        verdict = target.monitors[0].check_health(target.base)
    return verdict


def _failure(res: BenchResult, verdict: Verdict | None) -> GlmserveError | None:
    """The error a finished (stored) bench still exits with: the server died (3, diagnosed
    from its log), went unreachable (5), or answered without one request succeeding (5)."""
    if verdict is not None:
        return verdict.error()
    if res.stopped and res.stopped.startswith("server unreachable"):
        return TransportError(res.stopped)
    requests = sum(int(lv.get("requests") or 0) for lv in res.levels)
    completed = sum(int(lv.get("completed") or 0) for lv in res.levels)
    first = next((e for lv in res.levels for e in lv.get("error_samples") or []), "?")
    if requests and not completed:
        return NoRequestSucceeded(
            f"no request succeeded ({requests} of {requests} failed at {res.meta.get('url')}); "
            f"first error: {first}"
        )
    if not res.complete:
        return BenchIncomplete(f"incomplete result: {res.stopped}; first error: {first}")
    return None
