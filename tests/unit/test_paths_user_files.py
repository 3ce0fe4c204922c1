"""Files and values a user names, made hostile (issue 20, items 10 and 11): JSON or YAML
nested past the parser's recursion, a version string longer than a file name, a FIFO where a
file is read or written whole. Each is one line naming the file or flag and exit 2: never
exit 70 (a traceback), never a hang."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.fixtures.cli import run_glmserve

from glmserve.bench.workload import read_dataset_rows
from glmserve.errors import ConfigError

DEPTH = 100_000  # far past the C decoder's recursion guard (~1000) and YAML's composer


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    from glmserve.cli import main

    try:
        rc = main(list(args))
    except SystemExit as exc:  # ``simulate`` ends with the simulator's own status
        rc = exc.code
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _one_line_usage_error(rc: int, err: str, *needles: str) -> None:
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "internal error" not in err and "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


# -- 10: nesting and length -----------------------------------------------------------------


@pytest.mark.parametrize(
    "name,text",
    [
        ("deep.json", "[" * DEPTH + "]" * DEPTH),
        ("deep.jsonl", '{"a":' * DEPTH + "1" + "}" * DEPTH + "\n"),
    ],
)
def test_a_deeply_nested_dataset_is_a_config_error_naming_the_file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"{name}(:1)?: not valid JSON \(nested more than"):
        read_dataset_rows(str(path))


def test_a_dataset_nested_a_little_is_still_read(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text('{"prompt": "hi", "extra": ' + "[" * 50 + "]" * 50 + "}\n")
    assert read_dataset_rows(str(path))[0].prompt == "hi"


def test_a_deeply_nested_sim_config_is_exit_2_naming_the_file(tmp_path, capsys):
    cfg = tmp_path / "deep.yaml"
    cfg.write_text("[" * DEPTH + "]" * DEPTH)
    rc, _, err = _cli(capsys, "simulate", "--model-path", "m", "--sim-config", str(cfg))
    _one_line_usage_error(rc, err, f"--sim-config {cfg}:1:", "nested")


def test_a_deeply_nested_json_flag_value_is_a_finding_not_a_crash(capsys):
    """``--cuda-graph-config`` is parsed with json.loads (0.5.23): sglang's argparse would die
    of the RecursionError; ``validate`` says so as an error finding (exit 2), not exit 70."""
    deep = "[" * DEPTH + "]" * DEPTH
    rc, out, err = _cli(
        capsys, "validate", "--sglang-version", "0.5.23", "--", "--model-path", "m",
        "--cuda-graph-config", deep,
    )  # fmt: skip
    assert rc == 2, err
    assert "internal error" not in err and "argument --cuda-graph-config: JSON nested" in out + err


@pytest.mark.parametrize("version", ["9" * 300, "0.5." + "9" * 300, "0.5.9\nx"])
def test_an_impossible_sglang_version_is_exit_2_on_the_flag(capsys, version):
    rc, _, err = _cli(capsys, "validate", "--sglang-version", version, "--", "--model-path", "m")
    _one_line_usage_error(rc, err, "--sglang-version", "not a release version")


def test_a_long_unknown_version_through_the_library_is_a_config_error():
    """The API under the flag: ``Path.is_file`` raised OSError (File name too long)."""
    from glmserve.argspec.releases import load_argspec, load_release_spec

    for load in (load_argspec, load_release_spec):
        with pytest.raises(ConfigError, match="no argspec shipped"):
            load("9" * 300)


# -- 11: FIFOs where a file is read or written whole ----------------------------------------


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["results", "export", "--output", "{fifo}"], "--output {fifo}: not a regular file"),
        (
            ["bench", "--url", "http://127.0.0.1:9", "--output", "{fifo}"],
            "--output {fifo}: not a regular file",
        ),
        (["profile", "{fifo}"], "{fifo}: trace file is not a regular file"),
        (
            ["simulate", "--model-path", "m", "--sim-config", "{fifo}"],
            "--sim-config {fifo}: cost-model file is not a regular file",
        ),
    ],
    ids=["results-export", "bench-output", "profile", "simulate-sim-config"],
)
def test_a_fifo_is_refused_not_waited_on(fifo, argv, needle):
    """A real process: before the fix each of these blocked in open() until a peer came
    (the timeout here fails the test instead of hanging it)."""
    proc = run_glmserve(*(a.format(fifo=fifo) for a in argv), timeout=60)
    _one_line_usage_error(proc.returncode, proc.stderr, needle.format(fifo=fifo))


def test_a_device_is_refused_as_a_trace_and_as_an_output(tmp_path, capsys):
    rc, _, err = _cli(capsys, "profile", "/dev/zero")
    _one_line_usage_error(rc, err, "/dev/zero: trace file is not a regular file")
    rc, _, err = _cli(capsys, "results", "export", "--output", "/dev/full")
    _one_line_usage_error(rc, err, "--output /dev/full: not a regular file")
