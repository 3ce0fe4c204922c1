"""The callbacks a bench front end implements, in a module of their own.

Why apart from ``runner``: the CLI's progress views subclass ``Progress`` and are imported on
every ``glmserve`` start; the runner pulls in httpx, asyncio and the transports, which only a
bench needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from glmserve.bench.runner import LevelRun


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
