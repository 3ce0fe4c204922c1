"""YAML profiles -> LaunchSpec. Pure apart from reading the profile files.

A profile file (``configs/profiles/<name>.yaml``, shipped inside the wheel too, or
``~/.config/glmserve/profiles/``)::

    extends: parent-name          # optional; deep merge, child wins; lists replace
    description: free text
    sglang: ">=0.5.9,<0.5.10"     # PEP 440 range of SGLang releases the profile targets
    venv: /root/sglang-venv       # activated by the launch script (``~/`` allowed)
    python: python3
    launcher: sglang              # or ``simulator`` (glmserve's stand-in server)
    env: {NAME: value}            # exported by the launch script
    server: {flag-name: value}    # sglang.launch_server flags without ``--``:
                                  #   true -> bare flag, false/null -> omitted,
                                  #   list -> repeated values (nargs), mapping -> JSON
    patches: [flashinfer_mla_gather_cast]   # runtime patches shipped and activated
    nodes: [host-a, host-b]       # multi-node host group (optional)
    sim: {option: value}          # --sim-<option> flags, used only when simulating

Errors name the file and line (or the ``--set`` key) and raise ConfigError (exit 2).
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from glmserve.commalist import comma_list
from glmserve.config.spec import PATCHES_ENV, ArgOrigin, LaunchSpec
from glmserve.config.yamlload import load_yaml, read_config_text
from glmserve.errors import ConfigError, YamlSyntaxError
from glmserve.paths import project_configs_dir, require_regular_file, user_config_dir

KNOWN_KEYS = {
    "extends": str,
    "description": str,
    "sglang": str,
    "venv": str,
    "python": str,
    "launcher": str,
    "env": dict,
    "server": dict,
    "patches": list,
    "nodes": list,
    "sim": dict,
}
LAUNCHERS = ("sglang", "simulator")
KNOWN_PATCHES = ("flashinfer_mla_gather_cast", "mla_fp8_decode")
_FLAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A profile or host *name* (not a path): a file stem in a profile dir, so no separators,
# no leading dot or dash, nothing that needs quoting. Unicode letters are fine.
_NAME_RE = re.compile(r"^[^\W_][\w.+-]*$")
_HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SCALARS = (str, int, float, bool)
OVERRIDE_SOURCE = "<--set>"


@dataclass
class ProfileFile:
    """One parsed profile file: its data and the line of every key path in it."""

    name: str
    path: Path
    data: dict[str, Any]
    lines: dict[str, int] = field(default_factory=dict)  # "server.port" -> 1-based line


def profile_dirs() -> list[Path]:
    """Search order: user profiles first (they may shadow shipped ones), then the project's."""
    return [user_config_dir() / "profiles", project_configs_dir() / "profiles"]


def no_profiles_message() -> str:
    """What to say when no profile is found: the folders searched, so an install without
    its shipped profiles (or a wrong GLMSERVE_CONFIGS) is visible, not an empty list."""
    searched = ", ".join(str(d) for d in profile_dirs())
    return (
        f"no profiles found; looked in {searched} (add NAME.yaml to one of them, or point "
        "GLMSERVE_CONFIGS at a configs/ folder holding profiles/)"
    )


def _short(value: Any, limit: int = 60) -> str:
    """``repr`` capped to one short line: error messages must not echo a whole file."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_profile_path(name: str) -> bool:
    """``--profile`` is a path when it names a YAML file or holds a directory separator."""
    return name.endswith((".yaml", ".yml")) or "/" in name or "\\" in name


def check_profile_name(name: str, what: str = "profile name") -> None:
    """A name must be a plain file stem: ``..``, ``-x``, spaces or NUL are refused."""
    if not _NAME_RE.match(name) or ".." in name:
        raise ConfigError(
            f"invalid {what} {_short(name)}: use letters, digits, '.', '_', '-' (starting with "
            "a letter or digit), or give a path to a .yaml file"
        )


def find_profile_path(name: str) -> Path:
    """Profile name or path -> file. Unknown names list the available ones."""
    if "\0" in name:
        raise ConfigError(f"invalid profile {_short(name)}: contains a NUL byte")
    as_path = Path(name)
    if is_profile_path(name):
        if as_path.is_file():
            return as_path
        if as_path.exists():
            raise ConfigError(f"profile path is not a regular file: {name}")
        raise ConfigError(f"profile file not found: {name}")
    check_profile_name(name)
    for d in profile_dirs():
        for ext in (".yaml", ".yml"):
            p = d / f"{name}{ext}"
            if p.is_file():
                return p
            if p.is_symlink() or p.exists():  # listed as a profile: say why it is not one
                require_regular_file(p, "profile", missing="profile is a broken symlink")
    known = ", ".join(list_profile_names())
    if not known:
        raise ConfigError(f"unknown profile '{name}': {no_profiles_message()}")
    raise ConfigError(f"unknown profile '{name}'; known profiles: {known}")


def list_profile_names() -> list[str]:
    names: set[str] = set()
    for d in profile_dirs():
        try:
            if d.is_dir():
                names.update(p.stem for p in d.iterdir() if p.suffix in (".yaml", ".yml"))
        except OSError as exc:  # e.g. an unreadable user profile dir: name it, no traceback
            raise ConfigError(f"{d}: cannot list profiles ({exc.strerror or exc})") from exc
    return sorted(names)


def _line_map(node: yaml.Node, prefix: str, out: dict[str, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = str(key_node.value)
            path = f"{prefix}.{key}" if prefix else key
            out[path] = key_node.start_mark.line + 1
            _line_map(value_node, path, out)


def parse_profile_text(text: str, path: Path) -> ProfileFile:
    """Parse and type-check one profile file's text (no inheritance yet)."""
    data, root = load_yaml(text, str(path))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}:1: a profile must be a mapping of keys, got {type(data).__name__}"
        )
    lines: dict[str, int] = {}
    if root is not None:
        _line_map(root, "", lines)
    pf = ProfileFile(name=path.stem, path=path, data=data, lines=lines)
    _check_types(pf)
    return pf


def _where(pf: ProfileFile, key: str) -> str:
    line = pf.lines.get(key)
    return f"{pf.path}:{line}" if line else str(pf.path)


def _check_types(pf: ProfileFile) -> None:
    _check_top_level(pf.data, lambda k: _where(pf, k))
    extends = pf.data.get("extends")
    if isinstance(extends, str):
        try:
            check_profile_name(extends, "parent profile name")
        except ConfigError as exc:
            raise ConfigError(
                f"{_where(pf, 'extends')}: {exc} (extends takes a profile name, not a path)"
            ) from exc
    _check_sections(pf.data, lambda k: _where(pf, k))


def _check_top_level(data: dict[str, Any], where: Any) -> None:
    """Known keys with the right types (shared by files and the --set-merged result)."""
    for key, value in data.items():
        if key not in KNOWN_KEYS:
            raise ConfigError(
                f"{where(str(key))}: unknown key {_short(key)}; valid keys: "
                + ", ".join(sorted(KNOWN_KEYS))
            )
        want = KNOWN_KEYS[key]
        if value is None and key not in ("extends",):
            continue
        if not isinstance(value, want) or (isinstance(value, bool) and want is not bool):
            raise ConfigError(
                f"{where(key)}: '{key}' must be a {want.__name__}, "
                f"got {type(value).__name__} ({_short(value)})"
            )
        if want is str and any(not ch.isprintable() for ch in value):
            raise ConfigError(f"{where(key)}: '{key}' must be one line of printable text")


def _check_value(value: Any, key: str, where: Any, *, mapping_ok: bool) -> None:
    """A flag/env value: a scalar, a list of scalars, or (flags only) a JSON-able mapping.

    YAML also yields dates, binary and sets; their ``str`` is not what anyone meant to pass.
    """
    if value is None or isinstance(value, _SCALARS):
        if isinstance(value, float) and not math.isfinite(value) and not mapping_ok:
            raise ConfigError(f"{where(key)}: {key}: {value!r} is not a usable value; quote it")
        return
    if isinstance(value, list) and mapping_ok:
        for item in value:
            if not isinstance(item, _SCALARS):
                raise ConfigError(
                    f"{where(key)}: {key}: list values must hold scalars, got {_short(item)}"
                )
        return
    if isinstance(value, dict) and mapping_ok:
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"{where(key)}: {key}: a mapping value must be plain JSON data (strings, "
                f"numbers, booleans, lists, string-keyed mappings): {exc}"
            ) from exc
        return
    if isinstance(value, (dict, list)):
        raise ConfigError(f"{where(key)}: {key}: env values must be scalars")
    kind = "a date" if isinstance(value, (datetime.date, datetime.datetime)) else None
    raise ConfigError(
        f"{where(key)}: {key}: YAML read {_short(value)} as {kind or type(value).__name__}, "
        "not text or a number; quote it to pass it as text"
    )


def _check_sections(data: dict[str, Any], where: Any) -> None:
    """Checks shared by files and the merged result (so --set values are checked too)."""
    if data.get("launcher") not in (None, *LAUNCHERS):
        raise ConfigError(
            f"{where('launcher')}: launcher must be one of {', '.join(LAUNCHERS)}, "
            f"got {data['launcher']!r}"
        )
    for name, value in (data.get("server") or {}).items():
        key = f"server.{name}"
        if not isinstance(name, str) or not _FLAG_RE.match(name) or name.startswith("-"):
            raise ConfigError(
                f"{where(key)}: server keys are sglang flag names without '--', got {_short(name)}"
            )
        _check_value(value, key, where, mapping_ok=True)
    for name, value in (data.get("env") or {}).items():
        if not isinstance(name, str) or not _ENV_RE.match(name):
            raise ConfigError(
                f"{where(f'env.{name}')}: invalid environment variable name {_short(name)} "
                "(letters, digits and '_', not starting with a digit)"
            )
        _check_value(value, f"env.{name}", where, mapping_ok=False)
    for patch in data.get("patches") or []:
        if patch not in KNOWN_PATCHES:
            raise ConfigError(
                f"{where('patches')}: unknown patch {_short(patch)}; "
                f"known: {', '.join(KNOWN_PATCHES)}"
            )
    for node in data.get("nodes") or []:
        if not isinstance(node, str) or not _HOST_RE.match(node):
            raise ConfigError(
                f"{where('nodes')}: nodes lists host names from hosts.yaml, got {_short(node)}"
            )
    for name, value in (data.get("sim") or {}).items():
        if not isinstance(name, str) or not _FLAG_RE.match(name):
            raise ConfigError(f"{where(f'sim.{name}')}: invalid simulator option {_short(name)}")
        _check_value(value, f"sim.{name}", where, mapping_ok=True)
    rng = data.get("sglang")
    if rng:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            SpecifierSet(rng)
        except InvalidSpecifier as exc:
            raise ConfigError(f"{where('sglang')}: invalid version range {_short(rng)}") from exc


def read_profile_file(path: Path) -> ProfileFile:
    """Size-capped, UTF-8 (BOM tolerated) read of one profile, then parse and type-check."""
    return parse_profile_text(read_config_text(path, "profile"), path)


def load_chain(name: str) -> list[ProfileFile]:
    """The ``extends`` chain, base first. Cycles and unknown parents are ConfigErrors."""
    chain: list[ProfileFile] = []
    seen: list[str] = []
    current: str | None = name
    child: ProfileFile | None = None
    while current is not None:
        if current in seen:
            cycle = " -> ".join([*seen, current])
            raise ConfigError(f"{_where(chain[-1], 'extends')}: extends cycle: {cycle}")
        seen.append(current)
        try:
            path = find_profile_path(current)
        except ConfigError as exc:
            if child is None:
                raise
            raise ConfigError(f"{_where(child, 'extends')}: unknown parent profile: {exc}") from exc
        pf = read_profile_file(path)
        chain.append(pf)
        child = pf
        parent = pf.data.get("extends")
        current = str(parent) if parent else None
    return list(reversed(chain))


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Child wins; mappings merge recursively (keeping the parent's key order); lists replace."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(item: str) -> tuple[list[str], Any]:
    """``server.port=8001`` -> (["server", "port"], 8001). Values are YAML scalars/lists."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. server.port=8001")
    key, raw = item.split("=", 1)
    parts = key.strip().split(".")
    if not parts[0] or any(not p for p in parts):
        raise ConfigError(f"--set {item!r}: empty key path")
    if parts[0] not in KNOWN_KEYS or parts[0] == "extends":
        raise ConfigError(
            f"--set {key}: unknown key '{parts[0]}'; valid: "
            + ", ".join(sorted(k for k in KNOWN_KEYS if k != "extends"))
        )
    container = KNOWN_KEYS[parts[0]] is dict
    if container and len(parts) != 2:
        raise ConfigError(f"--set {key}: use {parts[0]}.NAME=VALUE (one level below '{parts[0]}')")
    if not container and len(parts) != 1:
        raise ConfigError(f"--set {key}: '{parts[0]}' has no sub-keys")
    try:
        value = load_yaml(raw, f"--set {key.strip()}")[0] if raw.strip() else ""
    except YamlSyntaxError:
        value = raw  # not YAML (e.g. an unbalanced quote): the text itself
    if parts[0] == "patches" and isinstance(value, str):
        value = comma_list(value, f"--set {key.strip()}") if value.strip() else []
    return parts, value


def apply_overrides(
    data: dict[str, Any], overrides: list[str] | tuple[str, ...]
) -> tuple[dict[str, Any], set[str]]:
    out = copy.deepcopy(data)
    touched: set[str] = set()
    for item in overrides:
        parts, value = parse_override(item)
        if len(parts) == 2:
            section = out.get(parts[0]) or {}
            section[parts[1]] = value
            out[parts[0]] = section
        else:
            out[parts[0]] = value
        touched.add(".".join(parts))
    return out, touched


def _scalar_str(value: Any) -> str:
    """YAML scalar -> the argv/env word (YAML booleans as ``true``/``false``, not ``True``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def server_argv(server: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``server:`` mapping -> (argv, flag per argv token). Order follows the mapping."""
    argv: list[str] = []
    owners: list[str] = []
    for name, value in server.items():
        flag = f"--{name}"
        if value is None or value is False:
            continue
        if value is True:
            tokens = [flag]
        elif isinstance(value, list):
            tokens = [flag, *(_scalar_str(v) for v in value)]
        elif isinstance(value, dict):
            tokens = [flag, json.dumps(value, separators=(",", ":"))]
        else:
            text = _scalar_str(value)
            # A value like "--evil" or "-1" as its own word would be read by argparse as a
            # flag; glued on with '=' it is always this flag's value.
            tokens = [f"{flag}={text}"] if text.startswith("-") else [flag, text]
        argv.extend(tokens)
        owners.extend([name] * len(tokens))
    return argv, owners


def sim_argv(sim: dict[str, Any]) -> list[str]:
    argv, _ = server_argv(
        {f"sim-{k}" if not k.startswith("sim-") else k: v for k, v in sim.items()}
    )
    return argv


@dataclass
class ResolvedProfile:
    """A merged profile before it becomes a LaunchSpec (kept for `profiles` listings)."""

    name: str
    data: dict[str, Any]
    chain: list[ProfileFile]

    @property
    def parent(self) -> str | None:
        return self.chain[-1].data.get("extends")


def resolve_profile(name: str, overrides: list[str] | tuple[str, ...] = ()) -> ResolvedProfile:
    chain = load_chain(name)
    merged: dict[str, Any] = {}
    for pf in chain:
        merged = deep_merge(merged, {k: v for k, v in pf.data.items() if k != "extends"})
    merged, _ = apply_overrides(merged, overrides)
    _check_top_level(merged, lambda k: f"--set {k}")
    _check_sections(merged, lambda k: f"--set {k}")
    return ResolvedProfile(name=chain[-1].name, data=merged, chain=chain)


# SGLang's flag and its alias (0.5.9 server_args.py: "--model-path", "--model"); a profile
# key is the flag without its dashes.
MODEL_KEYS = ("model-path", "model")


def _require_model(resolved: ResolvedProfile) -> None:
    """Refuse a resolved profile that names no model: it rendered an empty argv (exit 0) and
    ``launch`` would start a server with no ``--model-path``. The rule is about the merged
    result, so a comment-only file that ``extends`` a base is fine; an empty file is not."""
    server = resolved.data.get("server") or {}
    if any(server.get(k) not in (None, False, "") for k in MODEL_KEYS):
        return
    pf = resolved.chain[-1]
    if len(resolved.chain) == 1 and not pf.data:
        raise ConfigError(f"{pf.path}: profile is empty (it needs at least server.model-path)")
    raise ConfigError(
        f"{pf.path}: the profile names no model: give server.model-path "
        "(in it, a parent it extends, or --set server.model-path=...)"
    )


def _origin_of(key: str, chain: list[ProfileFile], overridden: set[str]) -> ArgOrigin:
    if key in overridden:
        return ArgOrigin(key=key, file=OVERRIDE_SOURCE, line=None)
    for pf in reversed(chain):
        if key in pf.lines:
            return ArgOrigin(key=key, file=str(pf.path), line=pf.lines[key])
    return ArgOrigin(key=key, file=str(chain[-1].path), line=None)


def build_launch_spec(
    resolved: ResolvedProfile, overrides: list[str] | tuple[str, ...] = ()
) -> LaunchSpec:
    """Merged profile -> LaunchSpec (argv, env, origins of every flag)."""
    data = resolved.data
    _require_model(resolved)
    overridden = {".".join(parse_override(o)[0]) for o in overrides}
    argv, owners = server_argv(data.get("server") or {})
    origins: dict[str, ArgOrigin] = {}
    for name in dict.fromkeys(owners):
        origins[f"--{name}"] = _origin_of(f"server.{name}", resolved.chain, overridden)
    env = {str(k): _scalar_str(v) for k, v in (data.get("env") or {}).items() if v is not None}
    patches = [str(p) for p in data.get("patches") or []]
    if patches:
        env[PATCHES_ENV] = ",".join(patches)
    return LaunchSpec(
        profile=resolved.name,
        argv=argv,
        env=env,
        venv=data.get("venv") or None,
        python=str(data.get("python") or "python3"),
        launcher=str(data.get("launcher") or "sglang"),
        patches=patches,
        sglang_range=data.get("sglang") or None,
        nodes=[str(n) for n in data.get("nodes") or []],
        origins=origins,
        sources=[str(pf.path) for pf in resolved.chain],
        sim_args=sim_argv(data.get("sim") or {}),
        extra={"description": data.get("description") or ""},
    )


def load_profile(
    name: str,
    overrides: list[str] | tuple[str, ...] = (),
    sglang_version: str | None = None,
) -> LaunchSpec:
    """Profile name -> LaunchSpec; with ``sglang_version`` the argv is spelled for that
    release (glmserve.argspec.portable) and validated against its argparse spec
    (FlagValidationError naming file:line and key on failure)."""
    spec = build_launch_spec(resolve_profile(name, overrides), overrides)
    if sglang_version:
        from glmserve.argspec.portable import for_release

        spec = for_release(spec, sglang_version).spec
    return spec


def simulate(spec: LaunchSpec, python: str | None = None) -> LaunchSpec:
    """Same flags and env, but launched by glmserve's simulator (no GPU, no SGLang needed).

    The SGLang venv usually lacks glmserve, so the simulator runs on ``python`` (default: the
    interpreter running glmserve) with no venv activation.
    """
    from dataclasses import replace

    return replace(spec, launcher="simulator", venv=None, python=python or sys.executable)


def list_profile_summaries() -> list[dict[str, Any]]:
    """One row per profile for ``glmserve profiles``; a broken profile shows its error."""
    rows = []
    for name in list_profile_names():
        try:
            resolved = resolve_profile(name)
        except ConfigError as exc:
            rows.append(
                {
                    "name": name,
                    "extends": None,
                    "attention_backend": None,
                    "patches": [],
                    "sglang": None,
                    "description": f"error: {exc}",
                    "path": None,
                }
            )
            continue
        server = resolved.data.get("server") or {}
        rows.append(
            {
                "name": name,
                "extends": resolved.parent,
                "attention_backend": server.get("attention-backend"),
                "patches": list(resolved.data.get("patches") or []),
                "sglang": resolved.data.get("sglang"),
                "description": resolved.data.get("description") or "",
                "path": str(resolved.chain[-1].path),
            }
        )
    return rows
