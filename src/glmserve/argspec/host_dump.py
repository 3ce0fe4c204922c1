"""A host's live spec: the dump program to run there, and reading what it prints.

The program is ``dump_program.py`` of this package, sent as source text (``python3 -c``) so
the host needs neither glmserve nor a file copied over; the text is read from the package
when needed, so what runs on the host is exactly the module that is linted and tested here.

What the host prints is untrusted: a broken or hostile host may answer with anything. It is
read as JSON no larger than ``MAX_DUMP_BYTES`` and no deeper than ``MAX_DUMP_DEPTH``, and
every field the verdict code reads must have the type the dump program writes, so whatever
comes back is either a spec or one ``ConfigError`` naming the host (never a RecursionError or
a TypeError deep inside the emulator).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from glmserve.argspec.model import ArgSpec, parse_argspec
from glmserve.errors import ConfigError

_PROGRAM = "dump_program.py"
# A real release's dump is ~160 KB and 4 levels deep (a dict default inside an action).
MAX_DUMP_BYTES = 16 * 1024 * 1024
MAX_DUMP_DEPTH = 32


def dump_program_source() -> str:
    """The dump program's source text (``dump_program.py``), to run with a host's python."""
    return (resources.files("glmserve.argspec") / _PROGRAM).read_text(encoding="utf-8")


def dump_command(python: str = "python3") -> list[str]:
    """The argv that prints the live spec of whatever sglang ``python`` imports (run it on the
    GPU host, ``shlex.join``-ed; parse its stdout with ``argspec_from_dump``)."""
    return [python, "-c", dump_program_source()]


def limited_dump_command(cmd: str) -> str:
    """Shell running ``cmd`` (the dump) with its stdout cut one byte past ``MAX_DUMP_BYTES``
    on the host: a host that never stops printing cannot fill this machine's memory, and
    ``argspec_from_dump`` sees that the output was too large."""
    return f"set -o pipefail; {{ {cmd} ; }} | head -c {MAX_DUMP_BYTES + 1}"


def argspec_from_dump(stdout: str, source: str) -> ArgSpec:
    """An ArgSpec from the dump program's stdout (anything printed before the JSON is
    skipped: sitecustomize hooks or warnings on the host); ``source`` names the host."""
    if len(stdout) > MAX_DUMP_BYTES:
        raise ConfigError(
            f"{source}: argspec dump is larger than {MAX_DUMP_BYTES // (1024 * 1024)} MiB "
            "(a real one is ~200 KB): not an argparse dump"
        )
    start = stdout.find("\n{")
    text = stdout if stdout.startswith("{") else stdout[start + 1 :] if start >= 0 else ""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: argspec dump is not JSON ({exc.msg})") from exc
    except RecursionError as exc:
        raise ConfigError(f"{source}: argspec dump is nested too deeply to read") from exc
    except ValueError as exc:  # an integer of more digits than Python converts
        raise ConfigError(f"{source}: argspec dump is not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: argspec dump must be a JSON object")
    problem = _depth_problem(data) or _shape_problem(data)
    if problem:
        raise ConfigError(f"{source}: not an argparse dump: {problem}")
    return parse_argspec(data, source)


def _depth_problem(data: Any) -> str | None:
    """Deeper than ``MAX_DUMP_DEPTH`` (walked without recursion): later readers of the cached
    dump recurse, from deeper stacks than this one."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DUMP_DEPTH:
            return f"nested more than {MAX_DUMP_DEPTH} levels deep"
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return None


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _scalar_or_repr(value: Any) -> bool:
    """A choice as the dump program writes one: a scalar, or ``{"repr": "..."}``."""
    if isinstance(value, dict):
        return list(value) == ["repr"] and isinstance(value["repr"], str)
    return _is_scalar(value)


# field -> (what it must be, the check); absent fields take parse_argspec's defaults.
_ACTION_FIELDS: dict[str, tuple[str, Any]] = {
    "option_strings": (
        "a list of option strings",
        lambda v: isinstance(v, list) and all(isinstance(s, str) and s for s in v),
    ),
    "dest": ("a string", lambda v: isinstance(v, str)),
    "action": ("a string", lambda v: isinstance(v, str)),
    "type": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "choices": (
        "a list of scalars or null",
        lambda v: v is None or (isinstance(v, list) and all(_scalar_or_repr(c) for c in v)),
    ),
    "nargs": (
        "a count, a nargs string or null",
        lambda v: (
            v is None
            or isinstance(v, str)
            or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1000)
        ),
    ),
    "required": ("true or false", lambda v: isinstance(v, bool)),
    "deprecated": ("true or false", lambda v: isinstance(v, bool)),
    "help": ("a string or null", lambda v: v is None or isinstance(v, str)),
}
_PARSER_FIELDS: dict[str, tuple[str, Any]] = {
    "allow_abbrev": ("true or false", lambda v: isinstance(v, bool)),
    "add_help": ("true or false", lambda v: isinstance(v, bool)),
    "prefix_chars": ("a string", lambda v: isinstance(v, str) and bool(v)),
}


def _shape_problem(data: dict[str, Any]) -> str | None:
    """What is not of the dump program's shape (the first thing found), else None. Default,
    const and metavar may be any JSON (a release's own values); everything the emulator
    compares, hashes or calls string methods on is checked."""
    if "sglang_version" in data and not isinstance(data["sglang_version"], str):
        return "sglang_version is not a string"
    parser = data.get("parser", {})
    if not isinstance(parser, dict):
        return "parser is not an object"
    for key, (what, ok) in _PARSER_FIELDS.items():
        if key in parser and not ok(parser[key]):
            return f"parser.{key} is not {what}"
    actions = data.get("actions")
    if not isinstance(actions, list):
        return "actions is not a list"
    for i, act in enumerate(actions):
        if not isinstance(act, dict):
            return f"actions[{i}] is not an object"
        for key, (what, ok) in _ACTION_FIELDS.items():
            if key in act and not ok(act[key]):
                return f"actions[{i}].{key} is not {what}"
    return None
