"""Rules for failure classes the 2024-2025 corpus did not cover (issue 10 #15): collective
watchdog failures in torch's newer wording, CUDA/HIP runtime errors, a negative profiled KV
budget, speculative flag constraints. Every line is a real log line, cited per constant; the
rules cite the SGLang / torch source that prints them (src/glmserve/diagnose.py).
"""

from __future__ import annotations

from glmserve.diagnose import Category, State, diagnose_lines, diagnose_text

# sgl-project/sglang#1693 (zeng-zc, 2024-10): torch's watchdog on a collective past its timeout.
WATCHDOG_TIMEOUT = (
    "[rank3]:[E1016 03:31:38.919469923 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=9141, OpType=_ALLGATHER_BASE, NumelIn=19008, "
    "NumelOut=152064, Timeout(ms)=600000) ran for 600020 milliseconds before timing out."
)
# sgl-project/sglang#3368 (CallmeZhangChenchen, 2025-02-07, 2 nodes): the second collective ever
# (the paste's wrap inside "NumelOut" is joined).
WATCHDOG_EARLY = (
    "[rank6]:[E207 01:29:36.730311765 ProcessGroupNCCL.cpp:616] [Rank 6] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600050 milliseconds before timing out."
)
# sgl-project/sglang#10216 (zhaotyer, 2025-09-09): torch 2.8's wording, the only watchdog line
# of that excerpt's rank.
WATCHDOG_FAILURE = (
    "[rank1]:[E909 08:45:30.126335825 ProcessGroupNCCL.cpp:2252] [PG ID 2 PG GUID 3 Rank 1]  "
    "failure detected by watchdog at work sequence id: 40231 PG status: last enqueued work: "
    "40267, last completed work: 40230"
)
# sgl-project/sglang#4584 (anapple-hub, 2025-03-19): the watchdog thread's exit names the error.
WATCHDOG_EXIT_IMA = (
    "[rank14]:[E319 05:16:21.789822241 ProcessGroupNCCL.cpp:1595] [PG ID 2 PG GUID 3 Rank 14] "
    "Process group watchdog thread terminated with exception: CUDA error: an illegal memory "
    "access was encountered"
)
# sgl-project/sglang#24011 (Jacob0226, 2026-04-29, MI35x): the error on the line after the exit.
WATCHDOG_EXIT_HIP = [
    "Process group watchdog thread terminated with exception:",
    "HIP error: operation not permitted on an event last recorded in a capturing stream",
]
# sgl-project/sglang#7691 (At1a8, 2025-07-02, ROCm, --mem-fraction-static 0.95): the weights
# leave less than the reserve, so the profiled token budget is negative.
NEGATIVE_BUDGET = [
    "[2025-07-02 07:41:58 DP0 TP0] Load weight end. type=DeepseekV3ForCausalLM, "
    "dtype=torch.bfloat16, avail mem=21.73 GB, mem usage=166.59 GB.",
    "[2025-07-02 07:41:59 DP0 TP0] max_total_tokens=131072 is larger than the profiled value "
    "-561981. Use the profiled value instead.",
    "[2025-07-02 07:41:59 DP7 TP7] max_total_tokens=131072 is larger than the profiled value "
    "-561981. Use the profiled value instead.",
]
# sgl-project/sglang#4895 (bebilli, 2025-03-29): a scheduler's report, its exception cut off.
SCHEDULER_REPORT = (
    "[2025-03-29 18:18:34 TP0] Scheduler hit an exception: Traceback (most recent call last):"
)
# sgl-project/sglang#36536 (Hanson-Wang-chn, 2026-08-26, sglang 0.5.18).
MULTI_LAYER_EAGLE = (
    "AssertionError: multi-layer EAGLE requires speculative_num_draft_tokens == "
    "speculative_num_steps + 1, got 8 and 5"
)


def test_a_collective_timeout_names_the_collective_and_its_timeout() -> None:
    d = diagnose_text(WATCHDOG_TIMEOUT)
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.NCCL, 1)
    assert "_ALLGATHER_BASE #9141" in d.hint and "600 s" in d.hint
    assert "another rank died or hung first" in d.hint and "--dist-timeout" in d.hint


def test_a_timeout_in_the_first_collectives_points_at_the_connection_between_ranks() -> None:
    d = diagnose_text(WATCHDOG_EARLY)
    assert (d.state, d.category) == (State.CRASHED, Category.NCCL)
    assert "never connected" in d.hint and "NCCL_SOCKET_IFNAME" in d.hint


def test_torch_28_watchdog_failure_line_is_a_collective_failure() -> None:
    d = diagnose_text(WATCHDOG_FAILURE)
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.NCCL, 1)
    assert "watchdog" in d.hint


def test_the_watchdog_exit_is_classified_by_the_error_it_carries() -> None:
    d = diagnose_text(WATCHDOG_EXIT_IMA)
    assert (d.state, d.category) == (State.CRASHED, Category.ILLEGAL_MEMORY_ACCESS)
    d = diagnose_lines(WATCHDOG_EXIT_HIP)
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.CRASH, 2)
    assert "HIP runtime error during CUDA graph capture" in d.hint
    assert "--disable-cuda-graph" in d.hint


def test_a_negative_profiled_budget_warns_with_the_mem_fraction_fix_while_loading() -> None:
    """No crash yet (the excerpt ends while the process lives: the fitted corpus's label), but
    the verdict carries the cause and the fix."""
    d = diagnose_lines(NEGATIVE_BUDGET)
    assert d.state is State.LOADING_WEIGHTS
    assert d.warning is not None and d.warning.category is Category.OOM and d.warning.line == 2
    assert "--mem-fraction-static" in d.warning.hint and "--tp-size" in d.warning.hint


def test_a_negative_profiled_budget_is_the_root_cause_of_the_crash_that_follows() -> None:
    """A splice of two real excerpts (sglang#7691's budget lines, then sglang#4895's report):
    the report alone says nothing; the budget line explains it."""
    d = diagnose_lines([*NEGATIVE_BUDGET, SCHEDULER_REPORT])
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.OOM, 2)
    assert "--mem-fraction-static" in d.hint


def test_the_multi_layer_eagle_constraint_is_a_flag_combination() -> None:
    d = diagnose_text(MULTI_LAYER_EAGLE)
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.BAD_ARGS, 1)
    assert "--speculative-num-draft-tokens" in d.hint and "got 8 and 5" in d.hint


# sgl-project/sglang#5602 (Neo9061, 2025-04-21, two nodes): gloo's monitored barrier on a rank
# whose peer (rank 0) failed first.
GLOO_BARRIER = (
    "[rank3]:[E421 04:13:43.426633564 ProcessGroupGloo.cpp:143] Rank 3 successfully reached "
    "monitoredBarrier, but received errors while waiting for send/recv from rank 0. Please "
    "check rank 0 logs for faulty rank."
)


def test_gloo_monitored_barrier_errors_are_a_collective_failure() -> None:
    d = diagnose_text(GLOO_BARRIER)
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.NCCL, 1)


# sgl-project/sglang#23598 (Gs1997XX, 2026-05-08): the ready line of a server that then served.
READY = "[2026-05-08 15:55:20] The server is fired up and ready to roll!"


def test_a_runtime_error_after_ready_needs_a_dead_process_to_be_a_crash() -> None:
    """After READY a request's error may be logged while the server keeps serving (the rule is
    fatal only during start-up); the scheduler's death report proves it, and the runtime error
    stays the root cause."""
    d = diagnose_lines([READY, WATCHDOG_EXIT_HIP[1]])
    assert d.state is State.READY
    d = diagnose_lines([READY, WATCHDOG_EXIT_HIP[1], SCHEDULER_REPORT])
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.CRASH, 2)
