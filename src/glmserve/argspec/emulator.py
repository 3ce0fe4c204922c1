"""argparse's verdict on an SGLang argv without sglang: ``validate_argv``.

It re-implements the parts of argparse (CPython 3.10-3.12) that decide accept/reject --
prefix matching and abbreviations, nargs, types, choices, required flags, ``--help`` -- so a
laptop can tell whether a launch command would die at startup on a release, and lists every
problem at once with a suggested fix, plus warnings argparse does not give (abbreviations,
deprecated flags, repeated flags, the backend facts in ``backend_facts``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from glmserve.argspec.backend_facts import backend_warnings
from glmserve.argspec.model import (
    NEGATIVE_NUMBER,
    ArgAction,
    ArgSpec,
    FlagIssue,
    ValidationReport,
)
from glmserve.argspec.releases import shipped_specs
from glmserve.argspec.suggestions import (
    choice_suggestion,
    release_span,
    releases_with,
    rename_text,
    unknown_flag_suggestion,
)
from glmserve.argspec.value_checks import choices_text, convert, in_choices

_DEPRECATION_USE = re.compile(r"\b(?:please\s+)?use\s+([^.;)]+)", re.IGNORECASE)


@dataclass
class _Token:
    """argparse's classification of one argv string (its arg_strings_pattern letter)."""

    index: int
    text: str
    kind: Literal["O", "A", "--"]
    action: ArgAction | None = None
    option: str | None = None
    explicit: str | None = None
    abbreviated: bool = False
    ambiguous: list[str] | None = None


def _classify(index: int, text: str, spec: ArgSpec, after_dashes: bool) -> _Token:
    """Mirror ``ArgumentParser._parse_optional`` (CPython 3.10-3.12)."""
    if after_dashes:
        return _Token(index, text, "A")
    if text == "--":
        return _Token(index, text, "--")
    if not text or text[0] != "-":
        return _Token(index, text, "A")
    if text in spec.by_option:
        return _Token(index, text, "O", spec.by_option[text], text)
    if len(text) == 1:
        return _Token(index, text, "A")
    if "=" in text:
        opt, value = text.split("=", 1)
        if opt in spec.by_option:
            return _Token(index, text, "O", spec.by_option[opt], opt, value)
    if spec.allow_abbrev and text.startswith("--"):
        prefix, sep, value = text.partition("=")
        matches = [o for o in spec.by_option if o.startswith(prefix)]
        if len(matches) > 1:
            return _Token(index, text, "O", None, prefix, value if sep else None, ambiguous=matches)
        if len(matches) == 1:
            opt = matches[0]
            explicit = value if sep else None
            return _Token(index, text, "O", spec.by_option[opt], opt, explicit, abbreviated=True)
    if NEGATIVE_NUMBER.match(text) and not spec.has_negative_number_options():
        return _Token(index, text, "A")
    if " " in text:
        return _Token(index, text, "A")
    return _Token(index, text, "O", None, text.split("=", 1)[0] if "=" in text else text)


def _arity_error(act: ArgAction) -> str:
    lo, _hi = act.arg_range
    if act.nargs is None:
        return "expected one argument"
    if act.nargs == "+":
        return "expected at least one argument"
    if act.nargs == "?":
        return "expected at most one argument"
    return f"expected {lo} argument" + ("s" if lo != 1 else "")


def validate_argv(
    argv: list[str],
    spec: ArgSpec,
    opaque: Iterable[int] = (),
    patches: Iterable[str] = (),
    strict: bool = False,
) -> ValidationReport:
    """argparse's verdict on ``argv`` (server flags only) for ``spec``'s release, listing
    every error rather than stopping at the first, plus warnings argparse does not give
    (abbreviations, deprecated flags, repeated flags, known backend pitfalls).

    ``opaque``: argv positions whose text is only known at run time (``$VAR`` from a
    script); their type and choice checks are skipped. ``patches``: glmserve runtime patches
    the launch activates (a pitfall a patch fixes is not warned about). ``strict``: add
    glmserve's own rules, stricter than argparse (a non-finite value of a ``type=float``
    flag, ``_non_finite_float``); off, the verdict is argparse's alone (the agreement test
    holds it against the real parser)."""
    unknown_values = set(opaque)
    findings: list[FlagIssue] = []
    tokens: list[_Token] = []
    after_dashes = False
    for i, text in enumerate(argv):
        tok = _classify(i, text, spec, after_dashes)
        after_dashes = after_dashes or tok.kind == "--"
        tokens.append(tok)

    # argparse classifies every string before consuming any, so an ambiguous prefix is an
    # error wherever it stands; unknown flags and stray values are only collected and
    # reported after everything else parsed (so --help before them still wins).
    findings.extend(
        _unknown_option_finding(tok, [], spec) for tok in tokens if tok.ambiguous is not None
    )
    deferred: list[FlagIssue] = []
    seen: dict[str, int] = {}
    help_at: int | None = None
    values: dict[str, tuple[list[str], int]] = {}
    extras: list[_Token] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok.kind == "--":
            # CPython 3.11: with no positionals declared, "--" itself lands in the extras
            # ("unrecognized arguments: --"), and so does everything after it.
            extras.append(tok)
            continue
        if tok.kind == "A":
            extras.append(tok)
            continue
        run = 0
        while i + run < len(tokens) and tokens[i + run].kind == "A":
            run += 1
        if tok.action is None:
            trailing = tokens[i : i + run] if tok.explicit is None else []
            i += len(trailing)
            if not tok.ambiguous:  # ambiguity is reported up front, like argparse does
                deferred.append(_unknown_option_finding(tok, trailing, spec))
            continue
        act = tok.action
        flag = tok.option or act.name
        lo, hi = act.arg_range
        if act.action == "_HelpAction" and tok.explicit is None:
            help_at = tok.index
            break
        if tok.explicit is not None:
            if hi == 0:
                findings.append(
                    FlagIssue(
                        "error",
                        flag,
                        f"argument {_label(act)}: ignored explicit argument {tok.explicit!r}",
                        f"{flag} is a switch: write it without a value",
                        tok.index,
                    )
                )
                continue
            if lo > 1:
                findings.append(
                    FlagIssue(
                        "error",
                        flag,
                        f"argument {_label(act)}: {_arity_error(act)}",
                        None,
                        tok.index,
                    )
                )
                continue
            # CPython 3.11 _get_values drops a "--" value: "--x=--" stores [] unchecked.
            raw_values = [] if tok.explicit == "--" else [tok.explicit]
            value_indexes = [tok.index] * len(raw_values)
        else:
            take = run if hi is None else min(run, hi)
            if take < lo:
                i += take  # the values given belong to this flag, not to the positionals
                findings.append(
                    FlagIssue(
                        "error",
                        flag,
                        f"argument {_label(act)}: {_arity_error(act)}",
                        _type_hint(act, tok.option or act.name),
                        tok.index,
                    )
                )
                continue
            raw_values = [t.text for t in tokens[i : i + take]]
            value_indexes = [t.index for t in tokens[i : i + take]]
            i += take
        findings.extend(_option_notes(tok, act, spec))
        if act.dest in seen and act.action not in (
            "_AppendAction",
            "_CountAction",
            "_ExtendAction",
        ):
            findings.append(
                FlagIssue(
                    "warning",
                    flag,
                    f"{flag} given more than once (argv[{seen[act.dest]}] and "
                    f"argv[{tok.index}]); argparse keeps the last",
                    None,
                    tok.index,
                )
            )
        seen[act.dest] = tok.index
        checked = [
            raw
            for raw, at in zip(raw_values, value_indexes, strict=True)
            if at not in unknown_values
        ]
        value_errors = _check_values(act, checked, tok, spec, strict)
        findings.extend(value_errors)
        if not value_errors:
            values[act.dest] = (raw_values, tok.index)

    if help_at is not None:
        # argparse prints help and exits 0 right there: later flags are never looked at,
        # and unknown flags / missing required ones (checked at the end) never reported.
        findings.append(
            FlagIssue(
                "warning",
                tokens[help_at].text,
                f"{tokens[help_at].text} makes sglang print its help and exit 0: the server "
                "does not start",
                None,
                help_at,
            )
        )
        return ValidationReport(spec.version, findings)
    findings.extend(deferred)
    extras = [t for t in extras if t.index not in unknown_values]
    if extras:
        findings.append(
            FlagIssue(
                "error",
                extras[0].text,
                "unrecognized arguments: " + " ".join(t.text for t in extras),
                "sglang.launch_server takes no positional arguments; every value follows its flag",
                extras[0].index,
            )
        )
    for act in spec.actions:
        if act.required and act.dest not in seen:
            findings.append(
                FlagIssue(
                    "error",
                    act.name,
                    f"the following arguments are required: {'/'.join(act.option_strings)}",
                    None,
                    None,
                )
            )
    findings.extend(backend_warnings(values, spec, patches))
    return ValidationReport(spec.version, findings)


def _label(act: ArgAction) -> str:
    return "/".join(act.option_strings) or act.dest


def _type_hint(act: ArgAction, flag: str) -> str | None:
    if act.choices:
        return "valid: " + ", ".join(str(c) for c in act.choices)
    if act.type == "int":
        return f"{flag} takes an integer"
    if act.type == "float":
        return f"{flag} takes a number"
    if act.type and act.type.endswith(("loads", "json_list_type")):
        return f"{flag} takes JSON (quote it in the shell)"
    return None


def _unknown_option_finding(tok: _Token, trailing: list[_Token], spec: ArgSpec) -> FlagIssue:
    flag = tok.option or tok.text
    if tok.ambiguous:
        rename = rename_text(flag, spec)
        elsewhere = releases_with(flag)
        if rename:
            suggestion = rename
        elif elsewhere:
            suggestion = (
                f"{flag} was a flag in sglang {release_span(elsewhere)}; in {spec.version} "
                "write one of the full flags"
            )
        else:
            suggestion = "write the full flag"
        return FlagIssue(
            "error",
            flag,
            f"ambiguous option: {tok.text} could match {', '.join(tok.ambiguous)}",
            suggestion,
            tok.index,
        )
    shown = " ".join([tok.text, *(t.text for t in trailing)])
    return FlagIssue(
        "error",
        flag,
        f"unrecognized arguments: {shown} ({flag} is not a flag of sglang {spec.version})",
        unknown_flag_suggestion(flag, spec),
        tok.index,
    )


def _option_notes(tok: _Token, act: ArgAction, spec: ArgSpec) -> list[FlagIssue]:
    notes: list[FlagIssue] = []
    if tok.abbreviated and tok.option:
        typed = tok.text.split("=", 1)[0]
        elsewhere = [
            s.version
            for s in shipped_specs()
            if typed in s.by_option and s.by_option[typed].dest != act.dest
        ]
        if elsewhere:
            message = (
                f"{typed} is not a flag of sglang {spec.version}; argparse silently takes it "
                f"as an abbreviation of {tok.option} (in sglang {release_span(elsewhere)} it "
                "was a different flag)"
            )
            suggestion = rename_text(typed, spec) or f"write {tok.option} if meant"
        else:
            message = f"{typed} is an abbreviation of {tok.option}"
            suggestion = (
                f"write {tok.option} in full: a later release may add a flag with this prefix"
            )
        notes.append(FlagIssue("warning", act.name, message, suggestion, tok.index))
    if act.dest == "config":
        # prepare_server_args merges the YAML only when the literal token "--config" is in
        # argv (0.5.8-0.5.23): "--config=x.yaml" or an abbreviation parses but is ignored.
        if tok.text == "--config":
            message = "options inside the --config file are merged by sglang and not checked here"
        else:
            message = (
                f"{tok.text}: sglang only reads the config file when '--config' is a separate "
                "token; this form parses but the file is ignored"
            )
        notes.append(FlagIssue("warning", act.name, message, "--config FILE", tok.index))
    if act.is_deprecated:
        use = _DEPRECATION_USE.search(act.help or "")
        replacement = f"use {use.group(1).strip()}" if use else None
        message = f"{tok.option} is deprecated in sglang {spec.version}"
        if act.help and replacement is None:
            message += f": {act.help.strip()}"
        notes.append(FlagIssue("warning", act.name, message, replacement, tok.index))
    return notes


def _non_finite_float(act: ArgAction, value: Any) -> bool:
    """A ``type=float`` value that is nan or inf (``nan``, ``inf``, ``1e999``): a glmserve
    rule stricter than argparse. SGLang 0.5.9 checks no range for most float flags
    (``--mem-fraction-static nan`` starts, then sizes its pools from NaN)."""
    short = (act.type or "").rsplit(".", 1)[-1]
    return short == "float" and isinstance(value, float) and not math.isfinite(value)


def _check_values(
    act: ArgAction, raw_values: list[str], tok: _Token, spec: ArgSpec, strict: bool = False
) -> list[FlagIssue]:
    out: list[FlagIssue] = []
    flag = tok.option or act.name
    for raw in raw_values:
        value, error = convert(act.type, raw)
        if error is not None:
            hint = _type_hint(act, flag)
            out.append(
                FlagIssue("error", flag, f"argument {_label(act)}: {error}", hint, tok.index)
            )
            continue
        if strict and _non_finite_float(act, value):
            out.append(
                FlagIssue(
                    "error",
                    flag,
                    f"argument {_label(act)}: {raw!r} is not a finite number (glmserve refuses "
                    "nan and inf for a float flag; sglang's argparse takes them, the server "
                    "then misbehaves)",
                    f"{flag} takes a finite number",
                    tok.index,
                )
            )
            continue
        if act.choices is not None and not in_choices(value, raw, act.choices):
            out.append(
                FlagIssue(
                    "error",
                    flag,
                    f"argument {_label(act)}: invalid choice: {raw!r} "
                    f"(choose from {choices_text(act.choices)})",
                    choice_suggestion(act, raw, spec),
                    tok.index,
                )
            )
    return out
