"""Flags: a server argv read once, with argparse's semantics, for every stage that asks.

Before this, nine hand-written scanners re-read ``LaunchSpec.argv`` and disagreed: the spec's
``flag_value`` took the FIRST ``--port``, ``identity.argv_flag`` the LAST, so a profile whose
``--set`` repeated ``--port`` was launched and probed on one port and identity-checked against
another. argparse (what SGLang runs) keeps the last occurrence of a ``store`` option, so
``Flags.get`` does too, and every stage reads argv through here (a test greps the stages for
scanners of their own; the argparse emulator, ``argspec/emulator.py``, is the other reader,
because it judges an argv against one release's parser).

How an argv splits (the rule every scanner had, written once): a token starting with ``--``
starts a flag; ``--name=value`` carries its value; otherwise the tokens up to the next ``--``
token are its values (``--cuda-graph-bs 1 2 4``; a negative number ``-1`` is a value). A
leading token before any flag is kept as an item without a name. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    """One flag as written: ``name`` (None for tokens before the first flag), its values,
    whether written ``--name=value``, and where it sits in the argv (``start`` its first
    token's index, ``end`` one past its last)."""

    name: str | None
    values: tuple[str, ...]
    inline: bool
    start: int
    end: int

    @property
    def value(self) -> str | bool:
        """The first value, or True for a bare flag (``--enable-metrics``)."""
        return self.values[0] if self.values else True


@dataclass(frozen=True)
class Flags:
    """An argv as an ordered tuple of ``Flag`` items (see the module docstring)."""

    argv: tuple[str, ...]
    items: tuple[Flag, ...]

    @classmethod
    def parse(cls, argv: Iterable[object] | None) -> Flags:
        toks = tuple(str(t) for t in argv or ())
        items: list[Flag] = []
        i = 0
        while i < len(toks):
            tok = toks[i]
            if is_flag(tok):
                name, eq, inline = tok.partition("=")
                j = i + 1
                if not eq:
                    while j < len(toks) and not is_flag(toks[j]):
                        j += 1
                values = (inline,) if eq else toks[i + 1 : j]
                items.append(Flag(name, tuple(values), bool(eq), i, j))
                i = j
            else:
                j = i + 1
                while j < len(toks) and not is_flag(toks[j]):
                    j += 1
                items.append(Flag(None, toks[i:j], False, i, j))
                i = j
        return cls(toks, tuple(items))

    def last(self, name: str) -> Flag | None:
        """The occurrence argparse keeps: the last one."""
        for item in reversed(self.items):
            if item.name == name:
                return item
        return None

    def get(self, name: str) -> str | bool | None:
        """Value of ``--name`` (the last occurrence's first value; True for a bare flag;
        None if absent)."""
        item = self.last(name)
        return None if item is None else item.value

    def last_of(self, names: Iterable[str]) -> Flag | None:
        """The last occurrence of any of ``names``: the option strings of one argparse dest
        (``--tp-size``/``--tp``) overwrite each other, whichever is written later wins."""
        wanted = set(names)
        for item in reversed(self.items):
            if item.name in wanted:
                return item
        return None

    def get_any(self, names: Iterable[str]) -> str | bool | None:
        """``get`` for one dest spelled several ways (see ``last_of``)."""
        item = self.last_of(names)
        return None if item is None else item.value

    def as_dict(self, bare: str = "(set)") -> dict[str, str]:
        """``{--name: value}`` in first-appearance order, each the last occurrence's values
        joined by spaces (``bare`` for a flag without one)."""
        out: dict[str, str] = {}
        for item in self.items:
            if item.name is not None:
                out[item.name] = " ".join(item.values) if item.values else bare
        return out

    def without(self, names: Iterable[str]) -> list[str]:
        """The argv less every occurrence of ``names`` and their values."""
        drop = set(names)
        return [t for item in self.items if item.name not in drop for t in self.group(item)]

    def group(self, item: Flag) -> list[str]:
        """``item``'s tokens as written."""
        return list(self.argv[item.start : item.end])

    def groups(self) -> list[list[str]]:
        """The argv as one token list per flag with its values (a script's lines)."""
        return [self.group(item) for item in self.items]

    def flag_at(self, index: int | None) -> str | None:
        """The flag that argv token ``index`` belongs to (None before the first flag)."""
        if index is None or not self.argv:
            return None
        index = min(index, len(self.argv) - 1)
        for item in self.items:
            if item.start <= index < item.end:
                return item.name
        return None


def is_flag(token: str) -> bool:
    """A token that starts a flag: ``--name`` or ``--name=value``."""
    return token.startswith("--")
