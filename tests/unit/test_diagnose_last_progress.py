"""Offline ``diagnose`` counted a line that only repeats an earlier one (another rank's copy)
and HTTP access lines as its "last progress", where the launch watcher's stall rules do not
(docs/known-limits.md). Both now use :mod:`glmserve.diagnose.progress`."""

from __future__ import annotations

from glmserve.diagnose import State, diagnose_text
from glmserve.diagnose.progress import NewLines, moves_on

INIT = "[2026-12-05 10:00:0{r} TP{r}] Init torch distributed begin."


def test_another_ranks_copy_of_a_progress_line_is_not_new_progress() -> None:
    """Eight ranks log "Init torch distributed begin." and then nothing: the start-up last moved
    at the first copy (the watcher's hint names line 1), not at the eighth."""
    d = diagnose_text("\n".join(INIT.format(r=r) for r in range(8)))
    assert d.phase is State.STARTING
    assert d.last_progress_line == 1
    assert d.last_progress == "Init torch distributed begin."


def test_model_info_polls_are_not_progress_but_the_phase_change_is() -> None:
    """SGLang's launcher polls /get_model_info until the server answers; each poll is an HTTP
    access line (the watcher never counts those). Uvicorn's line moved the phase to WARMUP and
    is the last progress; the polls after it are not."""
    poll = (
        '[2026-12-05 10:00:1{s}] INFO:     127.0.0.1:4{s}312 - "GET /get_model_info HTTP/1.1"'
        " 200 OK"
    )
    lines = [
        "[2026-12-05 10:00:00 TP0] Capture cuda graph end. Time elapsed: 3.10 s",
        "[2026-12-05 10:00:01] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C"
        " to quit)",
    ] + [poll.format(s=s) for s in range(5)]
    d = diagnose_text("\n".join(lines))
    assert d.phase is State.WARMUP
    assert d.last_progress_line == 2


def test_repeated_prefill_lines_before_ready_do_not_move_last_progress() -> None:
    line = (
        "[2026-12-05 10:00:0{s} TP0] Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0,"
        " token usage: 0.00, #running-req: 0, #queue-req: 0"
    )
    lines = ["[2026-12-05 10:00:00] INFO:     Application startup complete."]
    lines += [line.format(s=s) for s in range(1, 7)]
    d = diagnose_text("\n".join(lines))
    assert d.last_progress_line == 2


def test_after_ready_serving_lines_still_count_as_progress() -> None:
    decode = (
        "[2026-12-05 10:01:0{s} TP0] Decode batch, #running-req: 1, #token: 0, token usage: 0.00,"
        " gen throughput (token/s): 0.00, #queue-req: 0"
    )
    lines = ["[2026-12-05 10:00:59] The server is fired up and ready to roll!"]
    lines += [decode.format(s=s) for s in range(4)]
    d = diagnose_text("\n".join(lines))
    assert d.state is State.READY and d.last_progress_line == 5


def test_the_watcher_and_diagnose_share_one_progress_rule() -> None:
    from glmserve.deploy import progress as deploy_progress

    assert deploy_progress.moves_on is moves_on and deploy_progress.NewLines is NewLines
    seen = NewLines()
    assert moves_on(INIT.format(r=0), seen)
    assert not moves_on(INIT.format(r=3), seen)  # the same line from another rank
    chatter = (
        "[W1204 21:00:01.1 socket.cpp:752] [c10d] The client socket has failed to connect to "
        "[localhost]:29500 (errno: 111 - Connection refused)."
    )
    assert not moves_on(chatter, NewLines())
    assert not moves_on('127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK', NewLines())
