"""Bash's brace expansion of one word, as written in a script (before any other expansion).

``--cuda-graph-bs {1,2,4}`` is three words to bash (``1 2 4``) and ``{1..4}`` four; reading
them literally made ``validate`` check a flag value no server ever receives. Bash expands
braces first, on the word's source text, so quoting decides: a quoted or escaped ``{`` ``,``
``}`` is text, ``${...}``, ``$(...)``, backticks and ``<(...)`` are opaque to it, and what a
variable holds is never brace-expanded. ``expand`` follows bash 5's ``braces.c``:

- ``pre{a,b}post`` -> ``preapost prebpost``; nested (``{a,{b,c}d}``) and several per word
  (``{a,b}{1,2}``) multiply left to right;
- ``{x..y[..incr]}`` with two integers (zero-padded to the wider one when either is written
  with a leading zero; incr's sign ignored, 0 read as 1) or two single letters;
- anything else keeps its brace as text and expansion goes on after it: ``{a}``, ``{}``,
  ``{1..a}``, ``{a,b`` (no close), ``{x{a,b}}`` -> ``{xa} {xb}``.

The result is source text again (quotes kept), which the lexer reads word by word.
"""

from __future__ import annotations

import re

from glmserve.errors import ConfigError

# A launch script's braces make a handful of words; a {1..100000000} would hang the check.
MAX_BRACE_WORDS = 10_000
_INTMAX = 2**63 - 1  # bash's intmax_t: a larger bound leaves the braces as text
_SEQ = re.compile(r"([+-]?\d+|[A-Za-z])\.\.([+-]?\d+|[A-Za-z])(?:\.\.([+-]?\d+))?")


def expand(raw: str) -> list[str] | None:
    """The words (as source text) ``raw`` brace-expands to, or None when it has no brace
    expansion (the common case: the caller keeps its word as lexed). ConfigError when the
    expansion passes MAX_BRACE_WORDS."""
    if "{" not in raw:
        return None
    atoms = _atoms(raw)
    variants = _expand(atoms)
    if len(variants) == 1 and variants[0] == atoms:
        return None
    return ["".join(v) for v in variants]


def _expand(atoms: list[str]) -> list[list[str]]:
    i = 0
    while i < len(atoms):
        if atoms[i] != "{":
            i += 1
            continue
        close = _matching_close(atoms, i)
        if close is None:
            i += 1
            continue
        inner = atoms[i + 1 : close]
        parts = _split_commas(inner)
        if len(parts) > 1:
            middles = [m for p in parts for m in _expand(p)]
        else:
            seq = _sequence("".join(inner)) if all(len(a) == 1 for a in inner) else None
            if seq is None:
                i += 1  # this brace is text; a later one may still expand
                continue
            middles = [[w] for w in seq]
        tails = _expand(atoms[close + 1 :])
        if len(middles) * len(tails) > MAX_BRACE_WORDS:
            raise ConfigError(f"brace expansion makes more than {MAX_BRACE_WORDS} words")
        head = atoms[:i]
        return [head + m + t for m in middles for t in tails]
    return [atoms]


def _matching_close(atoms: list[str], start: int) -> int | None:
    depth = 0
    for j in range(start + 1, len(atoms)):
        if atoms[j] == "{":
            depth += 1
        elif atoms[j] == "}":
            if depth == 0:
                return j
            depth -= 1
    return None


def _split_commas(inner: list[str]) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    depth = 0
    for a in inner:
        if a == "{":
            depth += 1
        elif a == "}":
            depth -= 1
        if a == "," and depth == 0:
            parts.append([])
        else:
            parts[-1].append(a)
    return parts


def _sequence(text: str) -> list[str] | None:
    """``x..y[..incr]`` as bash's ``expand_seqterm`` spells it, or None (then text)."""
    m = _SEQ.fullmatch(text)
    if not m:
        return None
    lhs, rhs, inc = m.groups()
    step = abs(int(inc)) if inc is not None else 1
    if step > _INTMAX:
        return None
    step = step or 1
    if lhs.isalpha() != rhs.isalpha():
        return None
    if lhs.isalpha():
        a, b = ord(lhs), ord(rhs)
        codes = range(a, b + 1, step) if a <= b else range(a, b - 1, -step)
        return [chr(c) for c in codes]
    a, b = int(lhs), int(rhs)
    if abs(a) > _INTMAX or abs(b) > _INTMAX:
        return None
    if abs(b - a) // step + 1 > MAX_BRACE_WORDS:
        raise ConfigError(f"brace expansion makes more than {MAX_BRACE_WORDS} words")
    width = max(_zero_width(lhs), _zero_width(rhs))
    nums = range(a, b + 1, step) if a <= b else range(a, b - 1, -step)
    return [f"{n:0{width}d}" if width else str(n) for n in nums]


def _zero_width(s: str) -> int:
    """The width bash pads to for one end written with a leading zero (``01``, ``-01``)."""
    if (len(s) > 1 and s[0] == "0") or (len(s) > 2 and s[0] == "-" and s[1] == "0"):
        return len(s)
    return 0


# -- the word's source as atoms: one structural character, or one quoted/opaque chunk -------


def _atoms(raw: str) -> list[str]:
    """``raw`` cut so that only unquoted ``{`` ``,`` ``}`` stand alone: a quoted string, an
    escape, ``$'...'``, ``${...}``, ``$(...)``, a backtick or ``<(...)``/``>(...)`` is one
    atom (bash does not expand braces inside them)."""
    atoms: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == "\\":
            j = i + 2
        elif c == "'":
            j = _find(raw, "'", i + 1)
        elif c == '"':
            j = _end_double(raw, i + 1)
        elif raw.startswith("$'", i):
            j = _end_ansi(raw, i + 2)
        elif raw.startswith("$(", i):
            j = _end_parens(raw, i + 2)
        elif raw.startswith("${", i):
            j = _find(raw, "}", i + 2)
        elif c == "`":
            j = _end_backtick(raw, i + 1)
        elif c in "<>" and raw.startswith("(", i + 1):
            j = _end_parens(raw, i + 2)
        else:
            j = i + 1
        atoms.append(raw[i : min(j, n)])
        i = min(j, n)
    return atoms


def _find(raw: str, ch: str, start: int) -> int:
    end = raw.find(ch, start)
    return len(raw) if end == -1 else end + 1


def _end_ansi(raw: str, i: int) -> int:
    while i < len(raw) and raw[i] != "'":
        i += 2 if raw[i] == "\\" else 1
    return i + 1


def _end_backtick(raw: str, i: int) -> int:
    while i < len(raw) and raw[i] != "`":
        i += 2 if raw[i] == "\\" else 1
    return i + 1


def _end_double(raw: str, i: int) -> int:
    while i < len(raw):
        c = raw[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif raw.startswith("$(", i):
            i = _end_parens(raw, i + 2)
        elif raw.startswith("${", i):
            i = _find(raw, "}", i + 2)
        elif c == "`":
            i = _end_backtick(raw, i + 1)
        else:
            i += 1
    return i


def _end_parens(raw: str, i: int) -> int:
    """Past the ``)`` closing a ``$(``/``<(`` whose body starts at ``i`` (quotes in it do
    not count their parentheses, as the lexer's own scan)."""
    depth = 0
    while i < len(raw):
        c = raw[i]
        if c == "\\":
            i += 2
            continue
        if c in "'\"":
            i = _find(raw, c, i + 1) if c == "'" else _end_double(raw, i + 1)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                return i + 1
            depth -= 1
        i += 1
    return i
