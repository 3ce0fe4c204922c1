"""Options of starting a server, declared once (``glmserve.optmodel``) for every stage that
launches one: ``launch`` itself, and a sweep or a tune (which compose ``StartOptions``).

``cli/options.py``'s ``SetOpt``... aliases for the verbs not generated from a model are
derived from these fields, so ``--set`` means and reads the same on every verb.
"""

from __future__ import annotations

from typing import Annotated, Any

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


class PlaceOptions(Options):
    """Where a stage's servers run: one host, or a host group (``launch``, ``sweep``)."""

    host: Annotated[
        str | None, opt("--host", "-H", help="Host from hosts.yaml (default local).")
    ] = None
    nodes: Annotated[
        str | None,
        opt("--nodes", help="Host group a,b (node 0 first): one server over several nodes."),
    ] = None


DEFAULT_POLL_S = 1.0  # --poll: seconds between reads of the log


class LaunchOptions(StartOptions, PlaceOptions):
    """``glmserve launch``'s options (``--json`` is rendering only)."""

    cli_order = ("profile", "host", "sets", "simulate", "no_wait", "replace", "timeout",
                 "stall_timeout", "stall_budgets", "poll", "nodes")  # fmt: skip

    profile: Annotated[str, opt("--profile", "-p", help="Profile name or YAML path.")]
    no_wait: Annotated[bool, opt("--no-wait", help="Start and return at once.")] = False
    replace: Annotated[bool, opt("--replace", help="Stop a live run on that port first.")] = False
    stall_timeout: Annotated[
        float | None,
        opt(
            "--stall-timeout",
            help="Seconds without log progress = STALLED, every phase (default per phase).",
        ),
    ] = None
    poll: Annotated[float, opt("--poll", help="Seconds between reads of the log.", min=0.05)] = (
        DEFAULT_POLL_S
    )

    def plan(self) -> tuple[Any, Any]:
        """``(Plan, stall budgets)``: the deployment to launch, every option checked first
        (a typo fails before anything starts). ConfigError names the flag."""
        from glmserve.deploy.plan import parse_nodes, plan
        from glmserve.deploy.stall_budgets import check_stall_timeout, parse_stall_budgets

        budgets = parse_stall_budgets(self.stall_budgets)
        check_stall_timeout(self.stall_timeout)
        p = plan(
            self.profile,
            host=self.host,
            nodes=parse_nodes(self.nodes),
            overrides=list(self.sets),
            simulate=self.simulate,
        )
        return p, budgets
