"""Find the ``sglang.launch_server`` command in a hand-written bash launch script, and check it.

Users point ``glmserve validate`` at old scripts like the seed's ``run_tp8_trtllm_mla.sh``.
The script is read into words the way bash would split it, without running it
(:mod:`glmserve.argspec.shell_words`); here the commands are stepped through, assignments
remembered for later expansions, and the first python invocation of ``sglang.launch_server``
taken, with the physical line of every flag so findings can say ``run.sh:12: ...``.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glmserve.argspec.emulator import validate_argv
from glmserve.argspec.model import ArgSpec, FlagIssue, ValidationReport
from glmserve.argspec.shell_words import _ASSIGNMENT, _KEYWORDS, Word, _Lexer
from glmserve.config.spec import PATCHES_ENV
from glmserve.errors import ConfigError
from glmserve.paths import read_capped

LAUNCH_MODULES = ("sglang.launch_server",)
# A launch script is a few KiB. The caps keep a hostile file (or a variable that doubles
# itself line after line) from costing minutes or gigabytes before a verdict.
MAX_SCRIPT_BYTES = 1 << 20
MAX_VAR_CHARS = 64 << 10  # longer assignments are forgotten (their uses stay opaque)
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_WRAPPERS = {"exec", "nohup", "command", "time", "builtin", "stdbuf", "setsid", "nice"}
# ``ARR[2]=value``: one element of an array
_ELEMENT_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\[([^\]]*)\]=(.*)$", re.DOTALL)
# python options that take a separate argument (``python3 -X dev -m ...``).
_PY_OPTS_WITH_ARG = {"-X", "-W", "-c", "-m"}


@dataclass
class LaunchInvocation:
    """The launch command found in a script: the server flags and where each came from."""

    source: str
    argv: list[str]
    line_no: int
    token_lines: list[int]
    opaque: set[int] = field(default_factory=set)
    env: dict[str, str] = field(default_factory=dict)
    python: str = "python3"
    notes: list[tuple[int, str]] = field(default_factory=list)
    script_vars: dict[str, str] = field(default_factory=dict)


def _python_argv_start(words: list[Word]) -> int | None:
    """Index just past ``-m sglang.launch_server`` (or the launch_server.py path) when
    ``words`` is a python invocation of it, else None."""
    i = 0
    while i < len(words) and _ASSIGNMENT.match(words[i].text):
        i += 1
    while i < len(words):
        text = words[i].text
        if text in _KEYWORDS or text in _WRAPPERS:
            i += 1
        elif text == "env" or os.path.basename(text) == "env":
            i += 1
            while i < len(words) and (
                _ASSIGNMENT.match(words[i].text) or words[i].text.startswith("-")
            ):
                i += 1
        elif _ASSIGNMENT.match(text):
            i += 1
        else:
            break
    if i >= len(words) or not _PYTHON.match(os.path.basename(words[i].text)):
        return None
    i += 1
    while i < len(words):
        text = words[i].text
        if text == "-m" and i + 1 < len(words):
            return i + 2 if words[i + 1].text in LAUNCH_MODULES else None
        if text.startswith("-m") and len(text) > 2:
            return i + 1 if text[2:] in LAUNCH_MODULES else None
        if re.match(r"^-[a-zA-Z]*m$", text) and i + 1 < len(words):
            return i + 2 if words[i + 1].text in LAUNCH_MODULES else None
        if text in _PY_OPTS_WITH_ARG:
            i += 2
            continue
        if text.startswith("-"):
            i += 1
            continue
        return i + 1 if text.replace("\\", "/").endswith("sglang/launch_server.py") else None
    return None


def _record_assignments(lexer: _Lexer, words: list[Word]) -> None:
    """``FOO=bar`` alone or ``export FOO=bar`` sets a variable later words may use.

    A value only known at run time (``$(cmd)``, an unknown ``$X``) or over MAX_VAR_CHARS is
    forgotten instead, so its uses are reported as unchecked rather than taken literally
    (and ``A=$A$A`` repeated cannot grow without bound)."""
    if words and words[0].text in ("export", "readonly", "declare", "local"):
        words = [w for w in words[1:] if not w.text.startswith("-")]
    if words and all(_ASSIGNMENT.match(w.text) or _ELEMENT_ASSIGNMENT.match(w.text) for w in words):
        for w in words:
            element = _ELEMENT_ASSIGNMENT.match(w.text)
            if element:
                _assign_element(lexer, element.group(1), element.group(2), element.group(3), w)
                continue
            match = _ASSIGNMENT.match(w.text)
            assert match is not None
            name = match.group(1)
            lexer.vars.pop(name, None)
            lexer.arrays.pop(name, None)
            if w.opaque or len(match.group(2)) > MAX_VAR_CHARS:
                continue
            if w.array is not None:
                lexer.arrays[name] = w.array
            else:
                lexer.vars[name] = match.group(2)


def _assign_element(lexer: _Lexer, name: str, index: str, value: str, word: Word) -> None:
    """``ARR[i]=value`` replaces element i of a known array; any other form (a new index,
    ``$i``, a sparse array) makes the variable unknown, so its uses are reported unchecked."""
    elements = lexer._values(name)
    lexer.vars.pop(name, None)
    lexer.arrays.pop(name, None)
    if elements is None or word.opaque or not index.isdigit() or int(index) >= len(elements):
        return
    elements = list(elements)
    elements[int(index)] = value
    lexer.arrays[name] = elements


def find_launch(text: str, source: str) -> LaunchInvocation:
    """The first ``sglang.launch_server`` command in ``text`` (a bash script), with the
    physical line of every server flag. ConfigError naming ``source`` when there is none."""
    if len(text) > MAX_SCRIPT_BYTES:
        raise ConfigError(f"{source}: script is larger than {MAX_SCRIPT_BYTES} bytes")
    bom = text.startswith("\ufeff")
    lexer = _Lexer(text.removeprefix("\ufeff"), source)
    while True:
        words = lexer.next_command()
        if words is None:
            break
        start = _python_argv_start(words)
        if start is None:
            _record_assignments(lexer, words)
            continue
        prefix_env = {}
        for w in words[:start]:
            match = _ASSIGNMENT.match(w.text)
            if match:
                prefix_env[match.group(1)] = match.group(2)
        python = next(w.text for w in words if _PYTHON.match(os.path.basename(w.text)))
        args = words[start:]
        notes = [(line, note) for line, note in lexer.notes if line >= words[0].line]
        if bom:
            notes.insert(
                0,
                (
                    1,
                    "the script starts with a UTF-8 byte-order mark: bash reads it as part of "
                    "the first word (and the kernel ignores a #! line after it)",
                ),
            )
        if "\r\n" in text:
            crlf_line = text[: text.index("\r\n")].count("\n") + 1
            notes.append(
                (
                    crlf_line,
                    "the script has CRLF (Windows) line endings: bash keeps the \\r, so a "
                    "trailing backslash no longer continues the line",
                )
            )
        later = _later_launch_lines(lexer)
        if later:
            notes.append(
                (
                    later[0],
                    f"another sglang.launch_server command starts here ({len(later)} more in "
                    f"all); only the first, on line {words[0].line}, was checked",
                )
            )
        return LaunchInvocation(
            source=source,
            argv=[w.text for w in args],
            line_no=words[0].line,
            token_lines=[w.line for w in args],
            opaque={i for i, w in enumerate(args) if w.opaque},
            env=prefix_env,
            python=python,
            notes=notes,
            script_vars=dict(lexer.vars),
        )
    raise ConfigError(
        f"{source}: no sglang.launch_server invocation found "
        "(expected e.g. `python3 -m sglang.launch_server --model ...`)"
    )


def _later_launch_lines(lexer: _Lexer) -> list[int]:
    """Lines of further launch commands (a script that starts several servers)."""
    lines: list[int] = []
    try:
        while (words := lexer.next_command()) is not None:
            if _python_argv_start(words) is not None:
                lines.append(words[0].line)
            else:
                _record_assignments(lexer, words)
    except ConfigError:
        pass  # bash runs the first command before it reaches a later syntax error
    return lines


def read_script(path: Path) -> str:
    """A script's text for checking: a regular file of at most MAX_SCRIPT_BYTES; bytes that
    are not UTF-8 become U+FFFD (bash reads bytes, the flags we check are ASCII)."""
    data = read_capped(path, MAX_SCRIPT_BYTES, "script", missing="no such script")
    if b"\0" in data[:80].split(b"\n", 1)[0]:  # bash's own test before it runs a script
        raise ConfigError(f"{path}: a binary file, not a bash launch script")
    return data.replace(b"\0", b"").decode("utf-8", "replace")  # bash drops NUL bytes


def extract_launch_argv(text: str, source: str) -> tuple[list[str], int]:
    """(server flags, line of the command) of the script's ``sglang.launch_server`` call."""
    inv = find_launch(text, source)
    return inv.argv, inv.line_no


@dataclass
class LocatedReport:
    """A validation report whose findings carry where they are: ``run.sh:12`` in a script,
    ``argv[3]`` in a raw argv (``locations`` runs parallel to ``report.findings``)."""

    report: ValidationReport
    locations: list[str]
    source: str | None = None

    def lines(self) -> list[str]:
        """One ``location: severity: message (suggestion)`` line per finding."""
        return [
            f"{loc}: {f.format()}"
            for loc, f in zip(self.locations, self.report.findings, strict=True)
        ]

    def to_dict(self) -> dict[str, Any]:
        data = self.report.to_dict()
        data["source"] = self.source
        for row, location in zip(data["findings"], self.locations, strict=True):
            row["location"] = location
        return data


def check_launch(inv: LaunchInvocation, spec: ArgSpec) -> LocatedReport:
    """Validate a script's launch command: argparse's verdict for its flags plus the
    script-level warnings (a comment that cuts the command, run-time expansions that cannot
    be checked), each located at its script line. Pure."""
    report = validate_argv(
        inv.argv, spec, opaque=inv.opaque, patches=_active_patches(inv), strict=True
    )
    found: list[tuple[FlagIssue, str]] = [
        (FlagIssue("warning", "", note, None, None), f"{inv.source}:{line}")
        for line, note in inv.notes
    ]
    for index in sorted(inv.opaque):
        text = inv.argv[index]
        message = f"{text!r} is only known when the script runs; not checked"
        issue = FlagIssue("warning", text, message, None, index)
        found.append((issue, _token_location(inv, index)))
    found += [(f, _token_location(inv, f.index)) for f in report.findings]
    return LocatedReport(
        ValidationReport(report.version, [f for f, _ in found]),
        [loc for _, loc in found],
        inv.source,
    )


def check_argv(argv: list[str], spec: ArgSpec) -> LocatedReport:
    """Validate raw server flags; a pasted ``python3 -m sglang.launch_server ...`` prefix is
    dropped first. Locations are ``argv[i]`` of the flags. Pure."""
    flags = argv
    if any(item.endswith(LAUNCH_MODULES) for item in argv[:6]):
        try:
            flags = find_launch(shlex.join(argv), "argv").argv
        except ConfigError:
            flags = argv
    report = validate_argv(flags, spec, strict=True)
    locations = [f"argv[{f.index}]" if f.index is not None else "argv" for f in report.findings]
    return LocatedReport(report, locations)


def _token_location(inv: LaunchInvocation, index: int | None) -> str:
    if index is not None and index < len(inv.token_lines):
        return f"{inv.source}:{inv.token_lines[index]}"
    return f"{inv.source}:{inv.line_no}"


def _active_patches(inv: LaunchInvocation) -> list[str]:
    """glmserve runtime patches the script turns on (``export GLMSERVE_PATCHES=a,b``)."""
    value = inv.env.get(PATCHES_ENV) or inv.script_vars.get(PATCHES_ENV, "")
    return [p for p in value.replace(",", " ").split() if p]
