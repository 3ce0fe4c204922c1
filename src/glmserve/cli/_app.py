"""The Typer app every verb module registers on, plus the few output helpers verbs share.

Verb modules (``cli/<area>.py``) parse options (the shared ones declared once in
``cli/options.py``), call one library function per verb and render what it returns through
``cli/views/``; they raise ``glmserve.errors`` exceptions (Ctrl-C included: ``Interrupted``)
and never call ``sys.exit`` themselves: ``cli.main`` returns the exit status.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import typer
from rich.console import Console

from glmserve.cli.repeated_options import RootGroup

app = typer.Typer(
    name="glmserve",
    cls=RootGroup,  # refuses an option given twice with two values, on every verb
    help="Launch, watch, benchmark and compare SGLang server configurations on GPU hosts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

# stdout carries data (tables, --json); stderr carries progress and errors. Off a TTY (CI
# logs, pipes) rich would wrap tables at 80 columns: give them room instead, unless the user
# set COLUMNS, which wins everywhere (an audit: `COLUMNS=80 ... | cat` came out 150 wide).


def _width(tty: bool) -> int | None:
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    return None if tty else 160


def _isatty(stream: Any) -> bool:
    """A std stream is None when its fd was closed before start (``>&-``)."""
    return stream is not None and stream.isatty()


out = Console(soft_wrap=True, width=_width(_isatty(sys.stdout)))
err = Console(stderr=True, soft_wrap=True, width=_width(_isatty(sys.stderr)))

STATE: dict[str, Any] = {"debug": False}


def is_interactive() -> bool:
    """True when stderr is a TTY: rich progress; otherwise plain one-line progress (CI)."""
    return _isatty(sys.stderr)


def emit_json(data: Any) -> None:
    """Write ``data`` as strict JSON on stdout (never through rich, so it is machine-parseable).

    Strict: a non-finite number that slipped past the input checks is written as null and
    named in a warning on stderr (``glmserve.strictjson`` says why not an error)."""
    from glmserve.strictjson import dumps

    text, bad = dumps(data, indent=2, sort_keys=False)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    warn_non_finite(bad, "null")


def warn_non_finite(bad: list[str], written_as: str) -> None:
    """Name, on stderr, the non-finite numbers an output replaced (``emit_json``, and the
    export's own csv/jsonl text): each is a glmserve bug to report, and the README promises
    it is named."""
    if bad:
        shown = ", ".join(bad[:5]) + (f" (+{len(bad) - 5} more)" if len(bad) > 5 else "")
        err.print(f"warning: non-finite number(s) written as {written_as}: {shown}", markup=False)


def _print_version(value: bool) -> None:
    if value:
        from glmserve import __version__

        sys.stdout.write(f"glmserve {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    ssh_config: str = typer.Option(
        None,
        "--ssh-config",
        help="ssh config file (ssh -F) for every ssh host of this command, instead of each "
        "host's ssh_config: (e.g. for a repo's configs/hosts.yaml, which may not name one).",
    ),
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print the version."
    ),
) -> None:
    """glmserve: SGLang launch/watch/bench/compare. Exit codes: 0 ok, 1 gate failed,
    2 usage/config, 3 server crashed, 4 stalled/timeout, 5 connection/transport, 130 Ctrl-C."""
    STATE["debug"] = debug
    STATE["verb"] = ctx.invoked_subcommand
    from glmserve.remote.hosts import set_cli_ssh_config

    set_cli_ssh_config(ssh_config)
