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
def profiles_cmd(
    json_out: JsonOpt = False,
    for_host: str | None = typer.Option(
        None, "--for-host", help="Judge each profile for this host's GPU and SGLang release."
    ),
    gpu_arch: str | None = typer.Option(
        None, "--gpu-arch", help="sm90 | sm100 | sm120 (or 12.0): instead of asking the host."
    ),
    sglang_version: SglangVersionOpt = None,
) -> None:
    """List profiles: name, parent, attention backend, patches, target sglang range.

    Profiles are read from ~/.config/glmserve/profiles (they shadow the others), then from
    $GLMSERVE_CONFIGS/profiles, else ./configs/profiles, else the ones shipped with glmserve.
    When there are none, stderr names the folders searched (exit 0, and [] with --json).

    With --for-host HOST (or --gpu-arch and --sglang-version): whether each profile can run
    there and why not, from the backend facts per release and GPU architecture (a refusal or
    crash with its log line and source); what is not given is read from the host
    (nvidia-smi's compute capability, the profile python's sglang version).

    Examples:
      glmserve profiles --json
      glmserve profiles --for-host gpu8
      glmserve profiles --gpu-arch sm120 --sglang-version 0.5.23
    """
    from glmserve.config.profiles import list_profile_summaries, no_profiles_message

    rows = list_profile_summaries()
    if for_host or gpu_arch or sglang_version:
        _profiles_for_host(rows, for_host, gpu_arch, sglang_version, json_out)
        return
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


def _host_facts(host: str | None, arch: str | None, version: str | None) -> tuple[str, str]:
    """(arch, sglang version): the ones given, the rest read on ``host`` with one command
    each. One-line ConfigError when neither is available."""
    from glmserve.argspec.backend_facts import normalize_arch
    from glmserve.argspec.host_fit import compute_cap_arch
    from glmserve.argspec.releases import resolve_version
    from glmserve.errors import ConfigError

    if arch is not None:
        norm = normalize_arch(arch)
        if norm is None:
            raise ConfigError(f"--gpu-arch {arch!r}: use sm90, sm100 or sm120 (or 9.0/10.0/12.0)")
        arch = norm
    if version is not None:
        version = resolve_version(version)
    if arch is not None and version is not None:
        return arch, version
    if not host:
        missing = "--gpu-arch" if arch is None else "--sglang-version"
        raise ConfigError(f"{missing}: needed without --for-host (or name a host to read it on)")
    from glmserve.config.profiles import load_profile
    from glmserve.deploy.preflight import check_python
    from glmserve.remote.hosts import get_host
    from glmserve.remote.transport import transport_for

    t = transport_for(get_host(host))
    if arch is None:
        res = t.run("nvidia-smi --query-gpu=compute_cap --format=csv,noheader", timeout=60)
        arch = compute_cap_arch(res.stdout) if res.ok else None
        if arch is None:
            why = res.tail() or res.tail("stdout") or "no GPU listed"
            raise ConfigError(f"host {host}: no GPU architecture from nvidia-smi ({why}); "
                              "pass --gpu-arch")  # fmt: skip
    if version is None:
        _p, _s, found = check_python(t, load_profile("glm5-nvfp4-tp8"))
        if found is None:
            raise ConfigError(f"host {host}: no sglang in the profiles' python; "
                              "pass --sglang-version")  # fmt: skip
        version = found
    return arch, version


def _profiles_for_host(
    rows: list[dict], host: str | None, arch: str | None, version: str | None, json_out: bool
) -> None:
    """The ``--for-host`` view: one verdict per profile, with the facts' reasons."""
    from rich.table import Table

    from glmserve.argspec.host_fit import profile_fit
    from glmserve.cli.views import cell
    from glmserve.config.profiles import load_profile
    from glmserve.errors import ConfigError

    arch, version = _host_facts(host, arch, version)
    out_rows = []
    for r in rows:
        if r["description"].startswith("error:"):
            fit = {"runs": False, "reasons": [r["description"]]}
        else:
            try:
                fit = profile_fit(load_profile(r["name"]), arch, version)
            except ConfigError as exc:
                fit = {"runs": False, "reasons": [f"error: {exc}"]}
        out_rows.append({"name": r["name"], **fit})
    if json_out:
        emit_json({"host": host, "gpu_arch": arch, "sglang": version, "profiles": out_rows})
        return
    where = f"host {host}: " if host else ""
    out.print(f"{where}{arch}, sglang {version}", highlight=False, markup=False)
    table = Table("profile", "runs", "why / trade-off")
    table.columns[0].no_wrap = True
    for r in out_rows:
        word = {True: "yes", False: "no", None: "unverified"}[r["runs"]]
        table.add_row(cell(r["name"]), word, cell("; ".join(r["reasons"]) or "-"))
    out.print(table)
