"""Portable launch flags: one profile (or script), spelled the way a target SGLang release wants.

SGLang renames flags (``--nsa-*-backend`` became ``--dsa-*-backend``: an alias in 0.5.13, gone
in 0.5.20), deprecates flags in favour of documented successors (``--disable-cuda-graph`` ->
``--cuda-graph-backend-{decode,prefill} disabled`` from 0.5.14) and drops choices
(``cutlass_mla`` after 0.5.19). A profile states intent once; :func:`translate_argv` rewrites
its argv for one release from the table in ``data/translations.json`` (each entry cites
the release source it was read from), and the result is then checked by the same argparse
emulator as everything else (``emulator.validate_argv``). A dropped choice is not guessed: the
emulator refuses it, naming what the release offers instead.

Which release: ``--sglang-version`` when given; else, where a host is involved (check,
launch, sweep), the release installed there, because that is what parses the argv; else the
newest shipped release inside the profile's ``sglang:`` range (:func:`range_target`).
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from glmserve.argspec.model import ArgSpec, FlagIssue
from glmserve.argspec.releases import available_versions, data_dir, version_key
from glmserve.config.flags import Flags, is_flag
from glmserve.config.spec import LaunchSpec
from glmserve.errors import ConfigError, FlagValidationError

TABLE_NAME = "translations.json"


@dataclass(frozen=True)
class Rename:
    """``old`` and ``new`` name one setting; ``new`` exists from ``added``, ``old`` is gone
    from ``removed``. ``backward``: the new name may be written back as the old one for
    releases before ``added`` (only where the two meant the same before the alias existed)."""

    old: str
    new: str
    added: str
    removed: str | None
    backward: bool
    sources: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Successor:
    """A deprecated flag (no value) and the tokens the release documents in its place."""

    flag: str
    deprecated: str
    replacement: tuple[str, ...]
    sources: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class RemovedChoice:
    """A choice SGLang dropped from ``flags`` in ``removed``, and what to use instead."""

    flags: tuple[str, ...]
    value: str
    removed: str
    instead: tuple[str, ...]
    sources: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Table:
    renames: tuple[Rename, ...]
    successors: tuple[Successor, ...]
    removed_choices: tuple[RemovedChoice, ...]


def table_path() -> Path:
    return data_dir() / TABLE_NAME


def parse_table(data: dict[str, Any], source: str = TABLE_NAME) -> Table:
    """The table from its JSON (ConfigError naming ``source`` when malformed)."""
    try:
        return Table(
            renames=tuple(
                Rename(
                    old=r["from"],
                    new=r["to"],
                    added=r["added"],
                    removed=r.get("removed"),
                    backward=bool(r.get("backward", False)),
                    sources=tuple(r.get("sources", ())),
                )
                for r in data["renames"]
            ),
            successors=tuple(
                Successor(
                    flag=s["flag"],
                    deprecated=s["deprecated"],
                    replacement=tuple(s["replacement"]),
                    sources=tuple(s.get("sources", ())),
                )
                for s in data["successors"]
            ),
            removed_choices=tuple(
                RemovedChoice(
                    flags=tuple(c["flags"]),
                    value=c["value"],
                    removed=c["removed"],
                    instead=tuple(c.get("instead", ())),
                    sources=tuple(c.get("sources", ())),
                )
                for c in data["removed_choices"]
            ),
        )
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{source}: malformed translation table ({exc!r})") from exc


@lru_cache(maxsize=1)
def load_table() -> Table:
    """The shipped translation table."""
    path = table_path()
    return parse_table(json.loads(path.read_text(encoding="utf-8")), str(path))


def _cite(sources: tuple[dict[str, Any], ...]) -> str:
    """``server_args.py (0.5.13)``: the first cited file, for a one-line reason."""
    for src in sources:
        if "line" in src:
            return f"{src['file'].rsplit('/', 1)[-1]}:{src['line']} in {src['release']}"
    return ""


@dataclass(frozen=True)
class Change:
    """One rewrite: ``argv[index]`` (one token) became ``new`` (one or more tokens)."""

    index: int
    old: str
    new: tuple[str, ...]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "old": self.old, "new": list(self.new), "reason": self.reason}

    def format(self) -> str:
        return f"{self.old} -> {' '.join(self.new)}: {self.reason}"


@dataclass
class Translation:
    """``argv`` rewritten for ``version``; ``origin[i]`` is the index in the original argv
    that produced ``argv[i]`` (so findings still point at the user's line)."""

    version: str
    argv: list[str]
    changes: list[Change] = field(default_factory=list)
    origin: list[int] = field(default_factory=list)


def _usable(flag: str, spec: ArgSpec) -> bool:
    """The release has ``flag`` and does not call it deprecated."""
    act = spec.by_option.get(flag)
    return act is not None and not act.is_deprecated


def _rename(name: str, spec: ArgSpec, table: Table) -> tuple[str, str] | None:
    """(name to write, why) when ``spec``'s release spells ``name`` differently."""
    for r in table.renames:
        if r.old == name and _usable(r.new, spec) and not _usable(name, spec):
            state = "a deprecated alias" if name in spec.by_option else "not a flag"
            cite = _cite(r.sources)
            why = f"{name} is {state} in sglang {spec.version}; renamed {r.new} in {r.added}"
            return r.new, why + (f" ({cite})" if cite else "")
        if r.backward and r.new == name and name not in spec.by_option and r.old in spec.by_option:
            return r.old, f"sglang {spec.version} still calls it {r.old} ({r.new} from {r.added})"
    return None


def _successor(name: str, spec: ArgSpec, table: Table) -> tuple[tuple[str, ...], str] | None:
    """(tokens, why) when ``name`` is deprecated or gone in the release and the release
    documents a successor that it accepts as written."""
    for s in table.successors:
        if s.flag != name or _usable(name, spec):
            continue
        tokens = s.replacement
        if not all(_accepts(tokens, i, spec) for i in range(0, len(tokens))):
            continue
        state = "deprecated" if name in spec.by_option else "removed"
        cite = _cite(s.sources)
        why = f"{state} in sglang {spec.version} (since {s.deprecated}), documented successor"
        return tokens, why + (f" ({cite})" if cite else "")
    return None


def _accepts(tokens: tuple[str, ...], i: int, spec: ArgSpec) -> bool:
    """Token ``i`` of a replacement is a usable flag, or a value the flag before it allows."""
    tok = tokens[i]
    if is_flag(tok):
        return _usable(tok, spec)
    act = spec.by_option.get(tokens[i - 1]) if i else None
    return act is not None and (act.choices is None or tok in act.choices)


def translate_argv(argv: list[str], spec: ArgSpec, table: Table | None = None) -> Translation:
    """``argv`` (server flags) as ``spec``'s release spells it: renamed flags take the
    release's name, deprecated or removed flags with a documented successor become it.
    Everything else is kept verbatim (values, order, unknown flags, abbreviations): the
    argparse emulator judges the result."""
    table = table or load_table()
    out: list[str] = []
    origin: list[int] = []
    changes: list[Change] = []
    for item in Flags.parse(argv).items:
        i, tok = item.start, argv[item.start]
        if item.name is not None:
            hit = _rename(item.name, spec, table)
            succ = None if hit or item.inline else _successor(tok, spec, table)
            if hit is not None:
                new: tuple[str, ...] = (hit[0] + ("=" + item.values[0] if item.inline else ""),)
                changes.append(Change(i, tok, new, hit[1]))
            elif succ is not None:
                new = succ[0]
                changes.append(Change(i, tok, new, succ[1]))
            else:
                new = (tok,)
            out.extend(new)
            origin.extend([i] * len(new))
            i += 1
        out.extend(argv[i : item.end])  # values (or words before the first flag) verbatim
        origin.extend(range(i, item.end))
    return Translation(spec.version, out, changes, origin)


def refusals(argv: list[str], spec: ArgSpec) -> list[FlagIssue]:
    """Errors for choices the table says ``spec``'s release dropped (``--attention-backend
    cutlass_mla`` on 0.5.20+): not guessed at, refused with what the release offers."""
    out: list[FlagIssue] = []
    for item in Flags.parse(argv).items:
        flag, i = item.name or "", item.start
        value = item.values[0] if item.values else ""
        act = spec.by_option.get(flag)
        if act is None or act.choices is None or value in act.choices:
            continue
        for c in load_table().removed_choices:
            if flag not in c.flags or c.value != value:
                continue
            offered = [x for x in c.instead if x in act.choices]
            gone = next((src for src in c.sources if "absent" in src), None)
            cite = (
                f" (not in {gone['file'].rsplit('/', 1)[-1]} of {gone['release']})" if gone else ""
            )
            message = (
                f"{flag} {value}: sglang dropped the {value} choice in {c.removed}{cite}, "
                f"so {spec.version} refuses it"
            )
            hint = (
                f"sglang {spec.version} offers {' or '.join(offered)} instead"
                if offered
                else "valid: " + ", ".join(str(x) for x in act.choices)
            )
            out.append(FlagIssue("error", flag, message, hint, i))
    return out


def range_target(spec_range: str | None) -> str | None:
    """The newest shipped release inside a profile's ``sglang:`` range (None: no range, or
    no shipped release in it)."""
    if not spec_range:
        return None
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        wanted = SpecifierSet(spec_range)
    except InvalidSpecifier as exc:
        raise ConfigError(f"sglang: {spec_range!r} is not a version range ({exc})") from exc
    inside = []
    for version in available_versions():
        try:
            if Version(version) in wanted:
                inside.append(version)
        except InvalidVersion:
            continue
    return max(inside, key=version_key) if inside else None


def port_spec(spec: LaunchSpec, argspec: ArgSpec) -> tuple[LaunchSpec, list[Change]]:
    """``spec`` with its argv translated for ``argspec``'s release. Each new flag keeps the
    origin (profile file:line and key) of the flag it replaced, so errors still name the
    YAML line to edit."""
    result = translate_argv(list(spec.argv), argspec)
    if not result.changes:
        return spec, []
    origins = dict(spec.origins)
    for change in result.changes:
        old = origins.get(change.old.split("=", 1)[0])
        if old is None:
            continue
        for tok in change.new:
            if is_flag(tok):
                origins.setdefault(tok.split("=", 1)[0], old)
    extra = {**spec.extra, "translations": [c.to_dict() for c in result.changes]}
    return replace(spec, argv=result.argv, origins=origins, extra=extra), result.changes


@dataclass
class Ported:
    """A LaunchSpec made for one release: translated, then validated (warnings kept)."""

    spec: LaunchSpec
    version: str
    changes: list[Change]
    warnings: list[str]


def for_release(spec: LaunchSpec, version: str) -> Ported:
    """``spec`` translated for shipped release ``version`` and checked by the argparse
    emulator; FlagValidationError (exit 2, naming profile file:line) when that release
    still rejects it, e.g. a choice it no longer offers."""
    from glmserve.argspec.releases import load_release_spec
    from glmserve.argspec.validation import format_finding, validate_spec

    argspec = load_release_spec(version)
    ported, changes = port_spec(spec, argspec)
    refused = refusals(ported.argv, argspec)
    if refused:
        lines = [format_finding(ported, f) for f in refused]
        raise FlagValidationError(
            f"{len(lines)} flag error(s) for sglang {argspec.version}: " + "\n".join(lines),
            findings=refused,
        )
    warnings = validate_spec(ported, argspec.version)
    return Ported(ported, argspec.version, changes, warnings)


def render_target(spec: LaunchSpec, explicit: str | None) -> tuple[str | None, str]:
    """The release to render ``spec`` for when no host is involved, and where that came
    from: ``--sglang-version``, else the newest shipped release in the profile's range."""
    if explicit:
        return explicit, "--sglang-version"
    target = range_target(spec.sglang_range)
    if target is not None:
        return target, f"newest shipped release in the profile's range {spec.sglang_range}"
    return None, ""


# --- migrating a hand-written launch script ---------------------------------------------------


@dataclass
class ScriptFix:
    """A launch script migrated for one release: the new text and what changed where."""

    source: str
    version: str
    old_text: str
    new_text: str
    changes: list[tuple[int, Change]]  # (script line, change)

    def diff(self) -> str:
        """Unified diff old -> new, as ``diff -u`` would print it."""
        return "".join(
            difflib.unified_diff(
                self.old_text.splitlines(keepends=True),
                self.new_text.splitlines(keepends=True),
                fromfile=self.source,
                tofile=f"{self.source} (sglang {self.version})",
            )
        )


def _word_at(line: str, word: str, nth: int) -> tuple[int, int] | None:
    """Span of the ``nth`` occurrence of ``word`` written as a plain or quoted shell word on
    ``line`` (a flag is rewritten where it is typed, never inside another word)."""
    pattern = re.compile(
        r"""(?:(?<=^)|(?<=[\s'"]))""" + re.escape(word) + r"""(?=$|[\s'"=\\;&|)])"""
    )
    matches = list(pattern.finditer(line))
    if nth >= len(matches):
        return None
    return matches[nth].span()


def fix_script(text: str, source: str, spec: ArgSpec) -> ScriptFix:
    """``text`` with its ``sglang.launch_server`` flags spelled for ``spec``'s release: only
    the flags the translation table maps are rewritten, in place on their own line; every
    other byte (comments, layout, other flags, values) stays as it was. ConfigError naming
    ``source:line`` when a flag to change is not written literally (it comes from a
    variable), or when the release refuses a choice (nothing is guessed)."""
    from glmserve.argspec.launch_script import find_launch

    inv = find_launch(text, source)
    result = translate_argv(inv.argv, spec)
    refused = refusals(result.argv, spec)
    if refused:
        first = refused[0]
        line = inv.token_lines[result.origin[first.index or 0]]
        raise FlagValidationError(
            f"{source}:{line}: {first.message} ({first.suggestion})", findings=refused
        )
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, int, str, Change]] = []  # (line index, start, end, new, change)
    flags = Flags.parse(inv.argv)
    for change in result.changes:
        line_no = inv.token_lines[change.index]
        name = change.old.split("=", 1)[0]
        if change.index in inv.opaque:
            raise ConfigError(
                f"{source}:{line_no}: {change.old} comes from a run-time expansion; change it "
                f"by hand to {' '.join(change.new)}"
            )
        nth = sum(
            1
            for item in flags.items
            if item.start < change.index
            and inv.token_lines[item.start] == line_no
            and item.name == name
        )
        span = _word_at(lines[line_no - 1], name, nth)
        if span is None:
            raise ConfigError(
                f"{source}:{line_no}: {change.old} is not written literally on this line (a "
                f"variable or quoting builds it); change it by hand to {' '.join(change.new)}"
            )
        if len(change.new) == 1:
            new = change.new[0].split("=", 1)[0]
        else:
            row = lines[line_no - 1]
            around = row[max(span[0] - 1, 0) : span[0]] + row[span[1] : span[1] + 1]
            if any(q in around for q in "'\"="):
                raise ConfigError(
                    f"{source}:{line_no}: {change.old} is quoted or has a value; change it by "
                    f"hand to {' '.join(change.new)}"
                )
            new = shlex.join(change.new)
        edits.append((line_no - 1, span[0], span[1], new, change))
    for index, start, end, new, _change in sorted(edits, key=lambda e: (e[0], -e[1])):
        lines[index] = lines[index][:start] + new + lines[index][end:]
    changes = [(e[0] + 1, e[4]) for e in edits]
    return ScriptFix(source, spec.version, text, "".join(lines), changes)
