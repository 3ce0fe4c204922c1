"""How ``--help`` reads, in one place: one-line summaries, paragraphs that re-wrap at any width,
metavars that say what goes there.

Typer's rich help keeps every line break of a docstring past its first paragraph, so a
docstring wrapped at 100 columns came out ragged at 80 ("the whole grid runs when it" / "fits
--budget"), and the command list showed each verb's first paragraph as a multi-line blob. The
root group (``RootGroup``) hands every command it holds to ``tidy_command`` once, when the
click tree is built, so ``glmserve --help``, every verb's ``--help`` and the generated CLI
reference (``docs/gen_cli_reference.py``) read the same text:

* **summaries**: ``SUMMARIES`` holds each verb's one line for the command list (at most
  ``SUMMARY_MAX`` characters, so it fits one line at 80 columns);
* **paragraphs**: a docstring paragraph (lines between blank lines) becomes one line, which the
  terminal wraps at its own width. A paragraph is kept line by line (a *block*) when its first
  line is ``\\b`` (click's marker, dropped here), starts with ``Example``, or ends with ``:``
  (a heading over its list: "Exit codes:", "Examples:"), or when any line is indented;
* **metavars**: ``METAVARS`` names the value each option takes (``RUN``, ``N``, ``LIST``,
  ``URL``, ``PATH``...); a flag (on/off, or a counter) shows none; anything not listed gets one
  from its type (``N`` for an integer, ``X`` for a number, ``PATH``, ``TEXT``). Choices keep
  their list (``script|argv|json``). Display only: names, defaults and parsing are unchanged.
"""

from __future__ import annotations

import inspect
from typing import Any

SUMMARY_MAX = 64

# verb (subcommands as "results show") -> its line in the command list
SUMMARIES: dict[str, str] = {
    "bench": "Measure decode tok/s or throughput of a run or URL; store it.",
    "compare": "One table across runs and results, with speedups.",
    "diagnose": "Classify a server log: phase, crash category, cause, hint.",
    "check": "Preflight a launch: ssh, SGLang, flags, GPUs, port, disk.",
    "launch": "Start a run on a host (or a group) and wait for READY.",
    "status": "Runs with their state, checked live on their hosts.",
    "runs": "Recorded runs from the store (no host is contacted).",
    "logs": "Print or follow a run's server.log.",
    "stop": "Stop a run or group by its verified process group.",
    "profiles": "List profiles: parent, backend, patches, SGLang range.",
    "render": "Render a profile to its launch script, argv or JSON.",
    "simulate": "Run the SGLang simulator (same argv, logs, HTTP/SSE).",
    "report": "Render stored sweeps, tunes and runs as one HTML report.",
    "sweep": "Launch, bench and stop each profile in turn.",
    "profile": "Capture or read a torch-profiler trace: where decode goes.",
    "tune": "Search server flags for the best config under SLOs.",
    "validate": "Check server flags against one SGLang release's argparse.",
    "results": "Stored bench results: list, show one, export.",
    "results show": "One stored result with everything that makes it comparable.",
    "results export": "Export stored results as csv, json or jsonl.",
}

# option or argument name (the Python parameter) -> what goes there
METAVARS: dict[str, str] = {
    # ids and where
    "run": "RUN",
    "run_id": "RUN",
    "items": "RUN|RESULT...",
    "ids": "ID...",
    "result_id": "ID",
    "baseline": "RUN",
    "resume": "ID",
    "url": "URL",
    "host": "HOST",
    "hosts": "LIST",
    "nodes": "LIST",
    "profile": "PROFILE",
    "profiles": "LIST",
    "write_profile": "NAME",
    # files
    "output": "PATH",
    "html_file": "PATH",
    "png": "DIR",
    "dataset_path": "PATH",
    "tokenizer": "DIR",
    "spec_file": "PATH",
    "ssh_config": "PATH",
    # lists and pairs
    "concurrency": "LIST",
    "request_rate": "LIST",
    "percentiles": "LIST",
    "slo": "KEY=MS,...",
    "label": "KEY=VALUE",
    "sets": "KEY=VALUE",
    "overrides": "KEY=VALUE",
    "search": "server.KEY=LIST",
    "stall_budgets": "PHASE=SECONDS",
    "min_output_tok_s": "C:TOK/S",
    "bench": "MODE",
    "load": "MODE:N",
    # numbers
    "timeout": "SECONDS",
    "poll": "SECONDS",
    "stall_timeout": "SECONDS",
    "duration": "SECONDS",
    "host_lost_after": "SECONDS",
    "max_ttft_ms": "MS",
    "min_decode_tok_s": "TOK/S",
    "random_range_ratio": "RATIO",
    "burstiness": "X",
    "budget": "N|DURATION",
    # words
    "api": "API",
    "mode": "MODE",
    "dataset_name": "NAME",
    "objective": "NAME",
    "strategy": "NAME",
    "fmt": "FORMAT",
    "sglang_version": "VERSION",
}


def tidy_command(command: Any, path: str = "") -> None:
    """Summaries, paragraphs and metavars of ``command`` and every subcommand (in place)."""
    for name, sub in (getattr(command, "commands", None) or {}).items():
        full = f"{path} {name}".strip()
        if full in SUMMARIES:
            sub.short_help = SUMMARIES[full]
        sub.help = reflow(sub.help)
        for param in sub.params:
            set_metavar(param)
        tidy_command(sub, full)
    for param in getattr(command, "params", []):
        set_metavar(param)
    _quiet_help_option(command)


def _quiet_help_option(command: Any) -> None:
    """``--help`` is a flag too: click builds it per call, so its metavar is set there."""
    build = command.get_help_option

    def get_help_option(ctx: Any) -> Any:
        option = build(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = get_help_option


def reflow(text: str | None) -> str | None:
    """Each prose paragraph on one line; blocks (see the module docstring) line by line."""
    if not text:
        return text
    paragraphs = [p for p in inspect.cleandoc(text).split("\n\n") if p.strip()]
    out = []
    for para in paragraphs:
        lines = para.split("\n")
        if lines[0].strip() == "\b":
            out.append("\n".join(lines[1:]))
        elif is_block(lines):
            out.append(para)
        else:
            out.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def is_block(lines: list[str]) -> bool:
    """Lines meant to stay as written: examples, a heading over its list, indented lines."""
    first = lines[0].strip()
    return (
        first.startswith("Example")
        or first.endswith(":")
        or any(line[:1].isspace() for line in lines)
    )


def set_metavar(param: Any) -> None:
    """The value's name for help; none for a flag. A metavar given in the code wins, and a
    choice keeps its list."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        param.metavar = ""
        return
    if getattr(param, "param_type_name", "") == "argument":
        param.display_type_rich = lambda ctx: None  # its metavar (RUN, ID...) says it all
    if param.metavar is not None:
        return
    desc = getattr(param, "type_descriptor", None)  # typer >= 0.2x; click's .type before
    if desc is not None:
        if desc.is_choice:
            return
        type_name = "path" if desc.is_path else param.bare_type().lower()
    else:
        type_name = type(param.type).__name__.lower()
        if "choice" in type_name:
            return
    if param.name in METAVARS:
        param.metavar = METAVARS[param.name]
    elif "int" in type_name:
        param.metavar = "N"
    elif "float" in type_name:
        param.metavar = "X"
    elif "path" in type_name:
        param.metavar = "PATH"
    else:
        param.metavar = "TEXT"
