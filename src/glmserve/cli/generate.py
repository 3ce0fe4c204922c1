"""Typer parameters generated from a stage's options model (``glmserve.optmodel``).

``@from_options(BenchOptions)`` turns ``def bench(opts: BenchOptions, *, as_json: JsonOpt =
False)`` into the verb typer sees: one parameter per model field (its flags, type, default,
bounds, help, metavar, all read from the model) plus the function's own rendering options.
typer reads ``inspect.signature`` and ``typing.get_type_hints``, so both ``__signature__`` and
``__annotations__`` are set. The verb receives the model, built from the parsed values.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

import typer

from glmserve.optmodel import Opt, Options


def parameter(name: str, info: Any, spec: Opt) -> inspect.Parameter:
    """The typer parameter of one model field."""
    default = ... if info.is_required() else info.get_default(call_default_factory=True)
    if isinstance(default, list):
        default = tuple(default)  # typer hands a list either way; never a shared one
    kw: dict[str, Any] = {"help": spec.help}
    if spec.metavar is not None:
        kw["metavar"] = spec.metavar
    if spec.callback is not None:
        kw["callback"] = _usage_errors(spec.callback)
    if spec.argument:
        info_obj = typer.Argument(default, **kw)
    else:
        if spec.min is not None:
            kw["min"] = spec.min
        if spec.max is not None:
            kw["max"] = spec.max
        info_obj = typer.Option(default, *spec.flags, **kw)
    return inspect.Parameter(
        name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=info_obj, annotation=info.annotation
    )


def parameters(model: type[Options]) -> list[inspect.Parameter]:
    return [parameter(name, info, spec) for name, info, spec in model.cli_fields()]


def from_options(
    model: type[Options], after: str | None = None
) -> Callable[[Callable[..., Any]], Callable[..., None]]:
    """Decorate ``fn(opts: model, **own)``: its typer signature is the model's fields, then
    ``fn``'s own keyword parameters (rendering: ``--json``, ``--wide``), or those right after
    the field ``after`` (where ``--help`` has always listed them)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., None]:
        hints = typing.get_type_hints(fn, include_extras=True)
        own = [
            p.replace(annotation=hints[p.name], kind=inspect.Parameter.POSITIONAL_OR_KEYWORD)
            for p in list(inspect.signature(fn).parameters.values())[1:]
        ]
        fields = parameters(model)
        own_names = {p.name for p in own}

        @functools.wraps(fn)
        def verb(**values: Any) -> None:
            mine = {k: values.pop(k) for k in own_names}
            fn(model(**values), **mine)

        at = next((i + 1 for i, p in enumerate(fields) if p.name == after), len(fields))
        params = [*fields[:at], *own, *fields[at:]]
        verb.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
        verb.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        del verb.__wrapped__  # typer must read the generated signature, not fn's
        return verb

    return decorate


def _usage_errors(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A model's parse-time check (ValueError) as click's usage error (exit 2, the flag named)."""

    def callback(value: Any) -> Any:
        try:
            return check(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None

    return callback


def annotated(model: type[Options], name: str) -> Any:
    """``Annotated[type, typer.Option(...)]`` of one model field, for a verb not generated
    from that model that takes the same option (``--set`` on ``launch``): spelled once."""
    info = model.model_fields[name]
    spec = next(m for m in info.metadata if isinstance(m, Opt))
    param = parameter(name, info, spec)
    opt_info = param.default
    opt_info.default = ...  # the verb's own default (or the model's, given in its signature)
    return typing.Annotated[info.annotation, opt_info]
