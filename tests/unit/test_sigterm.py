"""sigterm: SIGTERM raises KeyboardInterrupt inside the block, only in the process that set it."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from glmserve.sigterm import sigterm_as_interrupt


def test_sigterm_in_the_block_is_a_keyboard_interrupt_and_the_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_forked_child_dies_of_sigterm_as_usual():
    ready_r, ready_w = os.pipe()
    with sigterm_as_interrupt():
        pid = os.fork()
        if pid == 0:  # the child: the inherited handler must give way to the default action
            os.write(ready_w, b"x")  # a signal sent before this could be lost in the fork
            time.sleep(30)
            os._exit(0)  # reached only if SIGTERM did not end the process
        os.read(ready_r, 1)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if done[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the child outlived SIGTERM")
    os.close(ready_r)
    os.close(ready_w)
    assert os.WIFSIGNALED(done[1]) and os.WTERMSIG(done[1]) == signal.SIGTERM


def test_off_the_main_thread_it_changes_nothing():
    seen = []

    def body() -> None:
        with sigterm_as_interrupt():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    th = threading.Thread(target=body)
    th.start()
    th.join()
    assert seen == [before]
