"""Output that is only a traceback through SGLang's code, reports cut before their exception
line, and NCCL WARN chains before a death (issue 20, "Diagnosis that generalises").

Shapes from public threads (tests/data/logs_2026_b has the excerpts with their sources); the
frames below are SGLang 0.5.9's start-up path (srt/model_executor/model_runner.py).
"""

from __future__ import annotations

import pytest

from glmserve.diagnose import Category, State, diagnose_text

HEAD = [
    "Traceback (most recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2733, in '
    "run_scheduler_process",
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank)",
    '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 276, '
    "in initialize",
]


def _frame(func: str, path: str = "sglang/srt/model_executor/model_runner.py") -> str:
    return f'  File "/usr/local/lib/python3.12/dist-packages/{path}", line 10, in {func}'


def test_a_bare_traceback_through_sglang_is_a_crash_not_a_non_log() -> None:
    d = diagnose_text("\n".join([*HEAD, "    self.init_cu"]) + "\n")
    assert d.sglang_log  # `diagnose` used to refuse it: "not an SGLang server log"
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.CRASH, 1)
    assert d.root_cause == "Traceback (most recent call last):"


def test_frames_without_their_traceback_header_are_a_crash_too() -> None:
    log = "\n".join(HEAD[1:]) + "\n"
    d = diagnose_text(log)
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.CRASH, 1)


@pytest.mark.parametrize(
    ("frames", "category", "stage"),
    [
        (["init_torch_distributed"], Category.NCCL, "distributed init"),
        (["load_model", "load_weights_and_postprocess"], Category.WEIGHT_LOADING, "model loading"),
        (["init_memory_pool"], Category.OOM, "KV cache pool"),
        (["init_device_graphs", "capture"], Category.CRASH, "CUDA graph capture"),
        # the outermost stage decides: a capture that reaches an all-reduce is still capture
        (["init_device_graphs", "initialize_model_parallel"], Category.CRASH, "CUDA graph"),
    ],
)
def test_a_report_cut_before_its_exception_line_is_named_by_its_stage_frames(
    frames: list[str], category: Category, stage: str
) -> None:
    lines = ["[2026-03-01 10:00:00 TP0] Scheduler hit an exception: " + HEAD[0], *HEAD[1:]]
    lines += [_frame(f) for f in frames]
    d = diagnose_text("\n".join(lines) + "\n")
    assert (d.state, d.category, d.line) == (State.CRASHED, category, 1)
    assert stage in d.hint and "without its exception line" in d.hint


def test_the_exception_line_when_present_still_decides() -> None:
    lines = [*HEAD, _frame("load_model"), "KeyError: 'model.layers.3.mlp.experts.w2_weight_scale'"]
    d = diagnose_text("\n".join(lines) + "\n")
    assert (d.category, d.line) == (Category.WEIGHT_LOADING, len(lines))
    lines = [*HEAD, _frame("load_model"), "torch.OutOfMemoryError: CUDA out of memory."]
    assert diagnose_text("\n".join(lines) + "\n").category is Category.OOM


def test_a_traceback_of_someone_elses_code_is_not_an_sglang_report() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/app/train.py", line 12, in <module>\n'
        "    main()\n"
    )
    d = diagnose_text(log)
    assert d.state is State.STARTING and not d.sglang_log


def test_after_ready_a_bare_sglang_traceback_alone_is_survived() -> None:
    ready = "[2026-03-01 10:00:00] The server is fired up and ready to roll!\n"
    d = diagnose_text(ready + "\n".join(HEAD) + "\n")
    assert d.state is State.READY


def test_a_later_ready_clears_a_bare_traceback_before_it() -> None:
    ready = "[2026-03-01 10:00:09] The server is fired up and ready to roll!\n"
    assert diagnose_text("\n".join(HEAD) + "\n" + ready).state is State.READY


NCCL_CHAIN = (
    "[2026-03-01 10:00:00 TP0] Init torch distributed begin.\n"
    "node5:236:301 [2] misc/socket.cc:484 NCCL WARN socketPollConnect: Connect to "
    "10.0.0.4<56849> returned 113(No route to host) errno 115(Operation now in progress)\n"
    "node5:236:301 [2] NCCL INFO misc/socket.cc:564 -> 2\n"
    "node5:236:301 [2] NCCL INFO bootstrap.cc:137 -> 2\n"
)


def test_an_nccl_warn_chain_alone_is_a_warning_the_death_promotes() -> None:
    d = diagnose_text(NCCL_CHAIN)
    assert d.state is State.STARTING and d.warning is not None
    assert d.warning.category is Category.NCCL and d.warning.line == 2
    gone = d.exited(1)
    assert (gone.state, gone.category, gone.line) == (State.CRASHED, Category.NCCL, 2)


@pytest.mark.parametrize(
    "death",
    [
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "Fatal Python error: Aborted",
        "Segmentation fault (core dumped)",
        "[2026-03-01 10:00:05] Received sigquit from a child process. It usually means the child "
        "failed.",
    ],
)
def test_an_nccl_warn_chain_then_the_process_dying_is_an_nccl_crash(death: str) -> None:
    d = diagnose_text(NCCL_CHAIN + death + "\n")
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.NCCL, 2)


def test_torchs_store_timeout_behind_a_level_first_log_format_is_nccl() -> None:
    """sglang issue 9867: records as "date LEVEL pid [ DPn TPn EPn file:line] msg"."""
    p = "2025-08-28 21:19:34 ERROR 125765 [ DP10 TP10 EP10 scheduler.py:2655] "
    log = (
        p + ". This may indicate a possible application crash on rank 0 or a network set up "
        "issue.\n"
        + p
        + "Traceback (most recent call last):\n"
        + p
        + '  File "/x/sglang/python/sglang/srt/managers/scheduler.py", line 2612, in '
        "run_scheduler_process\n"
    )
    d = diagnose_text(log)
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.NCCL, 1)
    assert d.root_cause is not None and d.root_cause.startswith(". This may indicate")


# Two ranks' faulthandler dumps interleaved character by character, as sglang issue 38849
# posted them (GLM 5.3 segfaulting on MI300; tests/data/logs_2026_c has the excerpt).
INTERLEAVED = (
    "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py/sgl-workspace/sglang/python/"
    'sglang/srt/managers/scheduler.py  File ", line  in , line   File run_event_loop"""'
    '/sgl-workspace/sglang/python/sglang/srt/utils/nvtx_utils.py17631812"'
)


def test_interleaved_faulthandler_frames_of_sglang_are_a_crash() -> None:
    d = diagnose_text(INTERLEAVED + "\n, line 3933 in  in  pop_and_process\n")
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.CRASH, 1)


def test_interleaved_frames_after_ready_alone_are_survived() -> None:
    ready = "[2026-03-01 10:00:00] The server is fired up and ready to roll!"
    d = diagnose_text(ready + "\n" + INTERLEAVED + "\n")
    assert d.state is State.READY


def test_a_flattened_report_keeps_its_exception_line_category() -> None:
    """A paste that joins a report onto one line still names its error: the interleaved-frames
    reading applies only to a line no rule and no exception explains."""
    flat = (
        '[2026-03-01 10:00:00 TP0] Scheduler hit an exception: File "/x/sglang/srt/managers/'
        'scheduler.py", line 1, in run File "/x/sglang/srt/mem_cache/memory_pool.py", line 2, in '
        "init torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    )
    d = diagnose_text(flat + "\n")
    assert (d.state, d.category) == (State.CRASHED, Category.OOM)
