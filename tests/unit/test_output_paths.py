"""Output options never overwrite glmserve's own state and never build directory trees: a
2026-12-03 audit replaced the run store with a bench JSON (`bench --output
$GLMSERVE_HOME/runs.sqlite`, the same through `report --html`), exit 0, after which every verb
failed and live servers could no longer be stopped; `report --html /nonexist/r.html` created
`/nonexist`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.fixtures.cli import run_cli

from glmserve.errors import ConfigError
from glmserve.paths import check_output_dir, check_output_file
from glmserve.store import RunStore


@pytest.fixture
def store_file() -> Path:
    with RunStore.open():
        pass
    path = Path(os.environ["GLMSERVE_HOME"]) / "runs.sqlite"
    assert path.exists()
    return path


def test_the_run_store_is_never_an_output(store_file, tmp_path):
    with pytest.raises(ConfigError, match="glmserve's own state"):
        check_output_file("--output", store_file)
    link = tmp_path / "innocent.json"
    os.link(store_file, link)  # another name for the same file
    with pytest.raises(ConfigError, match="glmserve's own state"):
        check_output_file("--output", link)
    sym = tmp_path / "sym.json"
    sym.symlink_to(store_file)
    with pytest.raises(ConfigError, match="glmserve's own state"):
        check_output_file("--html", sym)
    assert check_output_file("--output", tmp_path / "new.json") == tmp_path / "new.json"


def test_bench_and_report_refuse_the_store_and_leave_it_intact(capsys, store_file):
    before = store_file.read_bytes()
    code, _, err = run_cli(capsys, "bench", "--url", "http://127.0.0.1:9", "--output",
                           str(store_file))  # fmt: skip
    assert code == 2 and "--output" in err and "own state" in err
    code, _, err = run_cli(capsys, "report", "1", "--html", str(store_file))
    assert code == 2 and "--html" in err and "own state" in err
    assert store_file.read_bytes() == before


def test_report_builds_no_directory_tree(capsys, tmp_path):
    code, _, err = run_cli(capsys, "report", "1", "--html", str(tmp_path / "a" / "b" / "r.html"))
    assert code == 2 and "no such directory" in err
    code, _, err = run_cli(capsys, "report", "1", "--html", str(tmp_path / "r.html"), "--png",
                           str(tmp_path / "x" / "y"))  # fmt: skip
    assert code == 2 and "--png" in err and "no such directory" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "x").exists()
    assert check_output_dir("--png", tmp_path / "plots") == tmp_path / "plots"  # one level: ok


def test_results_export_refuses_the_store(capsys, store_file):
    before = store_file.read_bytes()
    code, _, err = run_cli(capsys, "results", "export", "--output", str(store_file))
    assert code == 2 and "--output" in err and "own state" in err
    assert store_file.read_bytes() == before
