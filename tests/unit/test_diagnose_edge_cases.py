"""diagnose: review fixes - per-request KeyErrors after READY, logged tracebacks that READY
clears, and ``--help`` output that is not a crash.

The logs here are synthetic, built from the shapes SGLang 0.5.9 prints (paths cited per test):
the ``[ts TPn]`` prefix, ``logger.error(f"... {get_exception_traceback()}")`` (whose text starts
with "Traceback (most recent call last):"), uvicorn access lines and decode statistics.
"""

from __future__ import annotations

import argparse

from glmserve.diagnose import Category, LogDiagnoser, State, diagnose_lines

READY = "[2026-02-10 09:00:00] The server is fired up and ready to roll!"
# sglang/srt/models/llama.py (0.5.9) get_weights_by_name: params_dict[mapped_name] raises,
# the except branch logs "Error getting weights by name {name} in LlamaForCausalLM: {tb}".
WEIGHTS_BY_NAME_ERROR = [
    "[2026-02-10 09:01:00 TP0] Error getting weights by name model.layers.0.mlp.up_proj.weight"
    " in LlamaForCausalLM: Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.11/site-packages/sglang/srt/models/llama.py", line 703, '
    "in get_weights_by_name",
    "    param = params_dict[mapped_name]",
    "            ~~~~~~~~~~~^^^^^^^^^^^^^",
    "KeyError: 'model.layers.0.mlp.up_proj.weight'",
]
SERVING = [
    '[2026-02-10 09:01:00] INFO:     127.0.0.1:53412 - "GET /get_weights_by_name HTTP/1.1" 200 OK',
    "[2026-02-10 09:01:05 TP0] Decode batch, #running-req: 3, #token: 1200, token usage: 0.01, "
    "cuda graph: True, gen throughput (token/s): 250.31, #queue-req: 0",
]


def test_keyerror_from_get_weights_by_name_after_ready_keeps_serving() -> None:
    d = diagnose_lines([READY, *WEIGHTS_BY_NAME_ERROR, *SERVING])
    assert d.state is State.READY, (d.state, d.root_cause)
    assert d.category is None


def test_keyerror_on_a_weight_after_ready_with_a_cascade_is_still_weight_loading() -> None:
    # An update_weights request that kills the scheduler: the launcher's sigquit follows.
    d = diagnose_lines(
        [
            READY,
            *WEIGHTS_BY_NAME_ERROR,
            "[2026-02-10 09:01:01] Received sigquit from a child process. It usually means the "
            "child failed.",
        ]
    )
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.WEIGHT_LOADING, 6)


def test_keyerror_on_a_weight_before_ready_is_still_a_fatal_weight_loading_error() -> None:
    d = diagnose_lines(WEIGHTS_BY_NAME_ERROR[1:])
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.WEIGHT_LOADING, 4)


# A warning-style logged traceback during start-up (SGLang logs some failures with
# logger.error/warning + get_exception_traceback() and carries on, e.g. an optional import).
LOGGED_TB = [
    "[2026-02-10 08:59:00 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16",
    "[2026-02-10 08:59:10 TP0] Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.11/site-packages/sglang/srt/utils/common.py", line 100, '
    "in get_device_name",
    "    import foo",
    "ModuleNotFoundError: No module named 'foo'",
]


def test_logged_traceback_before_ready_is_cleared_by_ready() -> None:
    diag = LogDiagnoser()
    for line in LOGGED_TB:
        diag.feed(line)
    assert diag.diagnosis.state is State.CRASHED  # fast verdict while it may be fatal
    diag.feed(READY)
    d = diag.diagnosis
    assert (d.state, d.category, d.ready_line) == (State.READY, None, 6)


def test_logged_traceback_alone_before_ready_is_cleared_by_ready() -> None:
    d = diagnose_lines([*LOGGED_TB[:3], READY])
    assert d.state is State.READY


def test_logged_traceback_with_a_cascade_stays_crashed_even_after_ready() -> None:
    sigquit = "[2026-02-10 08:59:11] Received sigquit from a child process. It usually means"
    d = diagnose_lines([*LOGGED_TB[:3], sigquit, READY])
    assert (d.state, d.line) == (State.CRASHED, 2)


def _help_text() -> list[str]:
    # argparse's own --help output for a parser shaped like sglang's launch_server.py
    # (argparse.ArgumentParser() + ServerArgs.add_cli_args): generated, not hand-written.
    p = argparse.ArgumentParser(prog="launch_server.py")
    p.add_argument("--model-path", "--model", type=str, required=True, help="The model path.")
    p.add_argument("--tp-size", type=int, default=1, help="The tensor parallelism size.")
    return p.format_help().splitlines()


def test_help_output_is_not_a_crash() -> None:
    lines = _help_text()
    assert lines[0].startswith("usage: launch_server.py [-h]")
    d = diagnose_lines(lines)
    assert d.state is State.STARTING and d.category is None, (d.state, d.root_cause)


def test_usage_banner_then_error_is_still_bad_args() -> None:
    lines = [_help_text()[0], "launch_server.py: error: unrecognized arguments: --tp_size"]
    d = diagnose_lines(lines)
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.BAD_ARGS, 2)
