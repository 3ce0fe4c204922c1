"""A host's live spec: the dump program to run there, and reading what it prints.

The program is ``dump_program.py`` of this package, sent as source text (``python3 -c``) so
the host needs neither glmserve nor a file copied over; the text is read from the package
when needed, so what runs on the host is exactly the module that is linted and tested here.
"""

from __future__ import annotations

import json
from importlib import resources

from glmserve.argspec.model import ArgSpec, parse_argspec
from glmserve.errors import ConfigError

_PROGRAM = "dump_program.py"


def dump_program_source() -> str:
    """The dump program's source text (``dump_program.py``), to run with a host's python."""
    return (resources.files("glmserve.argspec") / _PROGRAM).read_text(encoding="utf-8")


def dump_command(python: str = "python3") -> list[str]:
    """The argv that prints the live spec of whatever sglang ``python`` imports (run it on the
    GPU host, ``shlex.join``-ed; parse its stdout with ``argspec_from_dump``)."""
    return [python, "-c", dump_program_source()]


def argspec_from_dump(stdout: str, source: str) -> ArgSpec:
    """An ArgSpec from the dump program's stdout (anything printed before the JSON is
    skipped: sitecustomize hooks or warnings on the host)."""
    start = stdout.find("\n{")
    text = stdout if stdout.startswith("{") else stdout[start + 1 :] if start >= 0 else ""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: argspec dump is not JSON ({exc.msg})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: argspec dump must be a JSON object")
    return parse_argspec(data, source)
