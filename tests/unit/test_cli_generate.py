"""Verbs generated from a stage's options model (``glmserve.cli.generate``): the typer
parameters are the model's fields, and no default or bound is written a second time."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import typer.main

from glmserve.bench.options import BenchOptions
from glmserve.deploy.options import LaunchOptions
from glmserve.sweep.options import SweepCommand
from glmserve.tune.options import TuneCommand

CLI = Path(__file__).resolve().parents[2] / "src" / "glmserve" / "cli"
# verb -> (its options model, the verb's own rendering parameters)
VERBS = {
    "bench": (BenchOptions, {"wide", "as_json"}),
    "sweep": (SweepCommand, {"as_json"}),
    "tune": (TuneCommand, {"as_json"}),
    "launch": (LaunchOptions, {"json_out"}),
}


def _click_params(verb: str) -> dict:
    from glmserve.cli import app

    root = typer.main.get_command(app)
    return {p.name: p for p in root.commands[verb].params}


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_generated_parameters_are_the_models(verb):
    model, own = VERBS[verb]
    params = _click_params(verb)
    fields = {name: (info, spec) for name, info, spec in model.cli_fields()}
    assert set(params) == set(fields) | own
    for name, (info, spec) in fields.items():
        p = params[name]
        default = None if info.is_required() else info.get_default(call_default_factory=True)
        if info.is_required():
            assert p.required and p.default is None, name
        elif isinstance(default, list):  # a repeatable option: typer's () or [] for "none"
            assert default == [] and p.default in ((), [], None), name
        else:
            assert p.default == default and not p.required, name
        if spec.argument:
            assert p.param_type_name == "argument", name
            continue
        flags = [f for fl in spec.flags for f in fl.split("/")]
        assert [*p.opts, *p.secondary_opts] == flags, name
        assert getattr(p, "min", None) == spec.min, name
        assert getattr(p, "max", None) == spec.max, name
        assert (p.help or "").split()[:3] == spec.help.split()[:3], name


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_a_generated_verb_writes_no_default_of_its_own(verb):
    """The verb function declares only its rendering options: a model field re-declared in
    cli/*_cmds.py (with a literal default) would be a second place for that default."""
    own = VERBS[verb][1]
    for path in CLI.glob("*_cmd*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == verb:
                names = {a.arg for a in node.args.args[1:] + node.args.kwonlyargs}
                assert names == own, (path.name, names - own)
                assert "typer.Option(" not in ast.get_source_segment(path.read_text(), node)
                return
    pytest.fail(f"verb {verb} not found")


def test_the_parameter_check_can_fail():
    """A model default changed after generation is seen by the comparison."""
    params = _click_params("bench")
    assert params["input_len"].default == BenchOptions.default("input_len")
    assert params["stall_timeout"].default != BenchOptions.default("stall_timeout") + 1


def test_shared_defaults_are_declared_once():
    """``--output-len``/``--input-len``/``--stall-timeout`` defaults come from bench/options.py:
    the runner's settings read them rather than repeat the numbers."""
    import dataclasses

    from glmserve.bench import options as bo
    from glmserve.bench.settings import BenchSettings

    f = {x.name: x.default for x in dataclasses.fields(BenchSettings)}
    assert (f["input_len"], f["output_len"], f["stall_timeout"]) == (
        bo.DEFAULT_INPUT_LEN, bo.DEFAULT_OUTPUT_LEN, bo.DEFAULT_STALL_TIMEOUT)  # fmt: skip
    src = (CLI.parent / "bench" / "runner.py").read_text()
    for lit in ("input_len: int = 128", "output_len: int = 256", "stall_timeout: float = 120"):
        assert lit not in src, lit


def test_stage_defaults_are_the_models():
    """The stored sweep options (sweep.json) default to what the sweep verb declares, and a
    stage's differing default (60 s stall) is declared once, in sweep/options.py."""
    from glmserve.sweep.options import STAGE_STALL_TIMEOUT
    from glmserve.sweep.state import SweepOptions

    stored = SweepOptions()
    for field, stored_as in (("input_len", "input_len"), ("output_len", "output_len"),
                             ("stall_timeout", "stall_timeout_s"), ("repeat", "repeat"),
                             ("max_parallel", "max_parallel")):  # fmt: skip
        assert getattr(stored, stored_as) == SweepCommand.default(field), field
    assert stored.concurrency == [int(x) for x in SweepCommand.default("concurrency").split(",")]
    assert SweepCommand.default("stall_timeout") == STAGE_STALL_TIMEOUT
    src = (CLI.parent / "sweep" / "state.py").read_text()
    for lit in ("input_len: int = 128", "output_len: int = 256", "stall_timeout_s: float = 60"):
        assert lit not in src, lit


def test_tune_defaults_are_the_models():
    """A tune's stored options default to its verb's: 64 output tokens (its override, declared
    once in tune/options.py), the stage's 60 s stall and 3 repeats."""
    from glmserve.sweep.options import STAGE_STALL_TIMEOUT
    from glmserve.tune.options import TUNE_OUTPUT_LEN
    from glmserve.tune.runner import TuneOptions

    stored = TuneOptions()
    assert stored.output_len == TuneCommand.default("output_len") == TUNE_OUTPUT_LEN
    assert stored.input_len == TuneCommand.default("input_len") == BenchOptions.default("input_len")
    assert stored.repeat == TuneCommand.default("repeat")
    assert stored.host_lost_s == TuneCommand.default("host_lost_after")
    assert stored.stall_timeout_s == STAGE_STALL_TIMEOUT
    assert "stall_timeout" not in TuneCommand.model_fields  # no --stall-timeout on tune


def test_bench_validates_its_settings_once(capsys, monkeypatch, tmp_path):
    """Issue 21: the verb validated twice when it had a note to say (dataset prompts without
    --tokenizer), once before the note and again in run_bench; BenchOptions.plan() is the one
    validation, and run_bench is told so."""
    from tests.fixtures.cli import run_cli

    from glmserve.bench import session, validate

    calls = []
    real = validate.validate_settings
    counted = lambda *a: calls.append(a) or real(*a)  # noqa: E731
    for module in (validate, session):  # its home, and run_bench's name for it
        monkeypatch.setattr(module, "validate_settings", counted)
    data = tmp_path / "d.txt"
    data.write_text("hello there\nanother prompt\n")
    code, _out, err = run_cli(
        capsys, "bench", "--url", "http://127.0.0.1:9", "--dataset-path", str(data)
    )
    assert "every dataset prompt asks for 256 output tokens" in err  # the note was said
    assert code == 5, err  # nothing listens: the bench ran, and found no server
    assert len(calls) == 1
