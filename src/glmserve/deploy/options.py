"""Options of starting a server, declared once (``glmserve.optmodel``) for every stage that
launches one: ``launch`` itself, and a sweep or a tune (which compose ``StartOptions``).

``cli/options.py``'s ``SetOpt``... aliases for the verbs not generated from a model are
derived from these fields, so ``--set`` means and reads the same on every verb.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from glmserve.optmodel import Options, opt

DEFAULT_READY_TIMEOUT = 7200.0  # --timeout not given: the watcher's own deadline (s)
# A release is ``0.5.9``, ``v0.5.9.post1``, ``0.5.10rc0``: a few dozen characters at most.
MAX_RELEASE_CHARS = 64


def release_given(value: str | None) -> str | None:
    """``--sglang-version ''`` (an unset shell variable) is refused: verbs test the value for
    truth, so an empty one would silently mean "no release" instead of the one intended.
    A value no release can be (over MAX_RELEASE_CHARS, or with blanks or control characters)
    is refused here too: a 300-character one reached ``Path.is_file`` and was exit 70
    ("File name too long"). ValueError: click's usage error, raised while parsing."""
    if value is not None and not value.strip():
        raise ValueError("empty; name a release such as 0.5.9 (see validate --list-versions)")
    if value is not None and (
        len(value) > MAX_RELEASE_CHARS or any(c.isspace() or not c.isprintable() for c in value)
    ):
        shown = value if len(value) <= 40 else f"{value[:40]}... ({len(value)} characters)"
        raise ValueError(
            f"{shown!r} is not a release version; name one such as 0.5.9 "
            "(see validate --list-versions)"
        )
    return value


class StartOptions(Options):
    """How every server a stage starts is started and watched to READY."""

    sets: Annotated[
        list[str],
        opt("--set", help="Override a profile key, e.g. --set server.port=8001 (repeatable)."),
    ] = Field(default_factory=list)
    timeout: Annotated[
        float | None,
        opt(
            "--timeout",
            help=f"Seconds to wait for READY (default {DEFAULT_READY_TIMEOUT:.0f}; 0: no "
            "deadline).",
            min=0,
        ),
    ] = None
    stall_budgets: Annotated[
        list[str],
        opt(
            "--stall-budget",
            help="Start-up: PHASE=SECONDS without log progress = STALLED (repeatable; see docs).",
        ),
    ] = Field(default_factory=list)
    simulate: Annotated[bool, opt("--simulate", help="Launch the simulator, same flags.")] = False


class ReleaseOptions(Options):
    """The SGLang release a stage spells its server flags for (``tune``, ``validate``...)."""

    sglang_version: Annotated[
        str | None,
        opt(
            "--sglang-version",
            help="SGLang release whose flag names and argparse apply (see validate "
            "--list-versions).",
            callback=release_given,
        ),
    ] = None
