"""The callbacks a bench front end implements, in a module of their own.

Why apart from ``runner``: the CLI's progress views subclass ``Progress`` and are imported on
every ``glmserve`` start; the runner pulls in httpx, asyncio and the transports, which only a
bench needs.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from glmserve.bench.settings import LevelRun


class Progress:
    """Callbacks a front end implements; the default does nothing."""

    def level_started(
        self, concurrency: int, total: int | None, duration: float | None, rate: float | None = None
    ) -> None:
        pass

    def update(self, done: int, errors: int, tokens: int, elapsed: float) -> None:
        pass

    def level_finished(self, run: LevelRun) -> None:
        pass

    def warmup_started(self, requests: int) -> None:
        """The warmup's requests went out: a long one (a 1000-token decode) printed nothing
        for ~18 s in the simulator, and a new user took the bench for hung."""


class SilenceWatch(Progress):
    """Passes every callback on to ``inner`` and notices a level gone silent: requests in
    flight, no token for ``silence_s``. Then it sets ``suspect``, which makes the server's
    monitor ask ``/health``, as a failed request does. Without it a worker that died
    mid-bench (SGLang does not notice; only ``/health`` turns 503) left every stream waiting
    out ``--stall-timeout`` (120 s by default) before anything was asked (an audit)."""

    def __init__(self, inner: Progress, suspect: threading.Event, silence_s: float = 10.0) -> None:
        self.inner, self.suspect, self.silence_s = inner, suspect, silence_s
        self._active = False
        self._tokens = -1
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> SilenceWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            if self._active and time.monotonic() - self._last >= self.silence_s:
                self.suspect.set()
                self._last = time.monotonic()  # ask again only after another silence

    def level_started(
        self, concurrency: int, total: int | None, duration: float | None, rate: float | None = None
    ) -> None:
        self._active, self._tokens, self._last = True, -1, time.monotonic()
        self.inner.level_started(concurrency, total, duration, rate)

    def update(self, done: int, errors: int, tokens: int, elapsed: float) -> None:
        if tokens + done != self._tokens:  # a token or a finished request: not silent
            self._tokens, self._last = tokens + done, time.monotonic()
        self.inner.update(done, errors, tokens, elapsed)

    def level_finished(self, run: LevelRun) -> None:
        self._active = False
        self.inner.level_finished(run)

    def warmup_started(self, requests: int) -> None:
        self.inner.warmup_started(requests)

    def quiet_phase(self, active: bool) -> None:
        """Requests in flight outside any level (the warmup): watched for silence like a
        level, shown nowhere. A worker that died before the first level left the warmup
        waiting out ``--stall-timeout`` (2 min 15 s in an audit) with nothing asked."""
        self._active, self._tokens, self._last = active, -1, time.monotonic()

    def tick(self, count: int) -> None:
        """Tokens plus finished requests so far in a quiet phase: a change is not silence."""
        if count != self._tokens:
            self._tokens, self._last = count, time.monotonic()
