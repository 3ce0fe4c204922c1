"""One check for every verb: an option given twice with two values is refused (exit 2).

click keeps the last value of a repeated option without a word: ``bench --output-len 4
--output-len 8`` measured 8, ``--url A --url B`` benchmarked B. The root group runs this check
over the whole argv before click parses it, verb by verb down nested groups (``results
export``), with each command's own click parser, so aliases (``--output-len`` and
``--random-output-len``), ``--opt=value``, short options and ``--`` count as click counts
them. Options declared repeatable (``--label``, ``--set``) and counters are left alone; a flag
given twice the same way, or a value given twice, is harmless.
"""

from __future__ import annotations

from typing import Any

from typer import core as _typer_core

# typer >= 0.2x vendors its own click (typer._click); older releases use click itself.
_click: Any = getattr(_typer_core, "_click", None) or _typer_core.click

# The parser action that keeps every value given instead of the last one.
_KEEP_ALL = {"store": "append", "store_const": "append_const"}


class RootGroup(_typer_core.TyperGroup):
    """The app's root group: refuses a repeated option before click parses anything, and
    tidies how every command's help reads (``cli.helptext``) once, when typer builds it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from glmserve.cli.helptext import tidy_command

        tidy_command(self)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            refuse_repeated_options(self, ctx, args)
        return super().parse_args(ctx, args)


def refuse_repeated_options(command: Any, ctx: Any, args: list[str]) -> None:
    """Raise click's usage error (exit 2) for the first option of ``command``, or of the
    subcommand ``args`` name at any depth, given more than once with different values.

    A throwaway parse: ``ctx`` is not changed, and argv click would refuse anyway (an unknown
    option) is left for click to refuse at its own point. Except one kind: click's parser
    raises some usage errors (an option's missing value) without a context, so the message
    would point at ``glmserve --help``; those are raised here, the same error with the
    context of the command whose parse failed, so it names that verb's ``--help``."""
    while True:
        parser = command.make_parser(ctx)
        single: set[str] = set()
        # Private to click, but the parser's whole table of options: each one's spellings
        # (aliases included) lead to one entry whose action stores the value.
        for opt in {*parser._long_opt.values(), *parser._short_opt.values()}:
            if opt.action in _KEEP_ALL:
                opt.action = _KEEP_ALL[opt.action]
                single.add(opt.dest)
        try:
            values, rest, order = parser.parse_args(args=list(args))
        except _click.exceptions.ClickException as exc:
            if isinstance(exc, _click.exceptions.UsageError) and exc.ctx is None:
                exc.ctx = ctx  # the same refusal click's own parse makes next, with its verb
                raise
            return
        for param in dict.fromkeys(order):  # as given, each once
            if param.name not in single:
                continue
            given = list(dict.fromkeys(_hashable(v) for v in values[param.name]))
            if len(given) > 1:
                name = "/".join(param.opts + param.secondary_opts)
                raise _click.exceptions.BadOptionUsage(
                    param.opts[0],
                    f"{name} given twice with two values ({given[0]!r}, {given[1]!r}); "
                    "give it once",
                    ctx=ctx,
                )
        group = hasattr(command, "get_command")  # click's Group, typer's TyperGroup
        sub = command.get_command(ctx, rest[0]) if group and rest else None
        if sub is None:
            return
        ctx = sub.context_class(sub, info_name=rest[0], parent=ctx, **sub.context_settings)
        command, args = sub, rest[1:]


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
