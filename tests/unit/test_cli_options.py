"""``glmserve.cli.options``: a shared option is spelled and explained the same on every verb,
and a repeatable one reaches the verb as a list whether given or not."""

from __future__ import annotations

import json

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from glmserve.cli import app, main
from glmserve.cli.options import JsonOpt, SetOpt


def _params(flag: str) -> dict[str, object]:
    """Verb path (``"results show"``) -> its click parameter spelled ``flag``."""
    found = {}

    def walk(cmd, path: str) -> None:
        for p in cmd.params:
            if flag in p.opts:
                found[path] = p
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(get_command(app), "")
    return found


def test_json_is_one_flag_with_one_wording_on_the_converted_verbs():
    params = _params("--json")
    converted = {"bench", "compare", "diagnose", "profiles", "render", "results",
                 "results show", "report", "sweep", "profile", "tune", "validate"}  # fmt: skip
    assert converted <= set(params)
    helps = {params[v].help for v in converted}
    assert helps == {"Print the result as JSON on stdout."}
    assert all(params[v].is_flag and params[v].default is False for v in converted)


def test_shared_options_keep_their_short_flags():
    assert _params("--profile")["render"].opts == ["--profile", "-p"]
    assert _params("--host")["sweep"].opts == ["--host", "-H"]
    assert "-p" not in _params("--profile")["tune"].opts


def test_a_repeatable_option_defaults_to_an_empty_list():
    seen = []
    mini = typer.Typer()

    @mini.command()
    def verb(sets: SetOpt = (), as_json: JsonOpt = False) -> None:
        seen.append((sets, as_json))

    @mini.command()
    def other() -> None:
        pass

    runner = CliRunner()
    assert runner.invoke(mini, ["verb"]).exit_code == 0
    assert runner.invoke(mini, ["verb", "--set", "a=1", "--set", "b=2", "--json"]).exit_code == 0
    assert seen == [([], False), (["a=1", "b=2"], True)]


@pytest.mark.parametrize(
    "args, flag",
    [
        (["runs", "-n", "0"], "'--last' / '-n'"),
        (["runs", "--last", "-5"], "'--last' / '-n'"),
        (["profile", "--top", "0", "trace.json"], "'--top'"),
        (["validate", "--sglang-version", "", "--", "--model", "m"], "'--sglang-version'"),
        (["render", "-p", "trtllm_mla", "--sglang-version", " "], "'--sglang-version'"),
        (["tune", "--sglang-version", "", "--profile", "trtllm_mla"], "'--sglang-version'"),
    ],
)
def test_out_of_range_or_empty_option_values_are_refused_with_exit_2(capsys, args, flag):
    """A count below 1, a negative timeout or an empty release name is refused before the
    verb runs (it would list every run, print empty tables, or mean "no release")."""
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"Invalid value for {flag}" in captured.err
    assert "Traceback" not in captured.err


def test_the_smallest_accepted_values_still_run(capsys):
    assert main(["runs", "-n", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--output-len", "nan"],
        ["bench", "--workers", "1.5"],
        ["results", "show", "abc"],
        ["bench", "--no-such-flag"],
        ["launch"],
    ],
)
def test_click_usage_errors_are_one_line_naming_the_verb_help(capsys, argv):
    """Audit round 2: type and unknown-option errors were click's 4-line Usage/Try/Error
    block, unlike every other bad input."""
    from glmserve.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and f"(see `glmserve {argv[0]}" in lines[0]
