"""SIGTERM taken as Ctrl-C while a long command runs.

A sweep or a tune killed by a CI timeout or ``kill`` must do what Ctrl-C does: stop the
servers it launched, save its state and exit 130, so ``--resume`` continues. Both therefore
run under ``sigterm_as_interrupt()``, which turns SIGTERM into ``KeyboardInterrupt`` in this
process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Raise ``KeyboardInterrupt`` on SIGTERM in the body; the old handler comes back after.

    Forked children (bench workers) inherit the handler; in them it falls back to the default
    action so ``Process.terminate()`` still ends them at once. Off the main thread (where
    Python cannot set handlers) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()

    def on_term(signum: int, frame: Any) -> None:
        if os.getpid() != owner:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
