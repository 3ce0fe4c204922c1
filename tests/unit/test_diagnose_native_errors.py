"""A kernel library's own failure line (its C++/CUDA check macro, not torch's or SGLang's
report) with no SGLang line around it was no crash at all (FlashMLA's ``CUDA error
(...get_decoding_sched_meta.cu:111): invalid argument``, sglang#25620) or lost to the exception
line it caused (DeepGEMM's device assert, sglang#29993): docs/known-limits.md.
"""

from __future__ import annotations

from glmserve.diagnose import Category, State, diagnose_lines, diagnose_stream, diagnose_text

FLASHMLA = (
    "CUDA error (/sgl-workspace/flash-mla/csrc/smxx/decode/get_decoding_sched_meta/"
    "get_decoding_sched_meta.cu:111): invalid argument"
)
DEEPGEMM_ASSERT = (
    "Assertion failed: deep_gemm/include/deep_gemm/impls/smxx_layout.cuh:131, condition: "
    "(values[j] & 0x807fffffu) == 0"
)
DEEPGEMM_DRIVER = (
    "tvm.error.InternalError: CUDA driver error (jit_kernels/impls/smxx_layout.hpp:72): 719 "
    "(CUDA_ERROR_LAUNCH_FAILED)"
)


def test_a_kernel_librarys_cuda_check_alone_is_a_crash_naming_library_and_file() -> None:
    d = diagnose_text("\n".join([FLASHMLA] * 3))
    assert d.state is State.CRASHED and d.category is Category.CRASH and d.line == 1
    assert d.sglang_log  # `glmserve diagnose` must not refuse it as "not an SGLang log"
    assert "FlashMLA" in (d.hint or "")
    assert "get_decoding_sched_meta.cu:111" in (d.hint or "")
    assert "invalid argument" in (d.hint or "")


def test_a_device_assert_is_the_root_cause_not_the_launch_failure_it_causes() -> None:
    d = diagnose_text(f"{DEEPGEMM_ASSERT}\n{DEEPGEMM_DRIVER}\n")
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.CRASH, 1)
    assert "DeepGEMM" in (d.hint or "") and "smxx_layout.cuh:131" in (d.hint or "")
    assert "failed: (values[j] & 0x807fffffu) == 0;" in (d.hint or "")


def test_a_library_line_naming_a_known_failure_keeps_that_category() -> None:
    ima = (
        "CUDA driver error (/deepgemm/csrc/apis/../jit_kernels/impls/runtime_utils.hpp:143): 700 "
        "(CUDA_ERROR_ILLEGAL_ADDRESS, an illegal memory access was encountered)"
    )
    assert diagnose_text(ima).category is Category.ILLEGAL_MEMORY_ACCESS
    jit = (
        "RuntimeError: Assertion error (csrc/apis/../jit_kernels/impls/../../jit/compiler.hpp:"
        '176): false and "NVCC compilation failed"'
    )
    assert diagnose_text(jit).category is Category.COMPILE_ERROR


def test_the_check_macro_in_source_code_or_prose_is_no_crash() -> None:
    text = "\n".join(
        [
            "[2026-12-05 10:00:00 TP0] Load weight begin. avail mem=70.00 GB",
            '      fprintf(stderr, "CUDA error (%s:%d): %s\\n", __FILE__, __LINE__, msg);',
            "[2026-12-05 10:00:01 TP0] a CUDA error (see the docs) would be reported here",
        ]
    )
    d = diagnose_text(text)
    assert d.state is State.LOADING_WEIGHTS and d.category is None


def test_the_bulk_path_agrees_on_library_lines() -> None:
    body = f"{DEEPGEMM_ASSERT}\n{DEEPGEMM_DRIVER}\n{FLASHMLA}\n"
    data = body.encode()
    chunks = [data[i : i + 17] for i in range(0, len(data), 17)]
    assert diagnose_stream(chunks).to_dict() == diagnose_lines(body.split("\n")).to_dict()


def test_the_cli_reports_the_library_line_as_a_crash_not_a_foreign_file(tmp_path, capsys) -> None:
    """Was exit 6, "holds no SGLang log line": the FlashMLA excerpt of sglang#25620."""
    from glmserve.cli import main

    log = tmp_path / "server.log"
    log.write_text(f"{FLASHMLA}\n{FLASHMLA}\n")
    assert main(["diagnose", str(log)]) == 3
    out = capsys.readouterr().out
    assert "CRASHED" in out and f"{log}:1:" in out and "FlashMLA" in out
