"""``--write-profile NAME``: the winner as a user profile that ``extends:`` the tuned one and
sets only what the tune changed (so a later edit of the parent still flows through)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from glmserve.errors import ConfigError
from glmserve.paths import user_config_dir
from glmserve.tune import state as st

MARK = "tuned by glmserve tune"


def changed_keys(
    parent_server: dict[str, Any], config: dict[str, str], overrides: list[str]
) -> dict[str, Any]:
    """Server keys whose winning value differs from the parent's (``--set server.*`` given to
    the tune count too: every trial ran with them). Values are YAML scalars, as in profiles;
    ``server.port`` is left out (the tune picks a port per host, not a setting to keep)."""
    wanted: dict[str, Any] = {}
    for item in overrides:
        key, _, raw = item.partition("=")
        if key.startswith("server.") and key != "server.port":
            wanted[key[len("server.") :]] = yaml.safe_load(raw)
    for key, raw in config.items():
        wanted[key] = yaml.safe_load(raw)
    return {k: v for k, v in wanted.items() if parent_server.get(k) != v}


def check_target(name: str, tuned_profile: str) -> Path:
    """The file ``--write-profile NAME`` would write, or a one-line ConfigError when NAME may
    not be written: not a plain profile name, the tuned profile itself, or a profile there
    that tune did not write. Called before the first trial too, so a tune of hours never
    ends in a refusal it could have given at once; again at the end (the file may have
    appeared meanwhile)."""
    from glmserve.config import profiles

    profiles.check_profile_name(name, "--write-profile name")
    if name == tuned_profile:
        raise ConfigError(f"--write-profile {name}: that is the tuned profile itself")
    path = user_config_dir() / "profiles" / f"{name}.yaml"
    if not path.exists():
        return path
    try:
        ours = MARK in path.read_text(errors="replace")
    except OSError as exc:  # a directory of that name, an unreadable file
        raise ConfigError(f"--write-profile {name}: {path}: {exc.strerror or exc}") from exc
    if not ours:
        raise ConfigError(f"--write-profile {name}: {path} exists and was not written by tune")
    return path


def write_profile(tune: st.Tune, name: str, sglang_version: str | None = None) -> Path:
    """Write ``<user config>/profiles/NAME.yaml`` for the best trial and check that it renders
    (and validates against ``sglang_version`` when given). Returns the path."""
    from glmserve.config import profiles

    path = check_target(name, tune.profile)
    best = st.best_trial(tune)
    if best is None:
        raise ConfigError("--write-profile: no trial met the SLOs; nothing to write")
    parent = profiles.resolve_profile(tune.profile)
    changes = changed_keys(
        parent.data.get("server") or {}, best.config, tune.options.get("overrides", [])
    )
    doc: dict[str, Any] = {
        "extends": tune.profile,
        "description": f"{tune.profile} {MARK} {tune.tune_id} "
        f"({tune.objective}, concurrency {best.concurrency})",
    }
    if changes:
        doc["server"] = changes
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{name}.yaml.tmp")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
    old = path.read_bytes() if path.exists() else None
    tmp.replace(path)
    try:
        profiles.load_profile(name, [], sglang_version)  # renders; validates for the release
    except Exception:
        if old is None:
            path.unlink()
        else:
            path.write_bytes(old)
        raise
    return path
