"""Every rich table and view the verbs print, built from the data the library returns.

Library modules return dicts and dataclasses (a ``BenchResult``, a compare table, sweep rows,
a trace analysis, a deployment's check/launch/stop outcome); how they look on a terminal, and
the ``--json`` shapes of the lifecycle verbs, are decided here, so a verb reads parse -> call
-> render and a new column is one edit in one module. Cells that come from users or logs
(profile names, descriptions, root-cause lines) are ``Text``: data, never rich markup.

A single run and a host group come from the one :class:`~glmserve.deploy.deployment.Deployment`
result; where their shapes differ by contract (``launch --json``: ``{run, verdict}`` against
``{group_id, runs, verdict, stopped}``; group check rows carry their node), it is decided here.

Imported on every start-up by the verb modules, so it imports no stage module at the top:
what it needs from ``bench`` or ``diagnose`` is imported where it is used.

One module per verb module it renders for (``bench`` for ``cli/bench_cmds.py``, ``lifecycle``
for ``cli/lifecycle_cmds.py``, ...), with ``common`` holding the cell helpers they share; every
name is re-exported here, so ``from glmserve.cli.views import render_table`` keeps working.
"""

from glmserve.cli.views.bench import (
    PlainProgress,
    RichProgress,
    render_table,
    sweep_line,
    table_columns,
    wide_cells,
)
from glmserve.cli.views.common import cell, plain
from glmserve.cli.views.diagnose import render_diagnosis
from glmserve.cli.views.lifecycle import (
    blocking_error,
    brief_log_line,
    check_json,
    fmt_s,
    interrupted_start,
    keeps_running,
    launch_json,
    launched,
    note,
    print_check,
    print_runs,
    print_status,
    print_stop,
    ready,
    say,
    stop_title,
    verdict_error,
    warn_unrecorded,
    watch_progress,
)
from glmserve.cli.views.profiles import profiles_table
from glmserve.cli.views.results import list_table, render_compare
from glmserve.cli.views.sweep import print_analysis, print_sweep

__all__ = [
    "PlainProgress",
    "RichProgress",
    "blocking_error",
    "brief_log_line",
    "cell",
    "check_json",
    "fmt_s",
    "interrupted_start",
    "keeps_running",
    "launch_json",
    "launched",
    "list_table",
    "note",
    "plain",
    "print_analysis",
    "print_check",
    "print_runs",
    "print_status",
    "print_stop",
    "print_sweep",
    "profiles_table",
    "ready",
    "render_compare",
    "render_diagnosis",
    "render_table",
    "say",
    "stop_title",
    "sweep_line",
    "table_columns",
    "verdict_error",
    "warn_unrecorded",
    "watch_progress",
    "wide_cells",
]
