"""A small bash word splitter for launch scripts: words as bash would split them, never run.

It reads a script the way bash would split it into words (quotes, backslash-newline
continuations, comments, ``;``/``&&``/``&`` separators, redirections, ``FOO=1`` prefixes,
``exec``/``nohup``/``env`` wrappers) without running it, and remembers the physical line each
word came from. Variables assigned earlier in the script (``MODEL=...``, ``export TP=8``) are
expanded; anything else that bash would expand at run time (``$UNSET``, ``$(cmd)``, globs) is
kept literally and marked opaque.

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

import re
import shlex
from dataclasses import dataclass

from glmserve.argspec import braces
from glmserve.errors import ConfigError

# A word longer than this is a hostile script (or a variable that doubles itself line after
# line): refused before it costs minutes or gigabytes (the script's own cap: launch_script).
MAX_WORD_CHARS = 1 << 20
_REDIRECT_AHEAD = re.compile(r"\d+[<>](?!\()")  # 2>(cmd) is a word: 2/dev/fd/63
_REDIRECT = re.compile(r"\d*(&?>>?|<<<|<<-|<<|>&|<&|<)(&?\d+|-)?")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_KEYWORDS = {"then", "do", "else", "{", "(", "!", "if", "while", "until", "elif"}
_OPERATORS = ("&&", "||", ";;", ";", "|", "&", "(", ")")
_ASSIGN_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?=")
# bash's default IFS: an unquoted expansion splits on runs of these, leading/trailing dropped
_IFS_RUN = re.compile(r"[ \t\n]+")
_GLOB_CHARS = frozenset("*?[")
_HEAD_CHARS = 256  # a variable name (and index) longer than this is not an assignment here
# bash treats assignment-like arguments of these builtins as assignments (no splitting)
_DECLARATION_BUILTINS = {"export", "readonly", "declare", "local", "typeset"}
_ARRAY_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\[(@|\*|[0-9]+)\]\}")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass
class Word:
    """One shell word: its text after quote removal, the line it starts on, and whether it
    still holds something only bash can expand at run time."""

    text: str
    line: int
    opaque: bool = False
    array: list[str] | None = None  # the elements of a ``NAME=(a b c)`` array assignment


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
