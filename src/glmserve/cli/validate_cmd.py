"""`glmserve validate`: lint a hand-written launch script or a raw argv against one release.

Only parses options, reads the script and prints; the verdict is glmserve.argspec and the
script reading is glmserve.scriptparse.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from glmserve.argspec import (
    Finding,
    ValidationReport,
    available_versions,
    load_argspec,
    validate_argv,
)
from glmserve.cli._app import app, emit_json, out
from glmserve.errors import ConfigError, FlagValidationError
from glmserve.scriptparse import LaunchInvocation, find_launch
from glmserve.spec import PATCHES_ENV

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
  glmserve validate --sglang-version 0.5.23 run.sh --json | jq '.findings[].message'
  glmserve validate --sglang-version 0.5.8 -- --model m --nsa-decode-backend trtllm
  glmserve validate --spec host-argspec.json -- --model m --attention-backend trtllm_mla
"""
)


@app.command("validate", help=_HELP)
def validate(
    target: list[str] = typer.Argument(
        None, metavar="[SCRIPT | -- ARGV...]", help="launch script, or server flags after --"
    ),
    sglang_version: str = typer.Option(
        None, "--sglang-version", help="release to check against (see --list-versions)"
    ),
    spec_file: Path = typer.Option(
        None, "--spec", help="argspec JSON dumped on the host (DUMP_SNIPPET) instead of a version"
    ),
    json_out: bool = typer.Option(False, "--json", help="print the report as JSON"),
    list_versions: bool = typer.Option(
        False, "--list-versions", help="list releases with a shipped argspec and exit"
    ),
) -> None:
    if list_versions:
        out.print("\n".join(available_versions()), highlight=False)
        return
    if (sglang_version is None) == (spec_file is None):
        raise ConfigError(
            "give exactly one of --sglang-version V or --spec FILE "
            f"(shipped versions: {', '.join(available_versions())})"
        )
    spec = load_argspec(str(spec_file) if spec_file is not None else sglang_version)
    items = list(target or [])
    if not items:
        raise ConfigError("nothing to check: give a launch script, or -- followed by server flags")
    invocation = _script_invocation(items)
    if invocation is not None:
        argv, opaque = invocation.argv, invocation.opaque
    else:
        argv, opaque = _strip_launcher(items), set()
    report = validate_argv(argv, spec, opaque=opaque, patches=_patches(invocation))
    extra, lines = _script_findings(invocation) if invocation is not None else ([], {})
    report = ValidationReport(report.version, extra + report.findings)
    if json_out:
        data = report.to_dict()
        data["source"] = invocation.source if invocation else None
        for row, finding in zip(data["findings"], report.findings, strict=True):
            row["location"] = _location(finding, invocation, lines)
        emit_json(data)
    else:
        for finding in report.findings:
            out.print(
                f"{_location(finding, invocation, lines)}: {finding.format()}", highlight=False
            )
    if not report.ok:
        n_err, n_warn = len(report.errors), len(report.warnings)
        where = invocation.source if invocation else "argv"
        raise FlagValidationError(
            f"{where}: {n_err} error{'s' * (n_err != 1)}, {n_warn} warning"
            f"{'s' * (n_warn != 1)} for sglang {report.version}",
            report.findings,
        )
    if not json_out:
        summary = f"ok for sglang {report.version}"
        if report.warnings:
            summary += f" ({len(report.warnings)} warning{'s' * (len(report.warnings) != 1)})"
        out.print(summary, highlight=False)


def _script_invocation(items: list[str]) -> LaunchInvocation | None:
    """A single non-flag TARGET is a script path; anything else is a raw argv."""
    if len(items) != 1 or items[0].startswith("-"):
        return None
    path = Path(items[0])
    if not path.is_file():
        if path.suffix in (".sh", ".bash") or "/" in items[0]:
            raise ConfigError(f"{items[0]}: no such script")
        return None
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    return find_launch(text, str(path))


def _patches(invocation: LaunchInvocation | None) -> list[str]:
    """glmserve runtime patches a rendered script turns on (``export GLMSERVE_PATCHES=...``)."""
    if invocation is None:
        return []
    value = invocation.env.get(PATCHES_ENV) or invocation.script_vars.get(PATCHES_ENV, "")
    return [p for p in value.replace(",", " ").split() if p]


def _strip_launcher(items: list[str]) -> list[str]:
    """``-- python3 -m sglang.launch_server --model m`` (a pasted command): keep the flags."""
    if any(item.endswith("sglang.launch_server") for item in items[:6]):
        try:
            return find_launch(shlex.join(items), "argv").argv
        except ConfigError:
            return items
    return items


def _script_findings(invocation: LaunchInvocation) -> tuple[list[Finding], dict[int, int]]:
    """Script-level warnings (a comment that cuts the command, run-time expansions that
    cannot be checked) and, for those tied to a line rather than a token, that line."""
    found: list[Finding] = []
    lines: dict[int, int] = {}
    for line, note in invocation.notes:
        finding = Finding("warning", "", note, None, None)
        lines[id(finding)] = line
        found.append(finding)
    for index in sorted(invocation.opaque):
        text = invocation.argv[index]
        found.append(
            Finding(
                "warning",
                text,
                f"{text!r} is only known when the script runs; not checked",
                None,
                index,
            )
        )
    return found, lines


def _location(finding: Finding, invocation: LaunchInvocation | None, lines: dict[int, int]) -> str:
    """``script:line`` for a script, ``argv[i]`` for a raw argv."""
    if invocation is None:
        return f"argv[{finding.index}]" if finding.index is not None else "argv"
    if id(finding) in lines:
        return f"{invocation.source}:{lines[id(finding)]}"
    if finding.index is not None and finding.index < len(invocation.token_lines):
        return f"{invocation.source}:{invocation.token_lines[finding.index]}"
    return f"{invocation.source}:{invocation.line_no}"
