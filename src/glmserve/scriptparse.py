"""Find the ``sglang.launch_server`` command in a hand-written bash launch script.

Users point ``glmserve validate`` at old scripts like the seed's ``run_tp8_trtllm_mla.sh``.
This reads the script the way bash would split it into words (quotes, backslash-newline
continuations, comments, ``;``/``&&``/``&`` separators, redirections, ``FOO=1`` prefixes,
``exec``/``nohup``/``env`` wrappers) without running it, and remembers the physical line each
word came from, so findings can say ``run.sh:12: ...``. Variables assigned earlier in the
script (``MODEL=...``, ``export TP=8``) are expanded; anything else that bash would expand at
run time (``$UNSET``, ``$(cmd)``, globs) is kept literally and marked opaque.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glmserve.argspec import ArgSpec, Finding, ValidationReport, validate_argv
from glmserve.errors import ConfigError
from glmserve.paths import read_capped
from glmserve.spec import PATCHES_ENV

LAUNCH_MODULES = ("sglang.launch_server",)
# A launch script is a few KiB. The caps keep a hostile file (or a variable that doubles
# itself line after line) from costing minutes or gigabytes before a verdict.
MAX_SCRIPT_BYTES = 1 << 20
MAX_VAR_CHARS = 64 << 10  # longer assignments are forgotten (their uses stay opaque)
MAX_WORD_CHARS = 1 << 20
_REDIRECT_AHEAD = re.compile(r"\d+[<>]")
_REDIRECT = re.compile(r"\d*(&?>>?|<<<|<<-|<<|>&|<&|<)(&?\d+|-)?")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_WRAPPERS = {"exec", "nohup", "command", "time", "builtin", "stdbuf", "setsid", "nice"}
_KEYWORDS = {"then", "do", "else", "{", "(", "!", "if", "while", "until", "elif"}
_OPERATORS = ("&&", "||", ";;", ";", "|", "&", "(", ")")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
# python options that take a separate argument (``python3 -X dev -m ...``).
_PY_OPTS_WITH_ARG = {"-X", "-W", "-c", "-m"}


@dataclass
class Word:
    """One shell word: its text after quote removal, the line it starts on, and whether it
    still holds something only bash can expand at run time."""

    text: str
    line: int
    opaque: bool = False


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


class _Lexer:
    """A small bash word splitter (no execution): enough for launch scripts."""

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self.pos = 0
        self.line = 1
        self.vars: dict[str, str] = {}
        self.notes: list[tuple[int, str]] = []
        self._heredocs: list[tuple[str, bool]] = []

    def _peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.text[index] if index < len(self.text) else ""

    def _advance(self, count: int = 1) -> str:
        chunk = self.text[self.pos : self.pos + count]
        self.line += chunk.count("\n")
        self.pos += count
        return chunk

    def next_command(self) -> list[Word] | None:
        """Words of the next simple command, or None at end of text."""
        words: list[Word] = []
        skip_next_word = False
        while True:
            ch = self._peek()
            if ch == "":
                return words if words else None
            if ch == "\\" and self._peek(1) in ("\n", ""):  # continuation, or a dropped EOF \\
                self._advance(2)
                continue
            if ch in " \t":
                self._advance()
                continue
            if ch == "\n":
                self._advance()
                self._skip_heredoc_bodies()
                if words:
                    return words
                continue
            if ch == "#":
                start_line = self.line
                end = self.text.find("\n", self.pos)
                end = len(self.text) if end == -1 else end
                comment = self.text[self.pos : end]
                self._advance(end - self.pos)
                line_start = self.text.rfind("\n", 0, self.pos - len(comment)) + 1
                at_line_start = not self.text[line_start : self.pos - len(comment)].strip()
                if words and at_line_start:
                    self.notes.append(
                        (
                            start_line,
                            "a comment inside a continued command ends the command there; "
                            "the lines after it run as a separate command",
                        )
                    )
                continue
            if self._operator() is not None:
                if words:
                    return words
                continue
            if ch in "<>" or self.text.startswith("&>", self.pos) or self._redirect_ahead():
                self._redirect()
                skip_next_word = self._pending_target
                continue
            word = self._word()
            if skip_next_word:
                skip_next_word = False
                if self._heredoc_op:
                    self._heredocs.append((word.text, self._heredoc_op == "<<-"))
                continue
            words.append(word)

    def _operator(self) -> str | None:
        for op in _OPERATORS:
            if self.text.startswith(op, self.pos):
                if op == "&" and self._peek(1) == ">":
                    return None
                self._advance(len(op))
                return op
        return None

    def _redirect_ahead(self) -> bool:
        # match at pos, never on a slice: slicing the rest of the text per word is quadratic
        return _REDIRECT_AHEAD.match(self.text, self.pos) is not None

    def _redirect(self) -> None:
        """Consume ``2>&1``, ``>> log``, ``< in``, ``&>``: the target word, if separate, is
        skipped by the caller."""
        match = _REDIRECT.match(self.text, self.pos)
        assert match is not None
        self._advance(match.end() - self.pos)
        self._pending_target = match.group(2) is None
        self._heredoc_op = match.group(1) if match.group(1) in ("<<", "<<-") else ""

    _pending_target = False
    _heredoc_op = ""

    def _skip_heredoc_bodies(self) -> None:
        """After the newline that ends a line with ``<<EOF``, the body up to ``EOF`` is data,
        not commands (a script that writes another launch script keeps its text there)."""
        pending, self._heredocs = self._heredocs, []
        for delimiter, strip_tabs in pending:
            while self.pos < len(self.text):
                end = self.text.find("\n", self.pos)
                end = len(self.text) if end == -1 else end
                line = self.text[self.pos : end]
                self._advance(end - self.pos + (1 if end < len(self.text) else 0))
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break

    def _word(self) -> Word:
        start_line = self.line
        parts: list[str] = []
        opaque = False
        size = 0
        while True:
            ch = self._peek()
            if ch == "" or ch in " \t\n" or self._at_operator() or ch in "<>":
                break
            if ch == "\\":
                nxt = self._peek(1)
                self._advance(2)
                if nxt != "\n":  # backslash-newline continues; at end of file bash drops it
                    parts.append(nxt)
                continue
            if ch == "'":
                end = self.text.find("'", self.pos + 1)
                if end == -1:
                    raise ConfigError(f"{self.source}:{start_line}: unterminated single quote")
                parts.append(self.text[self.pos + 1 : end])
                self._advance(end + 1 - self.pos)
                continue
            if ch == '"':
                text, dq_opaque = self._double_quoted(start_line)
                parts.append(text)
                size += len(text)
                opaque = opaque or dq_opaque
            elif ch == "$" and self._peek(1) == "'":
                parts.append(self._ansi_c_quoted(start_line))
            elif ch == "$" or ch == "`":
                text, sub_opaque = self._expansion()
                parts.append(text)
                size += len(text)
                opaque = opaque or sub_opaque
            else:
                if ch in "*?[" and not _ASSIGNMENT.match("".join(parts)):
                    opaque = True  # a glob (bash does not glob an assignment's value)
                elif ch == "~" and not parts:
                    opaque = True
                parts.append(self._advance())
            if size > MAX_WORD_CHARS:
                raise ConfigError(
                    f"{self.source}:{start_line}: a word expands to more than "
                    f"{MAX_WORD_CHARS} characters; not a launch script glmserve can check"
                )
        return Word("".join(parts), start_line, opaque)

    def _ansi_c_quoted(self, start_line: int) -> str:
        """``$'...'``: backslash escapes, ``\\'`` does not end it; an escape Python cannot
        decode (``\\x`` alone, ``\\N{..}``) stays literal, as bash leaves it."""
        i = self.pos + 2
        while i < len(self.text) and self.text[i] != "'":
            i += 2 if self.text[i] == "\\" else 1
        if i >= len(self.text):
            raise ConfigError(f"{self.source}:{start_line}: unterminated $'...' quote")
        raw = self.text[self.pos + 2 : i]
        self._advance(i + 1 - self.pos)
        try:
            return raw.encode("latin-1", "backslashreplace").decode("unicode_escape")
        except UnicodeDecodeError:
            return raw

    def _at_operator(self) -> bool:
        for op in _OPERATORS:
            if self.text.startswith(op, self.pos):
                return not (op == "&" and self._peek(1) == ">")
        return False

    def _double_quoted(self, start_line: int) -> tuple[str, bool]:
        self._advance()
        parts: list[str] = []
        opaque = False
        size = 0
        while True:
            ch = self._peek()
            if ch == "":
                raise ConfigError(f"{self.source}:{start_line}: unterminated double quote")
            if ch == '"':
                self._advance()
                return "".join(parts), opaque
            if ch == "\\" and self._peek(1) in '"\\$`\n':
                nxt = self._peek(1)
                self._advance(2)
                if nxt != "\n":
                    parts.append(nxt)
                continue
            if ch in "$`":
                text, sub_opaque = self._expansion()
                parts.append(text)
                size += len(text)
                opaque = opaque or sub_opaque
                if size > MAX_WORD_CHARS:
                    raise ConfigError(
                        f"{self.source}:{start_line}: a quoted word expands to more than "
                        f"{MAX_WORD_CHARS} characters; not a launch script glmserve can check"
                    )
                continue
            parts.append(self._advance())

    def _skip_quoted_in_substitution(self, quote: str) -> None:
        """Step over a quoted string inside ``$(...)``: parentheses in it (e.g. ``awk -F'('``)
        do not nest. At EOF the caller reports the unterminated ``$(``."""
        self._advance()
        while (ch := self._peek()) != "" and ch != quote:
            if quote == '"' and ch == "\\":
                self._advance()
            self._advance()
        if ch == quote:
            self._advance()

    def _expansion(self) -> tuple[str, bool]:
        """``$VAR``/``${VAR}`` known from the script expand; ``$(..)``, backticks and
        unknown variables stay literal and make the word opaque."""
        match = _VAR.match(self.text, self.pos)
        if match:
            name = match.group(1) or match.group(2)
            self._advance(match.end() - self.pos)
            if name in self.vars:
                return self.vars[name], False
            return match.group(0), True
        if self.text.startswith("$(", self.pos) or self._peek() == "`":
            closer = ")" if self._peek() == "$" else "`"
            start, start_line = self.pos, self.line
            depth = 0
            self._advance(2 if closer == ")" else 1)
            while True:
                ch = self._peek()
                if ch == "":
                    opener = "$(" if closer == ")" else "`"
                    raise ConfigError(
                        f"{self.source}:{start_line}: unterminated {opener} (bash stops with "
                        f"'unexpected EOF while looking for matching `{closer}'')"
                    )
                if ch == "\\":  # an escaped character, whatever it is
                    self._advance()
                elif closer == ")" and ch in "'\"":
                    self._skip_quoted_in_substitution(ch)
                    continue
                elif closer == ")" and ch == "(":
                    depth += 1
                elif ch == closer:
                    if depth == 0:
                        self._advance()
                        break
                    depth -= 1
                self._advance()
            return self.text[start : self.pos], True
        if self.text.startswith("${", self.pos):
            end = self.text.find("}", self.pos)
            if end == -1:
                raise ConfigError(f"{self.source}:{self.line}: unterminated ${{ (no closing }})")
            raw = self.text[self.pos : end + 1]
            self._advance(end + 1 - self.pos)
            return raw, True
        if self._peek(1) in "@*#?$!0123456789-":
            raw = self._advance(2)
            return raw, True
        return self._advance(), False


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
    if words and all(_ASSIGNMENT.match(w.text) for w in words):
        for w in words:
            match = _ASSIGNMENT.match(w.text)
            assert match is not None
            if w.opaque or len(match.group(2)) > MAX_VAR_CHARS:
                lexer.vars.pop(match.group(1), None)
            else:
                lexer.vars[match.group(1)] = match.group(2)


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
    report = validate_argv(inv.argv, spec, opaque=inv.opaque, patches=_active_patches(inv))
    found: list[tuple[Finding, str]] = [
        (Finding("warning", "", note, None, None), f"{inv.source}:{line}")
        for line, note in inv.notes
    ]
    for index in sorted(inv.opaque):
        text = inv.argv[index]
        message = f"{text!r} is only known when the script runs; not checked"
        found.append((Finding("warning", text, message, None, index), _token_location(inv, index)))
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
    report = validate_argv(flags, spec)
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
