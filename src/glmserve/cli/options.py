"""Options that several verbs take, as ``typing.Annotated`` aliases.

The verbs ``bench``, ``sweep``, ``tune`` and ``launch`` are generated from their stage's
options model (``glmserve.cli.generate``). The other verbs (``check``, ``render``,
``validate``...) take some of the same options: their aliases here are derived from the
models' fields (``annotated``), so ``--set`` means the same thing, spelled and explained the
same way, on every verb, declared once. Repeatable options default to ``()`` in a verb's
signature: typer hands the verb a list either way. Options of stored results and output
(``--last``, ``--json``) belong to no stage and are declared here.
"""

from __future__ import annotations

from typing import Annotated

import typer

from glmserve.cli.generate import annotated
from glmserve.deploy.options import (
    LaunchOptions,
    PlaceOptions,
    ReleaseOptions,
    StartOptions,
)

# -- declared by the stages' options models, for the verbs not generated from one -----------
ProfileOpt = annotated(LaunchOptions, "profile")
HostOpt = annotated(PlaceOptions, "host")
NodesOpt = annotated(PlaceOptions, "nodes")
SetOpt = annotated(StartOptions, "sets")
SimulateOpt = annotated(StartOptions, "simulate")
SglangVersionOpt = annotated(ReleaseOptions, "sglang_version")
ReadyTimeoutOpt = annotated(StartOptions, "timeout")
StallBudgetOpt = annotated(StartOptions, "stall_budgets")
PollOpt = annotated(LaunchOptions, "poll")

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
