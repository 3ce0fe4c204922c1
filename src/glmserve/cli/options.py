"""Options that several verbs take, declared once as ``typing.Annotated`` aliases.

A verb writes ``sets: SetOpt = ()`` instead of repeating ``typer.Option([], "--set", ...)``:
the flag names, short flags, type, bounds and help live here, so ``--set`` (or ``--json``)
means the same thing, spelled the same way, on every verb. The default stays in the verb's
signature, where it differs between verbs (``--concurrency`` is ``1,4,16`` for a sweep,
``1,16`` for a tune). Repeatable options default to ``()``: typer hands the verb a list either
way, and an immutable default is never shared between calls.

Options whose meaning differs between verbs (``--slo``, ``--stall-timeout``, ``--output``,
``--mode``) stay declared in their verb.
"""

from __future__ import annotations

from typing import Annotated

import typer

# -- what to launch, and where ------------------------------------------------------------
ProfileOpt = Annotated[str, typer.Option("--profile", "-p", help="Profile name or YAML path.")]
HostOpt = Annotated[
    str | None, typer.Option("--host", "-H", help="Host from hosts.yaml (default local).")
]
NodesOpt = Annotated[
    str | None,
    typer.Option("--nodes", help="Host group a,b (node 0 first): one server over several nodes."),
]
SetOpt = Annotated[
    list[str],
    typer.Option("--set", help="Override a profile key, e.g. --set server.port=8001 (repeatable)."),
]
SimulateOpt = Annotated[bool, typer.Option("--simulate", help="Launch the simulator, same flags.")]


# A release is ``0.5.9``, ``v0.5.9.post1``, ``0.5.10rc0``: a few dozen characters at most.
MAX_RELEASE_CHARS = 64


def _release_given(value: str | None) -> str | None:
    """``--sglang-version ''`` (an unset shell variable) is refused: verbs test the value for
    truth, so an empty one would silently mean "no release" instead of the one intended.
    A value no release can be (over MAX_RELEASE_CHARS, or with blanks or control characters)
    is refused here too: a 300-character one reached ``Path.is_file`` and was exit 70
    ("File name too long")."""
    if value is not None and not value.strip():
        raise typer.BadParameter(
            "empty; name a release such as 0.5.9 (see validate --list-versions)"
        )
    if value is not None and (
        len(value) > MAX_RELEASE_CHARS or any(c.isspace() or not c.isprintable() for c in value)
    ):
        shown = value if len(value) <= 40 else f"{value[:40]}... ({len(value)} characters)"
        raise typer.BadParameter(
            f"{shown!r} is not a release version; name one such as 0.5.9 "
            "(see validate --list-versions)"
        )
    return value


SglangVersionOpt = Annotated[
    str | None,
    typer.Option(
        "--sglang-version",
        help="SGLang release whose flag names and argparse apply (see validate --list-versions).",
        callback=_release_given,
    ),
]

# -- start-up watching ----------------------------------------------------------------------
ReadyTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout", help="Seconds to wait for READY (default 7200; 0: no deadline).", min=0
    ),
]
StallBudgetOpt = Annotated[
    list[str],
    typer.Option(
        "--stall-budget",
        help="Start-up: PHASE=SECONDS without log progress = STALLED (repeatable; see docs).",
    ),
]
PollOpt = Annotated[
    float, typer.Option("--poll", help="Seconds between reads of the log.", min=0.05)
]
ResumeOpt = Annotated[
    str | None,
    typer.Option("--resume", help="Continue this stored sweep or tune id (finished work kept)."),
]

# -- load ----------------------------------------------------------------------------------
ConcurrencyOpt = Annotated[
    str,
    typer.Option("--concurrency", help="Concurrency levels to bench, a comma list like 1,4,16."),
]
# bench's: None when not given, so a --concurrency that the mode ignores is refused, not dropped
ConcurrencyLevelsOpt = Annotated[
    str | None,
    typer.Option("--concurrency", help="Concurrency levels to bench, a comma list like 1,4,16."),
]
InputLenOpt = Annotated[
    int,
    typer.Option(
        "--input-len", "--random-input-len", help="Prompt tokens per request (random prompts)."
    ),
]
OutputLenOpt = Annotated[
    int,
    typer.Option(
        "--output-len", "--random-output-len", help="Output tokens per request (ignore_eos)."
    ),
]
NumPromptsOpt = Annotated[
    int | None,
    typer.Option(
        "--num-prompts", help="Requests per level (default: decode 5, concurrency 2 x level)."
    ),
]

# -- stored results ------------------------------------------------------------------------
LastOpt = Annotated[int | None, typer.Option("--last", help="The newest N stored results.")]
RunFilterOpt = Annotated[str | None, typer.Option("--run", help="Only this run id (or prefix).")]
ProfileFilterOpt = Annotated[str | None, typer.Option("--profile", help="Only this profile.")]
ModeFilterOpt = Annotated[
    str | None, typer.Option("--mode", help="Only decode | concurrency | rate (bench --mode).")
]
LabelFilterOpt = Annotated[
    list[str], typer.Option("--label", help="Only results with label k=v (repeat).")
]

# -- output --------------------------------------------------------------------------------
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]
WideOpt = Annotated[bool, typer.Option("--wide", help="Every table column, however wide.")]
