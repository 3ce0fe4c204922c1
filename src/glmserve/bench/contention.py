"""The server's own counters as a cross-check of each level: was this bench alone on it?

While a level runs, the server's view is read beside the client's:

* a run's server log (``bench RUN``): SGLang's decode-batch lines, ``Decode batch, #running-req:
  N, ... gen throughput (token/s): X`` (sglang 0.5.9 ``scheduler_metrics_mixin.py:366``, every
  ``--decode-log-interval`` decode steps), read from the byte offset the level started at;
* ``--url``: the ``sglang:num_running_reqs`` gauge of ``/metrics`` (only with
  ``--enable-metrics``), sampled twice a second.

More requests running on the server than the bench ever had in flight means another client's
load shared the server: the level is marked ``contended`` (its figures are not this config's
alone; ``compare`` and the report give it no speedup). A server-reported generation
throughput that differs from the client's by more than ``THROUGHPUT_TOLERANCE`` is a warning in
the result (the first decode line or sample of a level is left out: its window began before
the level, and it may still count the previous level's streams being aborted).
"""

from __future__ import annotations

import re
import statistics
import threading
from typing import Any

import httpx

DECODE_RE = re.compile(
    r"Decode batch.*?#running-req: (\d+).*?gen throughput \(token/s\): ([0-9.]+)"
)
THROUGHPUT_TOLERANCE = 0.25  # |server / client - 1| beyond this: a warning
SAMPLE_S = 0.5


def parse_decode_lines(text: str) -> list[tuple[int, float]]:
    """(#running-req, gen throughput) of every decode-batch line in ``text``."""
    return [(int(m.group(1)), float(m.group(2))) for m in DECODE_RE.finditer(text)]


class ServerView:
    """Reads the server's counters over one level (``start`` before, ``stop`` after)."""

    def __init__(self, run_id: str | None, base_url: str) -> None:
        self.run_id = run_id
        self.base_url = base_url
        self.t: Any = None
        self.log_path: str | None = None
        self.offset: int | None = None
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ServerView:
        from glmserve.errors import GlmserveError

        try:
            if self.run_id:
                from glmserve.remote.process import log_size, transport_for_run
                from glmserve.store import RunStore

                with RunStore.open() as store:
                    run = store.get_run(self.run_id)
                self.t, self.log_path = transport_for_run(run), run.log_path
                self.offset = log_size(self.t, run.log_path)
            else:
                self._thread = threading.Thread(target=self._sample, daemon=True)
                self._thread.start()
        except GlmserveError:
            self.offset = None  # no view of the server: the level is not judged
        return self

    def _sample(self) -> None:
        from glmserve.bench.server_probe import parse_prometheus

        with httpx.Client(timeout=2.0) as c:
            while True:
                try:
                    r = c.get(self.base_url + "/metrics")
                except httpx.HTTPError:
                    r = None
                if r is None or r.status_code != 200:
                    return  # no metrics endpoint (no --enable-metrics): nothing to read
                v = parse_prometheus(r.text).get("sglang:num_running_reqs")
                if v is not None:
                    self.samples.append(int(v))
                if self._stop.wait(SAMPLE_S):
                    return

    def stop(self) -> dict[str, Any]:
        """What the server said during the level: ``{source, running, gen_tok_s}``."""
        from glmserve.errors import GlmserveError

        self._stop.set()
        if self._thread is not None:
            self._thread.join(3)
            # the first sample may still count the previous level's streams being aborted
            return {"source": "metrics", "running": self.samples[1:], "gen_tok_s": []}
        if self.offset is None or self.t is None or self.log_path is None:
            return {}
        from glmserve.remote.process import read_log_bytes

        try:
            data, _ = read_log_bytes(self.t, self.log_path, self.offset)
        except GlmserveError:
            return {}
        lines = parse_decode_lines(data.decode("utf-8", "replace"))
        # the first line's window began before the level (and may count the previous level's
        # streams still being aborted): both figures are read from the lines after it
        return {
            "source": "log",
            "running": [n for n, _ in lines[1:]],
            "gen_tok_s": [x for _, x in lines[1:]],
        }


def judge(view: dict[str, Any], level: dict[str, Any]) -> None:
    """Annotate ``level`` in place: ``server_view``, ``contended`` (reason) and warnings."""
    if not view:
        return
    running = view.get("running") or []
    client_max = level.get("max_concurrency_seen")
    if client_max is None:
        client_max = level.get("concurrency")
    summary: dict[str, Any] = {
        "source": view.get("source"),
        "server_max_running": max(running) if running else None,
        "client_max_in_flight": client_max,
        "server_gen_tok_s": statistics.median(view["gen_tok_s"]) if view.get("gen_tok_s") else None,
    }
    level["server_view"] = summary
    if running and client_max is not None and max(running) > int(client_max):
        level["contended"] = (
            f"contended: the server ran {max(running)} requests while this bench had at most "
            f"{client_max} in flight (another client's load; server {view.get('source')})"
        )
    server_tok, client_tok = summary["server_gen_tok_s"], level.get("output_tok_s")
    if server_tok and client_tok:
        ratio = server_tok / client_tok
        summary["server_over_client"] = ratio
        if abs(ratio - 1.0) > THROUGHPUT_TOLERANCE:
            level.setdefault("warnings", []).append(
                f"the server reported {server_tok:.1f} gen tok/s, the client measured "
                f"{client_tok:.1f} output tok/s ({ratio:.2f}x, beyond ±{THROUGHPUT_TOLERANCE:.0%})"
            )


def notes(levels: list[dict[str, Any]]) -> list[str]:
    """The result's notes about contention and disagreeing counters."""
    out = []
    for lv in levels:
        c = lv.get("concurrency")
        if lv.get("contended"):
            out.append(f"c={c}: {lv['contended']}: not comparable")
        for w in lv.get("warnings") or []:
            out.append(f"c={c}: warning: {w}")
    return out
