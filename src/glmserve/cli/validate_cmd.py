"""`glmserve validate`: lint a hand-written launch script or a raw argv against one release.

Only parses options, reads the script and prints; the verdict is glmserve.argspec.emulator
and the script reading is glmserve.argspec.launch_script.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from glmserve.cli._app import app, emit_json, err, out
from glmserve.cli.options import JsonOpt, SglangVersionOpt
from glmserve.errors import ConfigError, FlagValidationError

if TYPE_CHECKING:
    from glmserve.argspec.launch_script import LaunchInvocation
    from glmserve.argspec.model import ArgSpec

_SUMMARY = (
    "Check sglang.launch_server flags against one SGLang release's argparse, the way that "
    "release would parse them: unknown or renamed flags, invalid or removed choices, missing "
    "or extra values, bad numbers, abbreviations and ambiguous prefixes, deprecated flags, and "
    "known attention-backend pitfalls. Every problem is listed, one per line, with a fix where "
    "known."
)
_TARGET = (
    "TARGET is a bash launch script (its `python3 -m sglang.launch_server ...` command is "
    "found, continuations and quotes resolved, and findings name script:line), or, after "
    "`--`, the server flags themselves."
)
_HELP = (
    _SUMMARY
    + "\n\n"
    + _TARGET
    + """

\b
Exit codes:
  0  the release's argparse accepts the flags (warnings may be printed)
  2  at least one error, or bad usage (unknown version, unreadable script)

\b
Examples:
  glmserve validate --sglang-version 0.5.9 run_tp8_trtllm_mla.sh
  glmserve validate --sglang-version 0.5.23 run.sh --json \\
    | jq '.findings[].message'
  glmserve validate --sglang-version 0.5.8 -- \\
    --model m --nsa-decode-backend trtllm
  glmserve validate --spec host-argspec.json -- \\
    --model m --attention-backend trtllm_mla

\b
Migrating a script to another release:
  glmserve validate --fix --sglang-version 0.5.23 run_tp8_trtllm_mla.sh
  glmserve validate --fix --diff --sglang-version 0.5.23 run_tp8_trtllm_mla.sh

--fix rewrites SCRIPT in place for that release: renamed flags take its names, deprecated
flags their documented successors (glmserve/argspec/data/translations.json), nothing else
changes. It refuses (exit 2, writing nothing) when a choice the release dropped is used, or when the
migrated flags still fail its argparse. --diff prints the change as a unified diff instead
of writing it.
"""
)


@app.command("validate", help=_HELP)
def validate(
    target: list[str] = typer.Argument(
        None, metavar="[SCRIPT | -- ARGV...]", help="launch script, or server flags after --"
    ),
    sglang_version: SglangVersionOpt = None,
    spec_file: Path = typer.Option(
        None,
        "--spec",
        help=(
            "argspec JSON dumped on the host (python3 glmserve/argspec/dump_program.py "
            "> spec.json there) instead of a version"
        ),
    ),
    json_out: JsonOpt = False,
    list_versions: bool = typer.Option(
        False,
        "--list-versions",
        help="list releases with a shipped argspec and exit (--json: a list of strings)",
    ),
    fix: bool = typer.Option(
        False, "--fix", help="rewrite SCRIPT's flags for the release (renames, successors)"
    ),
    diff: bool = typer.Option(
        False, "--diff", help="with --fix: print a unified diff instead of writing SCRIPT"
    ),
) -> None:
    from glmserve.argspec.launch_script import check_argv, check_launch
    from glmserve.argspec.releases import available_versions, load_argspec, load_release_spec

    if list_versions:
        if json_out:  # a list of what --sglang-version accepts, oldest first
            emit_json(available_versions())
        else:
            out.print("\n".join(available_versions()), highlight=False)
        return
    if (sglang_version is None) == (spec_file is None):
        shipped = available_versions()
        raise ConfigError(
            "give exactly one of --sglang-version V or --spec FILE "
            f"(shipped versions: {shipped[0]}..{shipped[-1]}, see --list-versions)"
        )
    spec = (
        load_argspec(str(spec_file)) if spec_file is not None else load_release_spec(sglang_version)
    )
    items = list(target or [])
    if not items:
        raise ConfigError("nothing to check: give a launch script, or -- followed by server flags")
    if fix or diff:
        _fix_script(items, spec, diff)
        return
    invocation = _script_invocation(items)
    located = check_launch(invocation, spec) if invocation else check_argv(items, spec)
    report = located.report
    if json_out:
        emit_json(located.to_dict())
    else:
        for line in located.lines():
            out.print(line, highlight=False, markup=False)  # findings quote script text
    if not report.ok and invocation is not None:
        target = f"--sglang-version {sglang_version}" if sglang_version else f"--spec {spec_file}"
        _hint_fix(invocation, spec, target)
    if not report.ok:
        n_err, n_warn = len(report.errors), len(report.warnings)
        where = located.source or "argv"
        raise FlagValidationError(
            f"{where}: {n_err} error{'s' * (n_err != 1)}, {n_warn} warning"
            f"{'s' * (n_warn != 1)} for sglang {report.version}",
            report.findings,
        )
    if not json_out:
        summary = f"ok for sglang {report.version}"
        if report.warnings:
            summary += f" ({len(report.warnings)} warning{'s' * (len(report.warnings) != 1)})"
        out.print(summary, highlight=False, markup=False)


def _script_invocation(items: list[str]) -> LaunchInvocation | None:
    """A single non-flag TARGET is a script path; anything else is a raw argv."""
    from glmserve.argspec.launch_script import find_launch, read_script

    if len(items) != 1 or items[0].startswith("-"):
        return None
    path = Path(items[0])
    if not path.exists():
        if path.suffix in (".sh", ".bash") or "/" in items[0]:
            raise ConfigError(f"{items[0]}: no such script")
        return None
    return find_launch(read_script(path), str(path))


def _hint_fix(invocation: LaunchInvocation, spec: ArgSpec, target: str) -> None:
    """Say when ``--fix`` would migrate some of the rejected flags (renames, successors)."""
    from glmserve.argspec.portable import translate_argv

    changes = translate_argv(invocation.argv, spec).changes
    if changes:
        err.print(
            f"hint: glmserve validate --fix [--diff] {target} {invocation.source} rewrites "
            f"{len(changes)} flag(s) the way sglang {spec.version} spells them",
            highlight=False,
            markup=False,
        )


def _fix_script(items: list[str], spec: ArgSpec, diff_only: bool) -> None:
    """``--fix``: migrate the script for ``spec``'s release; write it (or print the diff)
    only when the migrated launch command passes that release's argparse."""
    from glmserve.argspec.launch_script import check_launch, find_launch, read_script
    from glmserve.argspec.portable import fix_script

    if len(items) != 1 or items[0].startswith("-"):
        raise ConfigError("--fix/--diff take one launch script, not raw flags")
    path = Path(items[0])
    fixed = fix_script(read_script(path), str(path), spec)
    located = check_launch(find_launch(fixed.new_text, str(path)), spec)
    if not located.report.ok:
        for line in located.lines():
            err.print(line, highlight=False, markup=False)
        raise FlagValidationError(
            f"{path}: still rejected by sglang {spec.version} after migrating "
            f"({len(located.report.errors)} error(s)); nothing written",
            located.report.errors,
        )
    for line_no, change in fixed.changes:
        err.print(f"{path}:{line_no}: {change.format()}", highlight=False, markup=False)
    if diff_only:
        sys.stdout.write(fixed.diff())
        return
    if not fixed.changes:
        err.print(f"{path}: already spelled for sglang {spec.version}; unchanged", highlight=False)
        return
    _write_in_place(path, fixed.new_text)
    err.print(
        f"{path}: migrated for sglang {spec.version} ({len(fixed.changes)} change(s))",
        highlight=False,
        markup=False,
    )


def _write_in_place(path: Path, text: str) -> None:
    """Replace ``path`` atomically, keeping its permission bits (a script stays executable).
    A symlink is written through: its target (what was read and migrated) is replaced, in
    the target's folder, and the link stays a link; replacing the link itself would leave
    the real script unmigrated and turn the link into a copy. A file or folder that cannot
    be written is a one-line ConfigError naming it (exit 2), not an internal error; the
    script is left as it was."""
    import os
    import tempfile

    target = path.resolve()
    shown = str(path) if target == path.absolute() else f"{path} (-> {target})"
    tmp: str | None = None
    try:
        mode = target.stat().st_mode & 0o7777
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ConfigError(
                f"{shown}: cannot write the migrated script ({exc.strerror or exc}); nothing "
                "written (use --diff and apply it yourself)"
            ) from None
        raise
