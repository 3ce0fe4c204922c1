"""Console entry point: registers every verb module and maps errors to exit codes."""

from __future__ import annotations

import contextlib
import sys
import traceback
from typing import Any

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
from glmserve.cli._app import STATE, app, err, out
from glmserve.cli.output_streams import WatchedStreams
from glmserve.errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OUTPUT,
    ConfigError,
    FlagValidationError,
    GlmserveError,
    Interrupted,
    OutputError,
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
    """Run the CLI and return its exit status (the console script passes it to ``sys.exit``);
    the only place a glmserve error becomes an exit status."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    STATE["verb"] = None
    with WatchedStreams() as streams:
        error: GlmserveError | None = None
        try:
            code = _run(argv, debug, streams)
        except GlmserveError as exc:
            code, error = exc.exit_code, exc
        streams.flush()  # what is still buffered fails here, not at interpreter exit
        if streams.failure is not None:  # whatever else happened came of the lost output
            error = _output_error(*streams.failure)
        elif streams.broken_pipe and error is None and code == 0:
            code = 1  # `| head`: as click exits on EPIPE
        streams.noting = False  # decided: a stderr that cannot take the error changes nothing
        if error is not None:
            _report(error, debug)
            code = error.exit_code
        _discard_unwritten()
        return code


def _discard_unwritten() -> None:
    """Drop what the consoles could not write. rich deletes its buffer only after a write
    succeeded (rich/console.py ``Console._write_buffer``), so text that met a full or closed
    stream would be sent again, ahead of the next command's output, by anything that calls
    ``main`` twice in one process (scripts, test workers)."""
    for console in (out, err):
        del console._buffer[:]  # rich has no public way to drop it


def _report(exc: GlmserveError, debug: bool) -> None:
    notice = isinstance(exc, Interrupted) and exc.notice
    if (debug or STATE.get("debug")) and not notice:
        _quietly(traceback.print_exception, exc)
    if notice:
        _say(str(exc), markup=False)
    else:
        _say(f"[red]error:[/red] {escape(_message(exc))}", markup=True)


def _output_error(stream: str, exc: OSError) -> OutputError:
    """The one line for a stdout/stderr that could not be written (``> /dev/full``)."""
    reason = exc.strerror or str(exc)
    kept = ""
    if stream == "stdout" and STATE.get("verb") == "bench":  # it prints after storing
        kept = " (results already stored are kept)"
    error = OutputError(f"cannot write output: {reason}{kept}")
    error.__cause__ = exc  # --debug: where the write failed
    return error


def _say(text: str, **kwargs: Any) -> None:
    """One line on stderr; a stderr that cannot take it (full, closed) raises nothing more:
    the exit status says what happened."""
    _quietly(err.print, text, highlight=False, **kwargs)


def _quietly(fn: Any, *args: Any, **kwargs: Any) -> None:
    with contextlib.suppress(OSError, ValueError):  # ValueError: stderr closed
        fn(*args, **kwargs)


def _run(argv: list[str] | None, debug: bool, streams: WatchedStreams) -> int:
    """The app's exit status; every form Ctrl-C takes on the way out becomes ``Interrupted``."""
    try:
        rc = app(args=argv, standalone_mode=False)
    except GlmserveError:
        raise
    except (KeyboardInterrupt, typer.Abort):
        raise Interrupted("interrupted") from None
    except SystemExit as exc:  # a verb's own status (simulate passes the simulator's on)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except typer.Exit as exc:
        return exc.exit_code
    except Exception as exc:
        if streams.failure is not None:
            return EXIT_OUTPUT  # main says so
        streams.noting = False
        return _unexpected(exc, debug)
    # standalone_mode=False makes click return a verb's typer.Exit(n) code instead of exiting;
    # typer also turns Ctrl-C inside a verb into a returned 130.
    code = rc if isinstance(rc, int) else 0
    if code == EXIT_INTERRUPTED:
        raise Interrupted("interrupted")
    return code


def _unexpected(exc: Exception, debug: bool) -> int:
    """Click usage errors show themselves (exit 2); anything else is a glmserve bug (exit 70)."""
    # typer vendors its own click; usage errors are its ClickException (exit 2).
    if isinstance(exc, CLICK_ERRORS):
        # One line, like every other bad input (click's own is Usage/Try/blank/Error); the
        # verb's --help is named for the rest.
        ctx = getattr(exc, "ctx", None)
        names: list[str] = []
        while ctx is not None and ctx.parent is not None:  # the verb's path, not argv[0]'s
            names.insert(0, str(ctx.info_name))
            ctx = ctx.parent
        where = f" (see `{' '.join(['glmserve', *names, '--help'])}`)"
        text = " ".join(exc.format_message().split())
        _say(f"[red]error:[/red] {escape(text)}{escape(where)}")
        return exc.exit_code
    if debug or STATE.get("debug"):
        _quietly(traceback.print_exception, exc)
    else:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        _say(
            f"internal error: {type(exc).__name__}: {exc} "
            f"(at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}; rerun with --debug "
            "for the traceback and please report it)",
            markup=False,
        )
    return EXIT_INTERNAL


def _message(exc: GlmserveError) -> str:
    """The error text as printed. Config/usage errors echo user input (a key, a path, a run
    id), so control characters are shown escaped and the message stays one line; flag
    validation deliberately lists one finding per line."""
    text = str(exc)
    if isinstance(exc, (ConfigError, RunNotFound)) and not isinstance(exc, FlagValidationError):
        text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return text
