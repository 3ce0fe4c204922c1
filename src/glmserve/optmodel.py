"""Options declared once: a stage's options model names each option's flags, help and metavar.

A stage (``bench``, ``sweep``, ``tune``) owns one pydantic model whose fields are its options:
the field's type and default are the option's, and an ``Opt`` in its ``Annotated`` metadata
carries what the command line needs (flag spellings, bench_serving aliases included, help,
metavar, the bounds click enforces). ``glmserve.cli.generate`` builds the verb's typer
parameters from the model, so a flag, default or bound is written in exactly one place;
adding an option is adding one field. Cross-field rules live in the model's methods, where
the verb and every other caller find them.

A foundation module (no stage logic): the models import it, it imports nothing of glmserve.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict


@dataclass(frozen=True)
class Opt:
    """How one model field is spelled on the command line.

    ``flags``: the spellings, the first one named in errors (``"--a/--no-a"`` for a boolean
    pair); ``argument``: a positional argument instead (no flags); ``min``/``max``: bounds
    click enforces while parsing (its own message); ``callback``: click's, for a value that
    must be refused while parsing."""

    flags: tuple[str, ...] = ()
    help: str = ""
    metavar: str | None = None
    min: float | None = None
    max: float | None = None
    argument: bool = False
    callback: Callable[[Any], Any] | None = None


def opt(*flags: str, help: str, **kw: Any) -> Opt:
    """``Annotated[int, opt("--input-len", "--random-input-len", help="...")] = 128``."""
    return Opt(flags=flags, help=help, **kw)


def arg(help: str, metavar: str | None = None) -> Opt:
    """A positional argument (``RUN``)."""
    return Opt(help=help, metavar=metavar, argument=True)


class Options(BaseModel):
    """Base of every stage's options model: frozen (a parsed command line does not change)
    and closed (a field the model does not declare is a programming error, not ignored)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)
    # The order ``--help`` lists the fields in, where composing models would list the
    # smaller model's first; unlisted fields follow in declaration order.
    cli_order: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def cli_fields(cls) -> Iterator[tuple[str, Any, Opt]]:
        """``(name, FieldInfo, Opt)`` of every field given on the command line, in order."""
        names = list(cls.model_fields)
        rank = {n: i for i, n in enumerate(cls.cli_order)}
        for name in sorted(names, key=lambda n: (rank.get(n, len(rank)), names.index(n))):
            info = cls.model_fields[name]
            spec = next((m for m in info.metadata if isinstance(m, Opt)), None)
            if spec is not None:
                yield name, info, spec

    @classmethod
    def default(cls, name: str) -> Any:
        """The declared default of field ``name`` (for a caller outside the CLI)."""
        return cls.model_fields[name].get_default(call_default_factory=True)


def same_as(model: type[Options], name: str) -> Opt:
    """The ``Opt`` of ``model``'s field ``name``: a larger stage that composes ``model`` and
    needs another default re-declares only the default, with the flags and help it had."""
    return next(m for m in model.model_fields[name].metadata if isinstance(m, Opt))
