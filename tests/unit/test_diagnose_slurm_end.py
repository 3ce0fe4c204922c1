"""slurmstepd's "*** JOB n ON node CANCELLED AT t [DUE TO ...] ***" lines in a Slurm job's
server.log: the scheduler killed the server, which is neither a rejected flag (the ``prog:
error:`` argparse rule used to read ``slurmstepd-node1: error:`` as BAD_ARGS) nor a crash.
Wording from Slurm src/slurmd/slurmstepd/req.c (_handle_signal_container)."""

from __future__ import annotations

import pytest

from glmserve.diagnose import State, diagnose_text

_HEAD = (
    "[2026-12-04 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1)\n"
    "[2026-12-04 10:00:01] Load weight begin. avail mem=70.00 GB\n"
    "[2026-12-04 10:00:09] The server is fired up and ready to roll!\n"
)
_AT = "2026-12-04T10:05:00"


@pytest.mark.parametrize(
    ("tail", "says"),
    [
        ("DUE TO TIME LIMIT ***", "TIME_LIMIT"),
        ("DUE TO PREEMPTION ***", "PREEMPTED"),
        ("DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***", "NODE_FAIL"),
        ("***", "scancel"),
    ],
)
def test_slurmstepd_cancel_is_exited_not_bad_args(tail: str, says: str) -> None:
    line = f"slurmstepd-node1: error: *** JOB 42 ON node1 CANCELLED AT {_AT} {tail}"
    d = diagnose_text(_HEAD + line + "\n")
    assert d.state is State.EXITED
    assert d.category is None
    assert d.line == 4 and d.root_cause == line
    assert says in (d.hint or "") and "job 42" in (d.hint or "")


def test_cancel_during_startup_and_old_wording() -> None:
    """Before READY too, and Slurm <= 17's wording without "ON node" (a STEP of srun)."""
    text = (
        "[2026-12-04 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1)\n"
        "[2026-12-04 10:00:01] Load weight begin. avail mem=70.00 GB\n"
        f"slurmstepd: error: *** STEP 7.0 CANCELLED AT {_AT} DUE TO TIME LIMIT ***\n"
    )
    d = diagnose_text(text)
    assert d.state is State.EXITED and d.phase is State.LOADING_WEIGHTS
    assert "TIME_LIMIT" in (d.hint or "") and "step 7.0" in (d.hint or "")


def test_real_crash_before_the_cancel_stays_the_root_cause() -> None:
    text = (
        _HEAD.replace("The server is fired up and ready to roll!", "Capture cuda graph begin.")
        + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        + f"slurmstepd-node1: error: *** JOB 42 ON node1 CANCELLED AT {_AT} ***\n"
    )
    d = diagnose_text(text)
    assert d.state is State.CRASHED and d.category is not None
    assert d.category.value == "OOM"


def test_the_process_gone_keeps_the_schedulers_reason():
    """A watcher that then sees the process gone (``exited``) keeps slurmstepd's reason
    instead of "ended without an error line the log recognises"."""
    line = f"slurmstepd-node1: error: *** JOB 42 ON node1 CANCELLED AT {_AT} DUE TO PREEMPTION ***"
    d = diagnose_text(_HEAD + line + "\n").exited(None)
    assert d.state is State.EXITED and d.root_cause == line and "PREEMPTED" in (d.hint or "")
