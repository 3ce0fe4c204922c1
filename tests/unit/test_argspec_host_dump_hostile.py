"""A host's argparse dump is untrusted: nested ~1000 deep, of wrong types at any level, or
endless, it is one ConfigError naming the host (a failed ``flags`` check), never exit 70 from
a RecursionError or a TypeError inside the emulator."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from glmserve.argspec import emulator, host_dump
from glmserve.argspec.host_dump import argspec_from_dump
from glmserve.config.profiles import load_profile
from glmserve.errors import ConfigError


def _good() -> dict[str, Any]:
    return {
        "format": 1,
        "sglang_version": "0.5.9",
        "parser": {"allow_abbrev": True, "add_help": True, "prefix_chars": "-"},
        "actions": [
            {"option_strings": ["--model-path"], "dest": "model_path", "action": "_StoreAction",
             "type": "str", "choices": None, "default": None, "nargs": None, "required": True,
             "help": "weights", "deprecated": False},
            {"option_strings": ["--mode"], "dest": "mode", "action": "_StoreAction",
             "type": "str", "choices": ["a", {"repr": "<B>"}], "default": {"k": [1, "inf"]},
             "nargs": "?", "required": False, "help": None, "deprecated": False},
        ],
    }  # fmt: skip


def test_the_shape_the_dump_program_writes_is_read() -> None:
    spec = argspec_from_dump(json.dumps(_good(), indent=1), "host gpu1: argparse dump")
    assert [a.dest for a in spec.actions] == ["model_path", "mode"]
    assert emulator.validate_argv(["--model-path", "m", "--mode", "a"], spec).errors == []


@pytest.mark.parametrize("where", ["actions", "default", "top"])
def test_a_dump_nested_a_thousand_deep_is_refused_naming_the_host(where: str) -> None:
    deep = "[" * 1000 + "]" * 1000
    if where == "actions":
        text = '{"sglang_version": "1", "actions": ' + deep + "}"
    elif where == "default":
        good = json.dumps(_good())
        text = good.replace('"default": null', '"default": ' + deep, 1)
    else:
        text = '{"a": ' * 1000 + "1" + "}" * 1000
    with pytest.raises(ConfigError, match=r"^host gpu1: argparse dump: .*(nested|deep)"):
        argspec_from_dump(text, "host gpu1: argparse dump")


def _set(path: str, value: Any) -> dict[str, Any]:
    data = _good()
    *parents, last = path.split(".")
    node: Any = data
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("parser", 1),  # was AttributeError: 'int' object has no attribute 'get'
        ("parser.allow_abbrev", "no"),
        ("parser.prefix_chars", 5),
        ("sglang_version", {"v": 1}),
        ("actions", {"a": 1}),
        ("actions.1", "--mode"),
        ("actions.1.action", 1),  # was AttributeError in is_deprecated
        ("actions.1.help", ["x"]),  # was TypeError in the deprecation regex
        ("actions.1.option_strings", [1]),  # was AttributeError in the emulator
        ("actions.1.option_strings", "--mode"),  # a string, taken as its characters
        ("actions.1.choices", [["a"]]),  # was TypeError: unhashable type
        ("actions.1.choices", [{"a": 1}]),
        ("actions.1.nargs", [1]),  # was TypeError: unhashable type
        ("actions.1.nargs", -3),
        ("actions.1.nargs", True),
        ("actions.1.dest", None),
        ("actions.1.type", ["int"]),
        ("actions.1.required", "yes"),
    ],
)
def test_a_field_of_the_wrong_type_is_refused_naming_the_host_and_field(
    path: str, value: Any
) -> None:
    text = json.dumps(_set(path, value))
    field = (
        path.split(".")[-1]
        if not path.startswith("actions.1")
        else path.replace("actions.1", "actions[1]")
    )
    with pytest.raises(ConfigError) as info:
        argspec_from_dump(text, "host gpu1: argparse dump")
    msg = str(info.value)
    assert msg.startswith("host gpu1: argparse dump: not an argparse dump: "), msg
    assert field in msg and "\n" not in msg


def test_an_oversized_dump_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_dump, "MAX_DUMP_BYTES", 1000)
    text = json.dumps({**_good(), "pad": "x" * 2000})
    with pytest.raises(ConfigError, match=r"^host gpu1: argparse dump: .* larger than"):
        argspec_from_dump(text, "host gpu1: argparse dump")


def test_an_integer_too_long_to_convert_is_refused() -> None:
    text = json.dumps(_good()).replace('"format": 1', '"format": ' + "9" * 5000)
    with pytest.raises(ConfigError, match="not JSON"):
        argspec_from_dump(text, "host gpu1: argparse dump")


# -- through `check`'s flags row, with a host python that answers with junk --------------------
def _hostile_python(tmp_path: Path, body: str) -> str:
    py = tmp_path / "python3"
    py.write_text("#!/bin/bash\n" + body + "\n")
    py.chmod(0o755)
    return str(py)


@pytest.mark.parametrize(
    ("body", "expect"),
    [
        (
            'printf \'{"sglang_version": "9.9.9", "actions": \'; head -c 5000 /dev/zero | '
            "tr '\\0' '['; head -c 5000 /dev/zero | tr '\\0' ']'; echo '}'",
            "nested",
        ),
        ('echo \'{"sglang_version": "9.9.9", "parser": 1, "actions": []}\'', "parser"),
        ("yes '{\"x\": 1}'", "larger than"),  # never stops printing
    ],
    ids=["deep", "wrong-type", "endless"],
)
def test_check_flags_row_fails_naming_the_host_for_a_hostile_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, expect: str
) -> None:
    from glmserve.deploy import preflight
    from glmserve.remote.hosts import get_host
    from glmserve.remote.transport import transport_for

    monkeypatch.setattr(host_dump, "MAX_DUMP_BYTES", 1024 * 1024)
    python = _hostile_python(tmp_path, body)
    spec = dataclasses.replace(load_profile("trtllm_mla"), python=python, venv=None)
    row = preflight.check_argspec(transport_for(get_host("local")), spec, "9.9.9")
    assert row.status == "fail", row.detail
    assert row.detail.startswith("host local: argparse dump: "), row.detail
    assert expect in row.detail
    assert not preflight.argspec_cache_path("9.9.9").exists()  # nothing hostile is cached
