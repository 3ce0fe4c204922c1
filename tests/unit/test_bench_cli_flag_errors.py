"""Issue 14 flags: each bad value is a one-line usage error naming the flag (exit 2), checked
before any server is contacted."""

from __future__ import annotations

import pytest
from tests.fixtures.cli import run_cli

URL = "http://127.0.0.1:9"  # nothing listens: a usage error must come first


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--request-rate", "0"], "--request-rate"),
        (["--request-rate", "fast"], "--request-rate"),
        (["--request-rate", "5", "--burstiness", "0"], "--burstiness"),
        (["--max-concurrency", "8"], "--max-concurrency"),
        (["--request-rate", "5", "--max-concurrency", "0"], "--max-concurrency"),
        (["--rate-sweep", "3", "--request-rate", "5"], "--rate-sweep"),
        (["--random-range-ratio", "-0.1"], "--random-range-ratio"),
        (["--percentiles", "50,101"], "--percentiles"),
        (["--slo", "ttft=5"], "--slo"),
        (["--label", "nokey"], "--label"),
        (["--mode", "rate"], "--mode"),
    ],
)
def test_bad_flag_is_a_usage_error_naming_it(capsys, args, flag):
    code, _out, err = run_cli(capsys, "bench", "--url", URL, *args)
    assert code == 2, err
    assert flag in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_infinite_rate_is_strict_json(capsys):
    import json
    import math

    from glmserve.bench.settings import BenchSettings

    s = BenchSettings("http://x", mode="rate", request_rate=[5.0, math.inf])
    text = json.dumps(s.to_dict(), allow_nan=False)  # raises on Infinity
    assert json.loads(text)["request_rate"] == [5.0, "inf"]


@pytest.mark.parametrize("ratio", ["0", "0.5"])
def test_rate_sweep_refuses_mixed_lengths(capsys, ratio):
    """An audit: --rate-sweep with --random-range-ratio 0 called every rate saturated (the
    completion-rate and latency trends it reads are stretched by mixed lengths)."""
    code, _out, err = run_cli(
        capsys, "bench", "--url", URL, "--rate-sweep", "3", "--random-range-ratio", ratio
    )
    assert code == 2, err
    assert err.strip() == (
        "error: --rate-sweep compares requests of one shape: leave --random-range-ratio at 1"
    )


def test_bench_serving_names_are_aliases(capsys, tmp_path):
    """Issue 14: names follow bench_serving where it has the same knob."""
    import typer.main

    from glmserve.cli.bench_cmds import bench

    params = {p.name: p.opts for p in typer.main.get_command_from_info(
        typer.models.CommandInfo(callback=bench), pretty_exceptions_short=True,
        rich_markup_mode=None).params}  # fmt: skip
    assert "--base-url" in params["url"] and "--output-file" in params["output"]
    assert "--random-input-len" in params["input_len"]
    assert params["random_output_len"] == ["--random-output-len"]  # random prompts only
    assert params["sharegpt_output_len"] == ["--sharegpt-output-len"]  # dataset prompts only
    assert "--warmup-requests" in params["warmup"]
    code, _out, err = run_cli(capsys, "bench", "--base-url", URL, "--random-input-len", "0")
    assert code == 2 and "--input-len" in err  # the alias reaches the same check


@pytest.mark.parametrize(
    ("flag", "other"), [("--output-len", "--input-len"), ("--input-len", "--output-len")]
)
def test_a_length_below_one_names_only_the_flag_given(capsys, flag, other):
    """It said "--input-len/--output-len must be at least 1" for either one."""
    code, _out, err = run_cli(capsys, "bench", "--url", URL, flag, "-5")
    assert code == 2 and f"{flag} must be at least 1, got -5" in err, err
    assert other not in err
