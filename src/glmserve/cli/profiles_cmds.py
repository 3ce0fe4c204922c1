"""Verbs: ``profiles`` (list) and ``render`` (profile -> script | argv | JSON)."""

from __future__ import annotations

import shlex
import sys
from enum import Enum

import typer

from glmserve.cli._app import app, emit_json, err, out
from glmserve.cli.options import JsonOpt, ProfileOpt, SetOpt, SglangVersionOpt, SimulateOpt
from glmserve.cli.views import profiles_table


class RenderFormat(str, Enum):
    script = "script"
    argv = "argv"
    json = "json"


@app.command("profiles")
def profiles_cmd(json_out: JsonOpt = False) -> None:
    """List profiles: name, parent, attention backend, patches, target sglang range.

    Profiles are read from ~/.config/glmserve/profiles (they shadow the others), then from
    $GLMSERVE_CONFIGS/profiles, else ./configs/profiles, else the ones shipped with glmserve.
    When there are none, stderr names the folders searched (exit 0, and [] with --json).

    Example: glmserve profiles --json
    """
    from glmserve.config.profiles import list_profile_summaries, no_profiles_message

    rows = list_profile_summaries()
    if not rows:
        err.print(no_profiles_message(), highlight=False, markup=False)
    if json_out:
        emit_json(rows)
        return
    if not rows:
        return
    out.print(profiles_table(rows))


@app.command("render")
def render_cmd(
    profile: ProfileOpt,
    fmt: RenderFormat = typer.Option(RenderFormat.script, "--format", "-f"),
    sglang_version: SglangVersionOpt = None,
    overrides: SetOpt = (),
    simulate: SimulateOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Render a profile to the launch script, the argv, or JSON (argv + env + metadata).

    The flags are spelled for the target release (renamed flags take its names, deprecated
    ones their documented successors; each change is printed as a note on stderr) and
    checked by its argparse spec. Target: --sglang-version, else the newest shipped release
    in the profile's sglang: range; with neither, the profile's flags as written.

    Examples:
      glmserve render --profile trtllm_mla
      glmserve render --profile trtllm_mla --format argv --sglang-version 0.5.9
      glmserve render --profile trtllm_mla --format argv --sglang-version 0.5.23
      glmserve render --profile flashinfer_gtc --set server.port=8001 --json
    """
    from glmserve.argspec.portable import for_release, render_target
    from glmserve.config.profiles import load_profile
    from glmserve.config.profiles import simulate as to_simulator
    from glmserve.config.render import render_json, render_script

    spec = load_profile(profile, overrides)
    # The simulator takes any release's flags, as `launch --simulate` passes them: only an
    # explicit --sglang-version re-spells them there.
    target, why = (
        render_target(spec, sglang_version) if sglang_version or not simulate else (None, "")
    )
    warnings: list[str] = []
    if target is not None:
        ported = for_release(spec, target)
        spec, warnings = ported.spec, ported.warnings
        for change in ported.changes:
            err.print(
                f"note: sglang {ported.version}: {change.format()}", highlight=False, markup=False
            )
        err.print(f"note: rendered for sglang {ported.version} ({why})", highlight=False)
    if simulate:
        spec = to_simulator(spec)
    for w in warnings:
        err.print(f"warning: {w}", highlight=False, markup=False)
    if json_out or fmt is RenderFormat.json:
        emit_json({**render_json(spec, warnings), "sglang_target": target})
    elif fmt is RenderFormat.argv:
        sys.stdout.write(shlex.join(spec.argv) + "\n")
    else:
        sys.stdout.write(render_script(spec))
