"""Property tests: validate_argv's verdict equals the running interpreter's argparse on a
synthetic parser with every action shape SGLang uses (and some it may start using), for
random argvs built from its flags, their prefixes, ``=`` forms and awkward values. No sglang
needed: the spec comes from the same dump code (dump_program.py) the shipped specs came from."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glmserve.argspec.emulator import validate_argv
from glmserve.argspec.host_dump import dump_program_source
from glmserve.argspec.launch_script import extract_launch_argv
from glmserve.argspec.model import parse_argspec


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fake")
    p.add_argument("--model-path", "--model", type=str, required=True)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--tp-rank", type=int)
    p.add_argument("--mem-fraction", type=float)
    p.add_argument("--backend", choices=["fa3", "flashinfer", "trtllm_mla"])
    p.add_argument("--level", type=int, choices=[0, 1, 2])
    p.add_argument("--bs", type=int, nargs="+")
    p.add_argument("--paths", nargs="*")
    p.add_argument("--maybe", nargs="?", const="c")
    p.add_argument("--pair", nargs=2)
    p.add_argument("--flag", action="store_true")
    p.add_argument("--flag-two", action="store_true")
    p.add_argument("--const", action="store_const", const=3)
    p.add_argument("--toggle", action=argparse.BooleanOptionalAction)
    p.add_argument("--extra", type=json.loads)
    p.add_argument("--tag", action="append")
    return p


PARSER = _build_parser()
_NS: dict = {"__name__": "glmserve_dump"}
exec(dump_program_source(), _NS)
SPEC = parse_argspec(
    {
        "sglang_version": "synthetic",
        "parser": {"allow_abbrev": True, "add_help": True},
        "actions": [
            _NS["_dump_action"](a)
            for a in PARSER._actions
            if not isinstance(a, argparse._HelpAction)
        ],
    },
    "synthetic",
)
OPTIONS = [o for a in PARSER._actions for o in a.option_strings if o.startswith("--")]
VALUES = ["1", "0", "-1", "2.5", "x", "fa3", "trtllm_mla", "", "a b", "[1]", '{"k": 1}', "-x"]


def _argparse_ok(argv: list[str]) -> bool:
    sink = io.StringIO()
    try:
        with contextlib.redirect_stderr(sink), contextlib.redirect_stdout(sink):
            PARSER.parse_args(argv)
    except SystemExit as exc:
        return exc.code == 0
    return True


_option = st.sampled_from(OPTIONS)
_prefix = _option.flatmap(lambda o: st.integers(3, len(o)).map(lambda n: o[:n]))
_value = st.sampled_from(VALUES)
_token = st.one_of(
    _option,
    _option,
    _prefix,
    _value,
    st.tuples(_option, _value).map(lambda t: f"{t[0]}={t[1]}"),
    st.just("--"),
    st.just("--help"),
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.lists(_token, max_size=7), st.booleans())
def test_verdict_matches_argparse(tokens: list[str], with_model: bool) -> None:
    argv = (["--model", "m"] if with_model else []) + tokens
    ours = validate_argv(argv, SPEC)
    assert ours.ok == _argparse_ok(argv), [f.format() for f in ours.findings]


_hostile = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_hostile, max_size=6), st.lists(st.booleans(), min_size=6, max_size=6))
def test_quoted_args_round_trip_through_launch_script(args: list[str], breaks: list[bool]) -> None:
    """Whatever render-style shlex quoting produces, spread over continuation lines, reads
    back as the same argv."""
    parts = ["exec python3 -u -m sglang.launch_server"]
    for arg, brk in zip(args, breaks, strict=False):
        parts.append((" \\\n  " if brk else " ") + shlex.quote(arg))
    text = "#!/usr/bin/env bash\nset -euo pipefail\n" + "".join(parts) + "\n"
    assert extract_launch_argv(text, "prop.sh")[0] == args
