"""``results`` and ``report`` input audit: an unknown ``--mode`` filter, settings shown as
typed, report output paths that cannot be written (were IsADirectoryError/FileExistsError,
exit 70): one line naming the flag, exit 2."""

from __future__ import annotations

import pytest
from tests.fixtures.cli import bench_json, run_cli


def _one_line_usage_error(code: int, err: str, flag: str) -> None:
    assert code == 2, err
    assert flag in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_results_unknown_mode_is_refused(capsys):
    code, _, err = run_cli(capsys, "results", "--mode", "foo")
    _one_line_usage_error(code, err, "--mode")
    code, _, err = run_cli(capsys, "results", "export", "--mode", "foo")
    _one_line_usage_error(code, err, "--mode")
    assert run_cli(capsys, "results", "--mode", "rate")[0] == 0


def test_results_show_prints_rates_as_given(capsys, fake):
    fake.n_tokens, fake.itl = 8, 0.001  # what bench_json asks (--output-len 8)
    code, data, _ = bench_json(capsys, fake, "--request-rate", "50,inf")
    assert code == 0
    code, out, _ = run_cli(capsys, "results", "show", str(data["id"]))
    assert "request_rate=50,inf" in out and "['" not in out


# -- 7: report's output paths --------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--html", ""], "--html"),
        (["--html", "{tmp}"], "--html"),
        (["--html", "{tmp}/r.html", "--png", "{tmp}/file"], "--png"),
    ],
)
def test_report_output_path_errors_are_one_line(capsys, tmp_path, args, flag):
    (tmp_path / "file").write_text("x")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    code, _, err = run_cli(capsys, "report", "r-any", *args)
    _one_line_usage_error(code, err, flag)


def test_report_html_and_png_at_one_path_is_refused_before_writing(capsys, fake, tmp_path):
    """It wrote the HTML to F, then failed with "--png F: File exists"."""
    fake.n_tokens, fake.itl = 8, 0.001  # what bench_json asks (--output-len 8)
    code, data, _ = bench_json(capsys, fake)
    assert code == 0
    target = tmp_path / "F"
    for png in (str(target), f"{tmp_path}/./F"):  # one path, however spelled
        code, _, err = run_cli(
            capsys, "report", str(data["id"]), "--html", str(target), "--png", png
        )
        _one_line_usage_error(code, err, "--html")
        assert "--png" in err and "the same path" in err, err
        assert not target.exists()
