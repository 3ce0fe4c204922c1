"""Find the ``sglang.launch_server`` command in a hand-written bash launch script.

Users point ``glmserve validate`` at old scripts like the seed's ``run_tp8_trtllm_mla.sh``.
This reads the script the way bash would split it into words (quotes, backslash-newline
continuations, comments, ``;``/``&&``/``&`` separators, redirections, ``FOO=1`` prefixes,
``exec``/``nohup``/``env`` wrappers) without running it, and remembers the physical line each
word came from, so findings can say ``run.sh:12: ...``. Variables assigned earlier in the
script (``MODEL=...``, ``export TP=8``) are expanded; anything else that bash would expand at
run time (``$UNSET``, ``$(cmd)``, globs) is kept literally and marked opaque.

An unquoted expansion is split into words on blanks as bash does with the default ``IFS``
(``ARGS="--tp-size 8"; ... $ARGS`` is two words, ``"$ARGS"`` stays one, an unquoted empty
``$X`` is no word at all); an assignment's value is never split. A word that still holds an
unquoted ``*``, ``?`` or ``[`` (written literally or coming from an unquoted expansion) is
left as written and marked opaque: bash replaces it by the matching file names on the host
at run time, which glmserve cannot know.

Brace expansion comes first, as in bash (``braces.py``): ``--cuda-graph-bs {1,2,4}`` is three
words and ``{1..4}`` four; quoted braces, ``${...}`` and a variable's value are not expanded,
nor an assignment before the command name. A process substitution ``<(cmd)``/``>(cmd)`` is a
word bash replaces by a path such as ``/dev/fd/63``: kept as written and marked opaque, as a
``$(cmd)`` is.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glmserve.argspec import braces
from glmserve.argspec.emulator import validate_argv
from glmserve.argspec.model import ArgSpec, FlagIssue, ValidationReport
from glmserve.config.spec import PATCHES_ENV
from glmserve.errors import ConfigError
from glmserve.paths import read_capped

LAUNCH_MODULES = ("sglang.launch_server",)
# A launch script is a few KiB. The caps keep a hostile file (or a variable that doubles
# itself line after line) from costing minutes or gigabytes before a verdict.
MAX_SCRIPT_BYTES = 1 << 20
MAX_VAR_CHARS = 64 << 10  # longer assignments are forgotten (their uses stay opaque)
MAX_WORD_CHARS = 1 << 20
_REDIRECT_AHEAD = re.compile(r"\d+[<>](?!\()")  # 2>(cmd) is a word: 2/dev/fd/63
_REDIRECT = re.compile(r"\d*(&?>>?|<<<|<<-|<<|>&|<&|<)(&?\d+|-)?")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_WRAPPERS = {"exec", "nohup", "command", "time", "builtin", "stdbuf", "setsid", "nice"}
_KEYWORDS = {"then", "do", "else", "{", "(", "!", "if", "while", "until", "elif"}
_OPERATORS = ("&&", "||", ";;", ";", "|", "&", "(", ")")
_ASSIGN_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?=")
# ``ARR[2]=value``: one element of an array
_ELEMENT_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\[([^\]]*)\]=(.*)$", re.DOTALL)
# bash's default IFS: an unquoted expansion splits on runs of these, leading/trailing dropped
_IFS_RUN = re.compile(r"[ \t\n]+")
_GLOB_CHARS = frozenset("*?[")
_HEAD_CHARS = 256  # a variable name (and index) longer than this is not an assignment here
# bash treats assignment-like arguments of these builtins as assignments (no splitting)
_DECLARATION_BUILTINS = {"export", "readonly", "declare", "local", "typeset"}
_ARRAY_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\[(@|\*|[0-9]+)\]\}")
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
    array: list[str] | None = None  # the elements of a ``NAME=(a b c)`` array assignment


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


class _Fields:
    """The words one shell word becomes after expansion: bash's field splitting of unquoted
    expansion results (default IFS) and its pathname-expansion check, without running it.

    Quoted text and literal characters never split a word; an unquoted expansion splits
    wherever it holds blanks (so ``a$X`` with ``X=" b"`` is ``a`` and ``b``). Quotes make a
    word even when empty (``""``); an unquoted expansion alone that is empty makes none."""

    def __init__(self, line: int, *, assignment_ok: bool) -> None:
        self.line = line
        self.assignment_ok = assignment_ok
        self.words: list[Word] = []
        self._cur: list[str] | None = None
        self._head = ""  # the first _HEAD_CHARS of the current word: where NAME= would be
        self._cur_opaque = False
        self._cur_glob = False  # an unquoted * ? [ (only a pattern if not an assignment)

    def array_assignment(self) -> bool:
        """At ``(`` right after ``NAME=`` in assignment position: ``NAME=(a b c)``."""
        return (
            self.in_assignment()
            and len(self._head) < _HEAD_CHARS
            and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=", self._head) is not None
        )

    def in_assignment(self) -> bool:
        """``NAME=...`` in assignment position: bash neither splits nor globs its value."""
        return (
            self.assignment_ok
            and not self.words
            and self._cur is not None
            and _ASSIGN_PREFIX.match(self._head) is not None
        )

    def literal(self, text: str, *, quoted: bool, opaque: bool = False) -> None:
        """Text that stays in the current word: quoted, escaped or written as is."""
        if self._cur is None:
            self._cur, self._head, self._cur_opaque, self._cur_glob = [], "", False, False
        self._cur.append(text)
        if len(self._head) < _HEAD_CHARS:
            self._head += text[:_HEAD_CHARS]
        self._cur_opaque = self._cur_opaque or opaque
        self._cur_glob = self._cur_glob or (not quoted and not _GLOB_CHARS.isdisjoint(text))

    def expansion(self, text: str) -> None:
        """The value of an unquoted ``$VAR``: split on blanks unless in an assignment."""
        if self.in_assignment():
            self.literal(text, quoted=True)
            return
        for i, piece in enumerate(_IFS_RUN.split(text)):
            if i:
                self.end_word()
            if piece:
                self.literal(piece, quoted=False)

    def quoted_words(self, elements: list[str]) -> None:
        """``"${ARR[@]}"``: every element its own word, quoted text before and after joined
        to the first and last; an empty array adds no word."""
        for i, element in enumerate(elements):
            if i:
                self.end_word()
            self.literal(element, quoted=True)

    def at_start(self) -> bool:
        """Nothing of the word read yet (where ``~`` is a tilde expansion)."""
        return self._cur is None and not self.words

    def end_word(self) -> None:
        if self._cur is not None:
            opaque = self._cur_opaque or (self._cur_glob and not self.in_assignment())
            self.words.append(Word("".join(self._cur), self.line, opaque))
            self._cur = None

    def finish(self) -> list[Word]:
        self.end_word()
        return self.words


class _Lexer:
    """A small bash word splitter (no execution): enough for launch scripts."""

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self.pos = 0
        self.line = 1
        self.vars: dict[str, str] = {}
        self.arrays: dict[str, list[str]] = {}
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
            if (
                (ch in "<>" and self._peek(1) != "(")
                or self.text.startswith("&>", self.pos)
                or self._redirect_ahead()
            ):
                self._redirect()
                skip_next_word = self._pending_target
                continue
            expanded = self._word(
                assignment_ok=_assignment_position(words), prefix=_prefix_position(words)
            )
            if skip_next_word:
                skip_next_word = False
                if self._heredoc_op:
                    delimiter = " ".join(w.text for w in expanded)
                    self._heredocs.append((delimiter, self._heredoc_op == "<<-"))
                continue
            words.extend(expanded)

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

    def _word(self, *, assignment_ok: bool, prefix: bool = False) -> list[Word]:
        """The words the next shell word expands to (none, one, or several: see _Fields),
        braces first (``braces.expand``), except in an assignment before the command name
        (``prefix``: bash leaves ``A={a,b}`` as written, but ``export A={a,b}`` expands)."""
        start, start_line = self.pos, self.line
        words = self._word_fields(_Fields(start_line, assignment_ok=assignment_ok))
        raw = self.text[start : self.pos]
        if "{" not in raw or (words and words[0].array is not None):
            return words
        if prefix and _ASSIGN_PREFIX.match(raw):
            return words
        try:
            variants = braces.expand(raw)
        except ConfigError as exc:
            raise ConfigError(f"{self.source}:{start_line}: {exc}") from exc
        if variants is None:
            return words
        text, end, end_line = self.text, self.pos, self.line
        out: list[Word] = []
        try:
            for variant in variants:  # each read again as the word bash now sees
                self.text, self.pos, self.line = variant, 0, start_line
                out += self._word_fields(_Fields(start_line, assignment_ok=assignment_ok))
        finally:
            self.text, self.pos, self.line = text, end, end_line
        return out

    def _word_fields(self, fields: _Fields) -> list[Word]:
        """Read one shell word from the text into ``fields`` (see ``_word``)."""
        start_line = fields.line
        size = 0
        while True:
            ch = self._peek()
            if ch == "(" and fields.array_assignment():
                return [self._array_assignment(fields, start_line)]
            if ch in "<>" and self._peek(1) == "(":  # <(cmd): a path known at run time
                text = self._substitution(2, ")", "<(" if ch == "<" else ">(")
                fields.literal(text, quoted=True, opaque=True)
                size += len(text)
                continue
            if ch == "" or ch in " \t\n" or self._at_operator() or ch in "<>":
                break
            if ch == "\\":
                nxt = self._peek(1)
                self._advance(2)
                if nxt != "\n":  # backslash-newline continues; at end of file bash drops it
                    fields.literal(nxt, quoted=True)
                continue
            if ch == "'":
                end = self.text.find("'", self.pos + 1)
                if end == -1:
                    raise ConfigError(f"{self.source}:{start_line}: unterminated single quote")
                fields.literal(self.text[self.pos + 1 : end], quoted=True)
                self._advance(end + 1 - self.pos)
                continue
            if ch == '"':
                size += self._double_quoted(start_line, fields)
            elif ch == "$" and self._peek(1) == "'":
                fields.literal(self._ansi_c_quoted(start_line), quoted=True)
            elif ch == "$" or ch == "`":
                value, sub_opaque = self._expansion()
                text = value if isinstance(value, str) else " ".join(value)
                if sub_opaque:  # only known at run time: kept as written, in this word
                    fields.literal(text, quoted=True, opaque=True)
                else:  # ${ARR[@]} unquoted: its elements, each split (the same as joined)
                    fields.expansion(text)
                size += len(text)
            else:
                tilde = ch == "~" and fields.at_start()
                fields.literal(self._advance(), quoted=False, opaque=tilde)
            if size > MAX_WORD_CHARS:
                raise ConfigError(
                    f"{self.source}:{start_line}: a word expands to more than "
                    f"{MAX_WORD_CHARS} characters; not a launch script glmserve can check"
                )
        return fields.finish()

    def _array_assignment(self, fields: _Fields, start_line: int) -> Word:
        """``NAME=(a "b c" $X)``: the elements are words expanded as any other (an unquoted
        ``$X`` splits). One only known at run time makes the whole array unknown."""
        name_eq = fields.finish()[0].text
        self._advance()
        elements: list[Word] = []
        while (ch := self._peek()) != ")":
            if ch == "":
                raise ConfigError(f"{self.source}:{start_line}: unterminated array ( ... )")
            if ch in " \t\n":
                self._advance()
            elif ch == "\\" and self._peek(1) == "\n":
                self._advance(2)
            elif ch == "#":
                end = self.text.find("\n", self.pos)
                self._advance((len(self.text) if end == -1 else end) - self.pos)
            elif self._at_operator() or ch in "<>":
                raise ConfigError(
                    f"{self.source}:{self.line}: unexpected {ch!r} in an array assignment "
                    "(bash: syntax error)"
                )
            else:
                elements += self._word(assignment_ok=False)
        self._advance()
        texts = [w.text for w in elements]
        opaque = any(w.opaque for w in elements)
        return Word(f"{name_eq}({shlex.join(texts)})", start_line, opaque, texts)

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

    def _double_quoted(self, start_line: int, fields: _Fields) -> int:
        """Add ``"..."`` to ``fields`` (one word unless it holds ``${ARR[@]}``); returns the
        number of characters its expansions added."""
        self._advance()
        parts: list[str] = []
        opaque = False
        size = 0
        has_at = False
        while True:
            ch = self._peek()
            if ch == "":
                raise ConfigError(f"{self.source}:{start_line}: unterminated double quote")
            if ch == '"':
                self._advance()
                if parts or not has_at:  # "" is an empty word; "${EMPTY[@]}" is none
                    fields.literal("".join(parts), quoted=True, opaque=opaque)
                return size
            if ch == "\\" and self._peek(1) in '"\\$`\n':
                nxt = self._peek(1)
                self._advance(2)
                if nxt != "\n":
                    parts.append(nxt)
                continue
            if ch in "$`":
                value, sub_opaque = self._expansion()
                if isinstance(value, list):
                    has_at = True
                    if value:
                        fields.literal("".join(parts), quoted=True, opaque=opaque)
                        fields.quoted_words(value[:-1])
                        if len(value) > 1:
                            fields.end_word()
                        parts, opaque = [value[-1]], False
                    size += sum(map(len, value))
                else:
                    parts.append(value)
                    size += len(value)
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

    def _substitution(self, skip: int, closer: str, opener: str) -> str:
        """The source text of ``$(...)``, a backtick command or ``<(...)``/``>(...)``, from
        its opener (``skip`` characters) to its matching closer; parentheses nest and quoted
        ones do not count."""
        start, start_line = self.pos, self.line
        depth = 0
        self._advance(skip)
        while True:
            ch = self._peek()
            if ch == "":
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
        return self.text[start : self.pos]

    def _values(self, name: str) -> list[str] | None:
        """A script variable's elements (a plain variable is a one-element array)."""
        if name in self.vars:
            return [self.vars[name]]
        return self.arrays.get(name)

    def _expansion(self) -> tuple[str | list[str], bool]:
        """``$VAR``/``${VAR}``/``${ARR[i]}``/``${ARR[*]}`` known from the script expand to
        text, ``${ARR[@]}`` to its list of elements; ``$(..)``, backticks and unknown
        variables stay literal and make the word opaque."""
        match = _VAR.match(self.text, self.pos) or _ARRAY_REF.match(self.text, self.pos)
        if match:
            name = match.group(1) or match.group(2)
            self._advance(match.end() - self.pos)
            values = self._values(name)
            if values is None:
                return match.group(0), True
            index = match.group(2) if match.re is _ARRAY_REF else "0"
            if index == "@":
                return list(values), False
            if index == "*":
                return " ".join(values), False
            return (values[int(index)] if int(index) < len(values) else ""), False
        if self.text.startswith("$(", self.pos):
            return self._substitution(2, ")", "$("), True
        if self._peek() == "`":
            return self._substitution(1, "`", "`"), True
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


def _assignment_position(words: list[Word]) -> bool:
    """Would a ``NAME=value`` word here be an assignment (so bash does not split its value)?
    Yes before the command name, and as an argument of ``export``/``declare``/..."""
    for w in words:
        if w.text in _DECLARATION_BUILTINS:
            return True
        if w.text not in _KEYWORDS and not _ASSIGNMENT.match(w.text):
            return False
    return True


def _prefix_position(words: list[Word]) -> bool:
    """Before the command name, where ``NAME=value`` assigns for the command (bash applies
    no brace expansion there); not after ``export``/``declare``, whose arguments expand."""
    return all(w.text in _KEYWORDS or _ASSIGNMENT.match(w.text) for w in words)


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
