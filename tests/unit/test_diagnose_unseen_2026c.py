"""Second round on tests/data/logs_2026_c (issue 26): three gaps its held-out half showed,
fixed only after that half was scored once; tests/data/logs_2026_d measures the result.

Lines are the shapes the threads posted (sglang issues 16026, 18785, 27142), the sources cited
are SGLang 0.5.9's."""

from __future__ import annotations

from glmserve.diagnose import Category, State, diagnose_text

# sglang 0.5.9 srt/layers/deep_gemm_wrapper/compile_utils.py:174.
DEEPGEMM = [
    "[2025-12-29 07:57:46 TP0 EP0] Try DeepGEMM JIT Compiling for <GEMM_NT_F8F8BF16> N=16384, "
    "K=512, num_groups=1 with all Ms.",
    "[2025-12-29 07:57:46 TP0 EP0] Required memory for warmup: 2.0390625GB, Available memory: "
    "44.05438232421875GB",
]


def test_deepgemms_warmup_budget_line_is_not_the_servers_warmup() -> None:
    d = diagnose_text("\n".join(DEEPGEMM) + "\n")
    assert d.state is State.STARTING


def test_the_servers_warmup_line_still_is() -> None:
    # 0.5.9 srt/entrypoints/http_server.py: the warmup thread's GET /model_info, then its POST
    line = '[2026-01-21 19:43:30] INFO:     127.0.0.1:35294 - "GET /model_info HTTP/1.1" 200 OK'
    assert diagnose_text(line + "\n").state is State.WARMUP


def _generate(port: int) -> str:
    return f'[2026-02-12 11:38:30] INFO:     127.0.0.1:{port} - "POST /generate HTTP/1.1" 200 OK'


def test_one_native_generate_answered_is_the_warmups_own_request() -> None:
    # 0.5.9 http_server.py _execute_server_warmup sends exactly one POST to /generate.
    d = diagnose_text(
        "[2026-02-12 11:38:29 TP0] Load weight end. avail mem=9.1 GB\n" + _generate(1) + "\n"
    )
    assert d.state is not State.READY


def test_a_second_native_generate_answered_means_serving() -> None:
    d = diagnose_text(_generate(1) + "\n" + _generate(2) + "\n")
    assert d.state is State.READY


def test_a_crash_after_native_serving_is_still_a_crash() -> None:
    log = [
        _generate(1),
        _generate(2),
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    d = diagnose_text("\n".join(log) + "\n")
    assert (d.state, d.category) == (State.CRASHED, Category.ILLEGAL_MEMORY_ACCESS)


def test_frames_with_an_elided_path_head_are_sglang_frames() -> None:
    frames = [
        'File ".../managers/tokenizer_manager.py", line 253, in __init__',
        "  self.init_ipc_channels(port_args)",
        'File ".../managers/tokenizer_manager.py", line 379, in init_ipc_channels',
    ]
    d = diagnose_text("\n".join(frames) + "\n")
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.CRASH, 1)


def test_an_elided_path_of_other_code_is_not() -> None:
    d = diagnose_text('File ".../site-packages/requests/models.py", line 1, in raise_for_status\n')
    assert d.state is State.STARTING
