"""What a dumped argparse spec is once read: one release's actions and parser settings
(``ArgSpec`` of ``ArgAction``), and what the emulator says about an argv (``FlagIssue``s in a
``ValidationReport``).

Pure data plus ``parse_argspec``, which builds an ``ArgSpec`` from the JSON object the dump
program (``dump_program.py``) prints; where that JSON comes from (the shipped store, a file,
a host) is ``releases`` and ``host_dump``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from glmserve.errors import ConfigError

Severity = Literal["error", "warning"]

_ZERO_ARG_ACTIONS = {
    "_StoreTrueAction",
    "_StoreFalseAction",
    "_StoreConstAction",
    "_AppendConstAction",
    "_CountAction",
    "_HelpAction",
    "_VersionAction",
}
# "Deprecated. Use ...", "(Deprecated, use ...)", "Note: --x is deprecated now." -- but not
# help that merely mentions some other deprecated thing (0.5.23 --unified-cache-*-config).
_DEPRECATION_HELP = re.compile(
    r"^\W*(?:note:\s*)?(?:deprecated\b|(?:--[\w-]+|this (?:flag|option|argument)) "
    r"(?:is|has been) deprecated)",
    re.IGNORECASE,
)
# argparse's ``_negative_number_matcher``: such a token is a value unless the parser has
# options that look like negative numbers.
NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


@dataclass(frozen=True)
class ArgAction:
    """One argparse action of a release, as dumped (the fields the verdict depends on)."""

    option_strings: tuple[str, ...]
    dest: str
    action: str
    type: str | None
    choices: tuple[Any, ...] | None
    default: Any
    nargs: int | str | None
    required: bool
    help: str | None
    deprecated: bool

    @property
    def name(self) -> str:
        """The flag as users write it (the longest option string)."""
        return max(self.option_strings, key=len) if self.option_strings else self.dest

    @property
    def is_deprecated(self) -> bool:
        """Deprecation action class, argparse 3.13 ``deprecated=``, or the help text says so."""
        if self.deprecated or "deprecat" in self.action.lower():
            return True
        return bool(self.help and _DEPRECATION_HELP.search(self.help))

    @property
    def arg_range(self) -> tuple[int, int | None]:
        """(min, max) values the action consumes; max None = unbounded."""
        nargs = self.nargs
        if nargs is None:
            return (0, 0) if self.action in _ZERO_ARG_ACTIONS else (1, 1)
        if isinstance(nargs, int):
            return (nargs, nargs)
        return {"?": (0, 1), "*": (0, None), "+": (1, None)}.get(nargs, (0, None))


@dataclass
class ArgSpec:
    """The CLI of one SGLang release: its actions plus parser settings."""

    version: str
    actions: list[ArgAction]
    allow_abbrev: bool = True
    add_help: bool = True
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_option: dict[str, ArgAction] = {}
        for act in self.actions:
            for opt in act.option_strings:
                self.by_option[opt] = act
        # The dump leaves argparse's own -h/--help out, but the real parser has it: it takes
        # part in prefix matching (``--h`` is ambiguous) and exits 0 when given.
        if self.add_help and "--help" not in self.by_option:
            help_action = ArgAction(
                option_strings=("-h", "--help"),
                dest="help",
                action="_HelpAction",
                type=None,
                choices=None,
                default=None,
                nargs=0,
                required=False,
                help="show this help message and exit",
                deprecated=False,
            )
            self.by_option.setdefault("-h", help_action)
            self.by_option["--help"] = help_action

    @property
    def options(self) -> list[str]:
        return list(self.by_option)

    def has_negative_number_options(self) -> bool:
        return any(NEGATIVE_NUMBER.match(opt) for opt in self.by_option)


@dataclass
class FlagIssue:
    """One problem with an argv: ``index`` is the offending token's position in argv."""

    severity: Severity
    flag: str
    message: str
    suggestion: str | None = None
    index: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "flag": self.flag,
            "message": self.message,
            "suggestion": self.suggestion,
            "index": self.index,
        }

    def format(self) -> str:
        text = f"{self.severity}: {self.message}"
        return f"{text} ({self.suggestion})" if self.suggestion else text


@dataclass
class ValidationReport:
    """Every finding for one argv against one release; ``ok`` = argparse would accept it."""

    version: str
    findings: list[FlagIssue] = field(default_factory=list)

    @property
    def errors(self) -> list[FlagIssue]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[FlagIssue]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "sglang_version": self.version,
            "ok": self.ok,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "findings": [f.to_dict() for f in self.findings],
        }


def parse_argspec(data: dict[str, Any], source: str = "") -> ArgSpec:
    """Build an ArgSpec from a dump's JSON object (pure); ConfigError names ``source``."""
    try:
        actions = [
            ArgAction(
                option_strings=tuple(a["option_strings"]),
                dest=a["dest"],
                action=a.get("action", "_StoreAction"),
                type=a.get("type"),
                choices=None if a.get("choices") is None else tuple(a["choices"]),
                default=a.get("default"),
                nargs=a.get("nargs"),
                required=bool(a.get("required", False)),
                help=a.get("help"),
                deprecated=bool(a.get("deprecated", False)),
            )
            for a in data["actions"]
        ]
        version = str(data["sglang_version"])
    except KeyError as exc:
        raise ConfigError(
            f"{source or 'argspec'}: not a glmserve argspec dump (no {exc} field); make one with "
            "scripts/dump_argspec.py V, or use the one `glmserve check` caches under "
            "$GLMSERVE_HOME/argspecs/"
        ) from exc
    except TypeError as exc:
        raise ConfigError(f"{source or 'argspec'}: not a glmserve argspec dump ({exc})") from exc
    parser = data.get("parser") or {}
    meta = {k: v for k, v in data.items() if k not in ("actions", "parser")}
    return ArgSpec(
        version=version,
        actions=actions,
        allow_abbrev=bool(parser.get("allow_abbrev", True)),
        add_help=bool(parser.get("add_help", True)),
        source=source,
        meta=meta,
    )
