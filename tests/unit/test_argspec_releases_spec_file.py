"""``validate --spec FILE`` refuses a JSON file nested 200k levels deep with one line, exit 2
(the same hostile input as the profiler's deep-trace test; it ended in RecursionError, 70)."""

from __future__ import annotations

from pathlib import Path

import pytest

from glmserve.cli import main


def test_deeply_nested_spec_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "deep.json"
    spec.write_text('{"parser": ' + "[" * 200_000 + "]" * 200_000 + "}")
    rc = main(["validate", "--spec", str(spec), "--", "--tp-size", "1"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "deep.json" in err and "nested" in err
