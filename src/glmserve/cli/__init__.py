"""Console entry point: registers every verb module and maps errors to exit codes."""

from __future__ import annotations

import sys
import traceback

import typer
from rich.markup import escape

from glmserve.cli import (  # noqa: F401  (imported for their @app.command registrations)
    bench_cmds,
    diagnose_cmd,
    lifecycle_cmds,
    profiles_cmds,
    results_cmds,
    simulate_cmd,
    sweep_cmds,
    tune_cmd,
    validate_cmd,
)
from glmserve.cli._app import STATE, app, err
from glmserve.errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    ConfigError,
    FlagValidationError,
    GlmserveError,
    RunNotFound,
)

# typer >= 0.2x vendors its own click (typer._click); older releases use click itself.
_click_errors: list[type] = []
try:
    from typer._click.exceptions import ClickException as _VendoredClickException

    _click_errors.append(_VendoredClickException)
except ImportError:  # pragma: no cover - depends on the installed typer
    pass
try:
    import click

    _click_errors.append(click.ClickException)
except ImportError:  # pragma: no cover
    pass
CLICK_ERRORS = tuple(_click_errors)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; the only place a glmserve error becomes an exit status."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        rc = app(args=argv, standalone_mode=False)
    except GlmserveError as exc:
        if debug or STATE.get("debug"):
            traceback.print_exc()
        err.print(f"[red]error:[/red] {escape(_message(exc))}", markup=True, highlight=False)
        return _exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted", highlight=False)
        return _exit(EXIT_INTERRUPTED)
    except SystemExit as exc:  # typer.Exit from a verb
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return _exit(code)
    except typer.Abort:
        err.print("interrupted", highlight=False)
        return _exit(EXIT_INTERRUPTED)
    except typer.Exit as exc:
        return _exit(exc.exit_code)
    except Exception as exc:
        # typer vendors its own click; usage errors are its ClickException (exit 2).
        if isinstance(exc, CLICK_ERRORS):
            exc.show()
            return _exit(exc.exit_code)
        if debug or STATE.get("debug"):
            traceback.print_exc()
        else:
            where = traceback.extract_tb(exc.__traceback__)[-1]
            err.print(
                f"internal error: {type(exc).__name__}: {exc} "
                f"(at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}; rerun with --debug "
                "for the traceback and please report it)",
                highlight=False,
                markup=False,
            )
        return _exit(EXIT_INTERNAL)
    # standalone_mode=False makes click return a verb's typer.Exit(n) code instead of exiting.
    # (typer also turns Ctrl-C inside a verb into a returned 130.)
    code = rc if isinstance(rc, int) else 0
    if code == EXIT_INTERRUPTED:
        err.print("interrupted", highlight=False)
    return _exit(code)


def _message(exc: GlmserveError) -> str:
    """The error text as printed. Config/usage errors echo user input (a key, a path, a run
    id), so control characters are shown escaped and the message stays one line; flag
    validation deliberately lists one finding per line."""
    text = str(exc)
    if isinstance(exc, (ConfigError, RunNotFound)) and not isinstance(exc, FlagValidationError):
        text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return text


def _exit(code: int) -> int:
    sys.exit(code)
