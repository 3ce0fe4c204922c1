"""Flags that really changed between two SGLang releases validate differently on either side.

Every expectation below was read off the shipped dumps (``scripts/dump_argspec.py --all``:
``ServerArgs.add_cli_args`` of the wheel https://pypi.org/project/sglang/<version>/ for each
release) by listing the releases in which a flag, or a choice of it, exists:

- ``--enable-overlap-schedule``: 0.4.0..0.4.1.post1 (deprecated there), gone in 0.4.1.post2.
- ``--attention-backend cutlass_mla``: a choice in 0.4.6.post1..0.5.19 only.
- ``--attention-backend trtllm_mla``: a choice from 0.4.10.post1 on.
- ``--nsa-decode-backend``: 0.5.4..0.5.19; its ``trtllm`` choice 0.5.9..0.5.19; from 0.5.13 it
  is a deprecated alias of ``--dsa-decode-backend`` (same dest, help "[Deprecated] Use
  --dsa-decode-backend instead."), and 0.5.20 dropped it.
- ``--cuda-graph-max-bs-decode``: from 0.5.14 on; ``--cuda-graph-max-bs`` 0.4.0..0.5.19.

Post releases are releases in their own right: 0.4.6 and 0.4.6.post1 differ, so are 0.4.10
and 0.4.10.post1, and 0.4.1.post1 and 0.4.1.post2.
"""

from __future__ import annotations

import pytest

from glmserve.argspec.emulator import validate_argv
from glmserve.argspec.releases import load_argspec

M = ["--model-path", "m"]


@pytest.mark.parametrize(
    ("before", "after", "argv", "error_after", "suggestion_after"),
    [
        (
            "0.4.1.post1",
            "0.4.1.post2",
            ["--enable-overlap-schedule"],
            "unrecognized arguments: --enable-overlap-schedule",
            "--enable-overlap-schedule exists in sglang 0.4.0..0.4.1.post1",
        ),
        (
            "0.5.19",
            "0.5.20",
            ["--attention-backend", "cutlass_mla"],
            "invalid choice: 'cutlass_mla'",
            "'cutlass_mla' is a choice in sglang 0.4.6.post1..0.5.19 but not in 0.5.20; "
            "use trtllm_mla or cutedsl_mla instead",
        ),
        (
            "0.5.19",
            "0.5.20",
            ["--nsa-decode-backend", "trtllm"],
            "unrecognized arguments: --nsa-decode-backend trtllm",
            "renamed to --dsa-decode-backend in sglang 0.5.20",
        ),
    ],
)
def test_flag_or_choice_removed_between_two_releases(
    before: str, after: str, argv: list[str], error_after: str, suggestion_after: str
) -> None:
    assert validate_argv([*M, *argv], load_argspec(before)).ok
    report = validate_argv([*M, *argv], load_argspec(after))
    assert len(report.errors) == 1, [f.format() for f in report.findings]
    assert error_after in report.errors[0].message
    assert suggestion_after in (report.errors[0].suggestion or "")


@pytest.mark.parametrize(
    ("before", "after", "argv", "suggestion_before"),
    [
        (
            "0.4.6",
            "0.4.6.post1",
            ["--attention-backend", "cutlass_mla"],
            "'cutlass_mla' is a choice in sglang 0.4.6.post1..0.5.19 but not in 0.4.6",
        ),
        (
            "0.4.10",
            "0.4.10.post1",
            ["--attention-backend", "trtllm_mla"],
            "'trtllm_mla' is a choice in sglang 0.4.10.post1..0.5.23 but not in 0.4.10",
        ),
        (
            "0.5.8.post1",
            "0.5.9",
            ["--nsa-decode-backend", "trtllm"],
            "'trtllm' is a choice in sglang 0.5.9..0.5.19 but not in 0.5.8.post1",
        ),
        (
            "0.5.3",
            "0.5.4",
            ["--nsa-decode-backend", "flashmla_sparse"],
            "--nsa-decode-backend exists in sglang 0.5.4..0.5.19",
        ),
        (
            "0.5.12.post1",
            "0.5.13",
            ["--dsa-decode-backend", "trtllm"],
            "sglang 0.5.12.post1 still calls it --nsa-decode-backend",
        ),
        (
            "0.5.13",
            "0.5.14",
            ["--cuda-graph-max-bs-decode", "8"],
            "sglang 0.5.13 still calls it --cuda-graph-max-bs",
        ),
    ],
)
def test_flag_or_choice_added_between_two_releases(
    before: str, after: str, argv: list[str], suggestion_before: str
) -> None:
    report = validate_argv([*M, *argv], load_argspec(before))
    assert len(report.errors) == 1, [f.format() for f in report.findings]
    assert suggestion_before in (report.errors[0].suggestion or "")
    assert validate_argv([*M, *argv], load_argspec(after)).ok


def test_deprecated_alias_warns_only_while_it_is_an_alias() -> None:
    argv = [*M, "--nsa-decode-backend", "trtllm"]
    plain = validate_argv(argv, load_argspec("0.5.12"))
    assert plain.ok and not plain.warnings
    aliased = validate_argv(argv, load_argspec("0.5.13"))
    assert aliased.ok
    assert any("use --dsa-decode-backend" in f.format() for f in aliased.warnings)


def test_post_release_is_not_its_base_release() -> None:
    base, post = load_argspec("0.4.1.post1"), load_argspec("0.4.1.post2")
    assert (base.version, post.version) == ("0.4.1.post1", "0.4.1.post2")
    assert "--enable-overlap-schedule" in base.by_option
    assert "--enable-overlap-schedule" not in post.by_option
