"""What to suggest for a flag or choice a release does not have, from every shipped release.

A flag renamed upstream is paired with its new name from consecutive shipped specs (same
action class, near-identical help or a one-token name change with overlapping choices), from
deprecated aliases whose help names the new flag, and from the cited table
(``data/translations.json``: the spec diff cannot pair every rename on its own). Failing a
rename, the suggestion says which releases have the flag (or choice) and what is spelled
closest in this one.
"""

from __future__ import annotations

import difflib
import re
from functools import lru_cache
from itertools import pairwise
from typing import Any

from glmserve.argspec.model import ArgAction, ArgSpec
from glmserve.argspec.releases import available_versions, distinct_shipped_specs, shipped_specs


def known_renames() -> dict[str, str]:
    """Flags renamed upstream (old -> new), from the cited table ``data/translations.json``
    (the spec diff cannot pair every rename on its own)."""
    from glmserve.argspec.portable import load_table

    return {r.old: r.new for r in load_table().renames}


def known_choice_replacements() -> dict[tuple[str, str], list[str]]:
    """(flag, dropped choice) -> what to use instead, from the same table."""
    from glmserve.argspec.portable import load_table

    return {
        (flag, c.value): list(c.instead) for c in load_table().removed_choices for flag in c.flags
    }


def _similar(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def _pair_renames(old: ArgSpec, new: ArgSpec) -> dict[str, str]:
    """Flags present in ``old`` whose action vanished in ``new``, paired with a new flag that
    does the same job: same action class, and a near-identical help text or a name that
    differs by one token with overlapping choices."""
    new_dests = {a.dest for a in new.actions}
    old_opts = set(old.by_option)
    removed = [a for a in old.actions if a.option_strings and a.dest not in new_dests]
    added = [a for a in new.actions if a.option_strings and not set(a.option_strings) & old_opts]
    renames: dict[str, str] = {}
    for gone in removed:
        best: tuple[float, ArgAction] | None = None
        gone_help = _norm_help(gone.help)
        for cand in added:
            if cand.action != gone.action:
                continue
            name_score = _similar(gone.name, cand.name)
            if name_score < 0.5:  # both rules need at least this much; skip the costly part
                continue
            score = 0.0
            if len(gone_help) >= 20:
                matcher = difflib.SequenceMatcher(None, gone_help, _norm_help(cand.help))
                if matcher.real_quick_ratio() >= 0.85 and matcher.quick_ratio() >= 0.85:
                    help_score = matcher.ratio()
                    if help_score >= 0.85:
                        score = help_score + name_score
            if not score and gone.choices and cand.choices and name_score >= 0.8:
                choice_score = _jaccard(gone.choices, cand.choices)
                if choice_score >= 0.5:
                    score = name_score + choice_score
            if score and (best is None or score > best[0]):
                best = (score, cand)
        if best is not None:
            for opt in gone.option_strings:
                renames[opt] = best[1].name
    return renames


def _norm_help(text: str | None) -> str:
    return re.sub(r"\W+", " ", (text or "").lower()).strip()


def _jaccard(a: tuple[Any, ...] | None, b: tuple[Any, ...] | None) -> float:
    if not a or not b:
        return 1.0 if a == b else 0.0
    sa, sb = {repr(x) for x in a}, {repr(x) for x in b}
    return len(sa & sb) / len(sa | sb)


@lru_cache(maxsize=1)
def derived_renames() -> dict[str, str]:
    """old flag -> newer flag, from consecutive shipped specs plus ``known_renames()``."""
    specs = distinct_shipped_specs()
    renames: dict[str, str] = {}
    for old, new in pairwise(specs):
        renames.update(_pair_renames(old, new))
    for spec in specs:
        renames.update(_deprecated_aliases(spec))
    renames.update(known_renames())
    return renames


def _deprecated_aliases(spec: ArgSpec) -> dict[str, str]:
    """Deprecated flags kept as aliases of a new one: same dest, and the help names it
    (0.5.15: ``--nsa-decode-backend`` "[Deprecated] Use --dsa-decode-backend instead")."""
    found: dict[str, str] = {}
    for act in spec.actions:
        if not act.is_deprecated or not act.help:
            continue
        for cand in re.findall(r"--[a-z0-9][a-z0-9-]*[a-z0-9]\b(?![-{])", act.help):
            target = spec.by_option.get(cand)
            if target is not None and target is not act and target.dest == act.dest:
                found.update({opt: target.name for opt in act.option_strings})
                break
    return found


def _rename_hit(flag: str, spec: ArgSpec) -> tuple[str, bool] | None:
    """(name in ``spec``, True if it is the newer name) for a flag renamed across releases."""
    renames = derived_renames()
    for table, newer in ((renames, True), ({new: old for old, new in renames.items()}, False)):
        seen = {flag}
        current = flag
        while current in table and table[current] not in seen:
            current = table[current]
            seen.add(current)
            if current in spec.by_option:
                return current, newer
    return None


def rename_text(flag: str, spec: ArgSpec) -> str | None:
    """ "renamed to X in sglang V" (or "V still calls it X") when ``flag`` was renamed."""
    hit = _rename_hit(flag, spec)
    if hit is None:
        return None
    target, newer = hit
    if newer:
        return f"renamed to {target} in sglang {spec.version}"
    return f"sglang {spec.version} still calls it {target}"


def releases_with(flag: str) -> list[str]:
    """The shipped releases that have ``flag``, oldest first."""
    return [s.version for s in shipped_specs() if flag in s.by_option]


def unknown_flag_suggestion(flag: str, spec: ArgSpec) -> str | None:
    """For a flag ``spec``'s release lacks: its rename, else where it exists and what is
    spelled closest here."""
    renamed = rename_text(flag, spec)
    if renamed:
        return renamed
    close = difflib.get_close_matches(flag, spec.options, n=3, cutoff=0.75)
    elsewhere = releases_with(flag)
    hint = f"{flag} exists in sglang {release_span(elsewhere)}" if elsewhere else None
    if close:
        did = "did you mean " + " or ".join(close) + "?"
        return f"{hint}; {did}" if hint else did
    return hint


def release_span(versions: list[str]) -> str:
    """``0.5.8..0.5.10, 0.5.20`` -- runs of consecutive shipped releases."""
    order = available_versions()
    runs: list[list[str]] = []
    for version in sorted(versions, key=order.index):
        if runs and order.index(version) == order.index(runs[-1][-1]) + 1:
            runs[-1].append(version)
        else:
            runs.append([version])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]}..{r[-1]}" for r in runs)


def choice_suggestion(act: ArgAction, raw: str, spec: ArgSpec) -> str:
    """For a choice ``spec``'s release refuses: where it was a choice, what the table says
    replaces it, a close spelling, and the valid choices."""
    parts: list[str] = []
    had = [
        s.version
        for s in shipped_specs()
        if (other := s.by_option.get(act.name)) and other.choices and raw in other.choices
    ]
    if had:
        parts.append(f"{raw!r} is a choice in sglang {release_span(had)} but not in {spec.version}")
    known = known_choice_replacements()
    for opt in act.option_strings:
        replacements = known.get((opt, raw))
        if replacements:
            present = [r for r in replacements if act.choices and r in act.choices]
            if present:
                parts.append("use " + " or ".join(present) + " instead")
    close = difflib.get_close_matches(raw, [str(c) for c in act.choices or ()], n=2, cutoff=0.6)
    if close and not parts:
        parts.append("did you mean " + " or ".join(repr(c) for c in close) + "?")
    parts.append("valid: " + ", ".join(str(c) for c in act.choices or ()))
    return "; ".join(parts)
