"""An option given twice with two values is one usage line (exit 2) on every verb, before the
verb runs; click alone kept the last value without a word (``--output-len 4 --output-len 8``
benchmarked 8)."""

from __future__ import annotations

import pytest
import typer

from glmserve.cli import app, main
from glmserve.store import RunStore

URL = "http://127.0.0.1:9"  # nothing listens: a check that let the bench run would exit 5


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.mark.parametrize(
    ("args", "named", "values"),
    [
        (["bench", "RUN", "--output-len", "4", "--output-len", "8"], "--output-len", "'4', '8'"),
        # an alias and the --opt=value spelling are the same option
        (["bench", "RUN", "--input-len", "4", "--random-input-len=8"], "--input-len", "'4'"),
        (["bench", "RUN", "--api", "native", "--api", "openai"], "--api", "'native', 'openai'"),
        (["bench", "RUN", "--slo", "ttft_ms=5", "--slo", "ttft_ms=6"], "--slo", "'ttft_ms=5'"),
        (["bench", "RUN", "--mode", "decode", "--mode", "concurrency"], "--mode", "'decode'"),
        (["bench", "RUN", "--num-prompts", "2", "--num-prompts", "3"], "--num-prompts", "'2', '3'"),
        (["bench", "RUN", "--output", "a.json", "--output", "b.json"], "--output", "'a.json'"),
        (["bench", "--url", URL, "--url", "http://127.0.0.1:8"], "--url", f"'{URL}'"),
        (["results", "--last", "1", "--last", "2"], "--last", "'1', '2'"),
        (["report", "--html", "a", "--html", "b"], "--html", "'a', 'b'"),
        (["--ssh-config", "a", "--ssh-config", "b", "runs"], "--ssh-config", "'a', 'b'"),
        # a nested group's verb
        (["results", "export", "--format", "csv", "--format", "json"], "--format", "'csv'"),
    ],
)
def test_an_option_given_twice_with_two_values_is_one_usage_line(capsys, args, named, values):
    code, out, err = run(capsys, *args)
    assert code == 2, err
    assert err.startswith(f"error: {named}") and "given twice" in err and values in err, err
    assert len(err.strip().splitlines()) == 1 and out == ""
    with RunStore.open() as store:
        assert store.list_bench_results() == []


def test_the_usage_line_names_the_verb_whose_help_to_read(capsys):
    _, _, err = run(capsys, "results", "export", "--format", "csv", "--format", "json")
    assert err.rstrip().endswith("(see `glmserve results export --help`)")


@pytest.mark.parametrize(
    ("args", "verb"),
    [
        (["profiles", "--for-host"], "glmserve profiles"),
        (["bench", "RUN", "--concurrency"], "glmserve bench"),
        (["results", "export", "--format"], "glmserve results export"),
        (["--ssh-config"], "glmserve"),  # the root's own option: the root's help
    ],
)
def test_a_missing_option_value_names_the_verb_whose_help_to_read(capsys, args, verb):
    """click's parser raises "requires an argument" without a context: it pointed every verb
    at the root's help."""
    code, out, err = run(capsys, *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "requires an argument" in err and err.rstrip().endswith(f"(see `{verb} --help`)"), err


@pytest.mark.parametrize(
    "args",
    [
        ["results", "--last", "1", "--last", "1"],  # the same value twice
        ["results", "--last", "1", "--last=1"],
        ["results", "--json", "--json"],  # a flag repeated
        ["results", "--label", "a=1", "--label", "b=2"],  # declared repeatable
        ["results", "--", "--json"],  # after --: not an option
    ],
)
def test_harmless_repeats_are_accepted(capsys, args):
    code, _, err = run(capsys, *args)
    assert "given twice" not in err
    assert code in (0, 2)  # `-- --json` is click's own "unexpected extra argument"


def test_a_repeated_option_still_refused_by_click_is_left_to_click(capsys):
    code, _, err = run(capsys, "bench", "RUN", "--bogus", "1", "--bogus", "2")
    assert code == 2 and "No such option: --bogus" in err


def _value_options(command, path=()):
    """(argv path, option) for every option of every verb that keeps one value."""
    for param in command.params:
        if param.param_type_name == "option" and not (
            param.multiple or param.count or param.is_flag
        ):
            yield path, param
    for name, sub in getattr(command, "commands", {}).items():
        yield from _value_options(sub, (*path, name))


def test_every_single_value_option_of_every_verb_is_checked():
    from glmserve.cli.repeated_options import _click, refuse_repeated_options

    root = typer.main.get_command(app)
    checked = list(_value_options(root))
    assert len(checked) > 50
    assert {p for p, _ in checked} >= {(), ("bench",), ("results", "export"), ("sweep",)}
    for path, param in checked:
        opt = param.opts[0]
        ctx = root.context_class(root, info_name="glmserve")
        with pytest.raises(_click.exceptions.BadOptionUsage) as caught:
            refuse_repeated_options(root, ctx, [*path, opt, "x1", opt, "x2"])
        assert opt in caught.value.format_message(), (path, opt)
