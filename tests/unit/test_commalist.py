"""One comma-list parser, one policy (issue 21 #1): every option that takes a comma list
refuses an empty item (``a,,b``) with one line naming the flag, exit 2. Before, ``--nodes``,
``--hosts``, ``--profiles`` and ``--set patches=`` dropped the empty item and ran something
other than what was asked (one node, one host, one profile fewer)."""

from __future__ import annotations

import pytest

from glmserve.cli import main
from glmserve.commalist import comma_list
from glmserve.errors import ConfigError

URL = "http://127.0.0.1:9"  # nothing is ever asked: the list is refused first
SEARCH = ["--search", "server.max-running-requests=8,16"]

# (argv, the flag the one-line error must name)
CASES = [
    (["bench", "--url", URL, "--mode", "concurrency", "--concurrency", "1,,2"], "--concurrency"),
    (["bench", "--url", URL, "--request-rate", "5,,10"], "--request-rate"),
    (["bench", "--url", URL, "--percentiles", "50,,99"], "--percentiles"),
    (["bench", "--url", URL, "--slo", "ttft_ms=5,,tpot_ms=6"], "--slo"),
    (["sweep", "--simulate", "--profiles", "flashinfer,,trtllm_mla"], "--profiles"),
    (["sweep", "--simulate", "--profiles", "flashinfer", "--nodes", "a,,b"], "--nodes"),
    (
        [
            "sweep",
            "--simulate",
            "--profiles",
            "flashinfer",
            "--bench",
            "concurrency",
            "--concurrency",
            "1,,2",
        ],
        "--concurrency",
    ),
    (["launch", "--profile", "flashinfer", "--simulate", "--nodes", "a,,b"], "--nodes"),
    (["check", "--profile", "flashinfer", "--simulate", "--nodes", "a,,b"], "--nodes"),
    (["tune", "--profile", "flashinfer", "--simulate", *SEARCH, "--hosts", "a,,b"], "--hosts"),
    (
        ["tune", "--profile", "flashinfer", "--simulate", *SEARCH, "--concurrency", "1,,4"],
        "--concurrency",
    ),
    (
        ["tune", "--profile", "flashinfer", "--simulate", *SEARCH, "--slo", "tpot_p99_ms=5,,"],
        "--slo",
    ),
    (
        [
            "tune",
            "--profile",
            "flashinfer",
            "--simulate",
            "--search",
            "server.max-running-requests=8,,32",
        ],
        "--search",
    ),
    (["render", "--profile", "flashinfer", "--set", "patches=a,,b"], "--set patches"),
]


@pytest.mark.parametrize(("argv", "flag"), CASES, ids=lambda v: v if isinstance(v, str) else "")
def test_every_list_option_refuses_an_empty_item(argv, flag, capsys):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {flag}") and "an empty item" in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("text", ["a,,b", "a,b,", ",a", ",", " , ", "a, ,b"])
def test_the_parser_refuses_every_empty_item(text):
    with pytest.raises(ConfigError, match=r"^--x: an empty item in .* \(expected a comma list"):
        comma_list(text, "--x", "a,b")


def test_the_parser_strips_blanks_and_names_an_empty_list():
    assert comma_list(" a, b ,c ", "--x") == ["a", "b", "c"]
    assert comma_list("a", "--x") == ["a"]
    with pytest.raises(ConfigError, match=r"^--x: an empty list$"):
        comma_list("  ", "--x")
