"""Record a torch-profiler trace on a live run (``glmserve profile RUN``) and analyse it.

SGLang's ``/start_profile`` with ``num_steps`` records that many forward steps and stops by
itself, writing ``{id}-TP-{r}.trace.json.gz`` per rank into ``output_dir`` on the server's
host. Steps only happen under load, so while it records, the bench package's closed loop keeps
``--load``'s concurrency of requests in flight (short prompts, ``ignore_eos``: decode steps).
The files are then fetched over the run's transport and analysed like any others.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from glmserve.errors import ConfigError
from glmserve.profiling.analysis import PROFILED_EVENT, analyze_traces, summarize_analysis
from glmserve.profiling.results import TraceAnalysis

if TYPE_CHECKING:
    from glmserve.bench.metrics import StreamRecord

PROMPT_TOKENS = 64  # a short prompt: the load is there for its decode steps


def parse_load(load: str) -> tuple[str, int]:
    """``decode`` -> (decode, 1); ``concurrency:C`` -> (concurrency, C)."""
    if load == "decode":
        return "decode", 1
    kind, _, n = load.partition(":")
    if kind == "concurrency" and n.isdigit() and int(n) > 0:
        return "concurrency", int(n)
    raise ConfigError(f"--load: expected decode or concurrency:C (C > 0), got {load!r}")


def _start_load(
    base_url: str, concurrency: int, steps: int, output_len: int, stop: threading.Event
) -> list[StreamRecord]:
    """Keep ``concurrency`` native /generate requests in flight until ``stop`` is set, on a
    thread; the records (errors among them) fill the returned list as requests end.

    Every request SGLang can record has its own prompt: a slot sends one request per
    ``output_len`` decode steps, so ``steps`` steps take ``2 + steps // output_len`` a slot
    at most (the loop cycles through them after that, when recording is over).
    """
    from glmserve.bench.runner import keep_in_flight
    from glmserve.bench.workload import build_request, make_prompts

    count = concurrency * (2 + steps // max(output_len, 1))
    prompts = make_prompts(count, PROMPT_TOKENS, seed=0)
    requests = [build_request("native", p, output_len, model="") for p in prompts]
    records: list[StreamRecord] = []
    load = threading.Thread(
        target=keep_in_flight,
        args=(base_url, requests, concurrency, stop, records),
        kwargs={"stall_timeout": 60.0},
        daemon=True,
    )
    load.start()
    return records


def capture_profile(
    run_id: str,
    steps: int = 5,
    load: str = "decode",
    timeout_s: float = 180.0,
    output_len: int = 64,
    say: Any = None,
) -> TraceAnalysis:
    """Record ``steps`` profiled steps on a live run, fetch the traces, analyze them.

    POSTs ``/start_profile`` with ``output_dir`` inside the run dir and ``num_steps`` (SGLang
    stops by itself after that many forward steps and writes ``{id}-TP-{r}.trace.json.gz``),
    drives the load meanwhile, polls the host until every rank's file is there and no longer
    growing, copies them to ``$GLMSERVE_HOME/profiles/<run>/<stamp>/`` and parses them.
    """
    import time

    import httpx

    from glmserve.deploy.identity import RunMonitor, serving_endpoint
    from glmserve.errors import ServerNotReady, TransportError
    from glmserve.paths import glmserve_home
    from glmserve.remote.run_host import transport_for_run
    from glmserve.remote.runlog import read_log_bytes
    from glmserve.remote.transport import shell_path
    from glmserve.store import RunStore

    say = say or (lambda _m: None)
    if steps <= 0:
        raise ConfigError(f"--steps: must be > 0, got {steps}")
    _, concurrency = parse_load(load)
    with RunStore.open() as store:
        run = store.get_run(run_id)
    t = transport_for_run(run)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    remote_dir = f"{run.run_dir}/profile-{stamp}"
    t.run(f"mkdir -p -- {shell_path(remote_dir)}", check=True, what="create profile dir")
    want = max(int(run.tp_size or 1), 1)
    stop = threading.Event()
    # the run's own live server, watched meanwhile: a crash ends the wait with its diagnosis
    with serving_endpoint(run.run_id) as (base, run, _ident), RunMonitor(run, t) as monitor:
        body = {
            "output_dir": remote_dir,
            "num_steps": steps,
            "activities": ["CPU", "GPU"],
            "record_shapes": True,
        }
        try:
            r = httpx.post(f"{base}/start_profile", json=body, timeout=30)
        except httpx.HTTPError as exc:
            raise TransportError(f"run {run.run_id}: POST /start_profile: {exc}") from exc
        if r.status_code != 200:
            raise TransportError(
                f"run {run.run_id}: /start_profile answered {r.status_code}: {r.text.strip()[:200]}"
            )
        say(f"profiling {steps} steps on {want} rank(s) under {load} load")
        records = _start_load(base, concurrency, steps, output_len, stop)
        try:
            gone = lambda: monitor.verdict is not None  # noqa: E731
            files = _wait_for_traces(t, remote_dir, want, time.monotonic() + timeout_s, gone)
            if monitor.verdict is not None:
                raise monitor.verdict.error(run.run_id)
            if len(files) < want:
                httpx.post(f"{base}/stop_profile", timeout=30)
                files = _wait_for_traces(t, remote_dir, want, time.monotonic() + 30)
        finally:
            stop.set()
    if not files:
        errors = [r.error for r in records if r.error]
        raise ServerNotReady(
            f"run {run.run_id}: no trace files in {remote_dir} after {timeout_s:.0f}s"
            + (f" (load errors: {errors[-1]})" if errors else "")
        )
    local = glmserve_home() / "profiles" / run.run_id / stamp
    local.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in files:
        data, _ = read_log_bytes(t, f"{remote_dir}/{name}")
        (local / name).write_bytes(data)
        paths.append(local / name)
    say(f"fetched {len(paths)} trace file(s) to {local}")
    analysis = analyze_traces(paths, steps_hint=steps)
    summary = {**summarize_analysis(analysis), "traces": str(local), "load": load}
    with RunStore.open() as store:  # `glmserve report RUN` shows these findings
        store.add_event(run.run_id, PROFILED_EVENT, None, summary)
    return analysis


def _wait_for_traces(
    t: Any, remote_dir: str, want: int, deadline: float, gone: Any = lambda: False
) -> list[str]:
    """Trace file names once ``want`` exist and their sizes held still for one poll (what
    there is as soon as ``gone()``: the server died and will write no more)."""
    import time

    from glmserve.remote.transport import shell_path

    last: dict[str, int] = {}
    while True:
        res = t.run(
            f"cd {shell_path(remote_dir)} 2>/dev/null && "
            'for f in *.trace.json.gz; do [ -e "$f" ] && stat -c \'%s %n\' -- "$f"; done; true'
        )
        sizes = {}
        for line in res.stdout.splitlines():
            size, _, name = line.partition(" ")
            if size.isdigit() and name:
                sizes[name] = int(size)
        if len(sizes) >= want and sizes == last:
            return sorted(sizes)
        if time.monotonic() > deadline or gone():
            return sorted(sizes) if sizes == last else []
        last = sizes
        time.sleep(0.5)
