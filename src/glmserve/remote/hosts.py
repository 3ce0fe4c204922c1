"""Hosts: where a server runs, read from ``configs/hosts.yaml`` and the user's ``hosts.yaml``.

A host is a name -> how to reach it (an ssh alias or ``user@host``, port, identity file, jump
host) and where to work there (workdir, python, venv). The built-in ``local`` host needs no ssh
and is the default. The user's file (``~/.config/glmserve/hosts.yaml``) overrides the project's
per host name. Errors name file:line and the key, and an unknown host lists the known ones;
an entry is checked only when its host is used, so one typo does not block every other host
(the checks of one entry: :mod:`glmserve.remote.host_config`).

Trust: the project file is read from ``./configs`` (a checked-out repo), so no hosts file may
make ssh run or load anything locally or weaken host-key checking (``ssh_options`` is an
allow-list, names and paths are plain words), and only the user's own file (or the
``--ssh-config`` flag) may name an ssh config file, relative to the user's config dir. The
project file may not redefine the built-in ``local`` host (its entry is ignored) nor any host of
the user's file (the user's wins), and a project entry for this machine that names a python,
venv or workdir (code the repo would make us run here) is used only when named with ``--host``
(``explicit``), and then announced with the file it comes from.

File format::

    hosts:
      gpu8:
        target: root@10.1.230.174     # or an alias from ~/.ssh/config
        port: 22
        identity_file: ~/.ssh/id_ed25519
        jump: bastion                 # ProxyJump
        workdir: /root/glmserve       # default ~/glmserve
        python: python3
        venv: /root/venv
        address: 10.1.230.174         # multi-node: how other nodes reach it (default: ssh's
                                      # HostName for target)
      cluster:
        kind: slurm                   # runs are Slurm jobs (see remote/slurm.py)
        login: user@login1            # where sbatch runs (absent: this machine); = target
        workdir: /shared/glmserve     # on the cluster's shared filesystem
        slurm: {partition: gpu, account: proj, qos: normal, gres: "gpu:8", time: "02:00:00",
                constraint: h100, sbatch_options: {mem: 0, exclusive: true}}
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from glmserve.config.yamlload import load_yaml, read_config_text
from glmserve.errors import ConfigError
from glmserve.paths import project_configs_dir, user_config_dir
from glmserve.remote.host_config import BUILT_IN, HOST_NAME_RE, LOCAL, HostConfig

# The ssh config named by the global ``--ssh-config`` flag: used for every ssh host of this
# invocation, in place of each host's ``ssh_config:`` (the user typed it, so it is trusted).
CLI_SSH_CONFIG: Path | None = None


def set_cli_ssh_config(value: str | None) -> None:
    """Check and remember ``--ssh-config``: ConfigError naming the flag if ssh cannot take it."""
    global CLI_SSH_CONFIG
    if value is None:
        CLI_SSH_CONFIG = None
        return
    path = Path(os.path.expanduser(value)).absolute()
    try:
        HostConfig._ssh_path(str(path))
    except ValueError as exc:
        raise ConfigError(f"--ssh-config: {exc}") from None
    if not _config_file(path):
        raise ConfigError(f"--ssh-config: {path} is not a file")
    CLI_SSH_CONFIG = path


def host_files() -> list[Path]:
    """The hosts files read, lowest precedence first."""
    return [project_configs_dir() / "hosts.yaml", user_hosts_file()]


def user_hosts_file() -> Path:
    """The user's own hosts.yaml: the only hosts file trusted to name an ssh config file."""
    return user_config_dir() / "hosts.yaml"


def _key_lines(root: yaml.Node | None) -> dict[str, int]:
    """Map ``host`` and ``host.key`` to their 1-based line in the YAML (for error messages)."""
    lines: dict[str, int] = {}
    if not isinstance(root, yaml.MappingNode):
        return lines
    for k, v in root.value:
        if k.value == "hosts" and isinstance(v, yaml.MappingNode):
            for hk, hv in v.value:
                lines[str(hk.value)] = hk.start_mark.line + 1
                if isinstance(hv, yaml.MappingNode):
                    for fk, _ in hv.value:
                        lines[f"{hk.value}.{fk.value}"] = fk.start_mark.line + 1
    return lines


@dataclass
class _Entry:
    """One host entry as read, checked only when that host is used: a typo in one entry must
    not block every other host (``stop``/``status`` of local runs included)."""

    name: str
    path: Path
    fields: dict[str, Any]
    lines: dict[str, int]
    trusted: bool
    problem: str | None = None  # a bad name or a non-mapping entry, reported when used
    bad_name: bool = False

    @property
    def line(self) -> int:
        return self.lines.get(self.name, 1)


def _read_file(path: Path, trusted: bool) -> list[_Entry]:
    """The entries of one hosts file; ConfigError only for what spoils the whole file."""
    if not path.exists() and not path.is_symlink():
        return []
    data, root = load_yaml(read_config_text(path, "hosts file"), str(path), "invalid YAML")
    if data is None:
        return []
    if not isinstance(data, dict) or not isinstance(data.get("hosts") or {}, dict):
        raise ConfigError(f"{path}:1: expected a mapping with a 'hosts:' mapping of name -> host")
    extra = set(data) - {"hosts"}
    if extra:
        raise ConfigError(f"{path}:1: unknown top-level key(s) {sorted(extra)}; expected 'hosts'")
    lines = _key_lines(root)
    out = []
    for name, entry in (data.get("hosts") or {}).items():
        e = _Entry(str(name), path, {}, lines, trusted)
        if not isinstance(name, str) or not HOST_NAME_RE.match(name):
            e.bad_name = True
            e.problem = (
                f"{path}:{e.line}: host name {name!r} must be letters, digits, '.', '_' or "
                "'-', starting with a letter or digit"
            )
        elif not isinstance(entry or {}, dict):
            e.problem = f"{path}:{e.line}: hosts.{name}: expected a mapping of fields"
        else:
            e.fields = _strs(entry or {})
        out.append(e)
    return out


_LOCAL_CODE_FIELDS = ("python", "venv", "workdir")


def _runs_local_code(e: _Entry) -> bool:
    """An untrusted entry for this machine (no ``target``) naming what runs here."""
    return (
        not e.trusted
        and e.fields.get("target") is None
        and any(e.fields.get(k) is not None for k in _LOCAL_CODE_FIELDS)
    )


def _build(e: _Entry) -> HostConfig:
    """Validate one entry into a HostConfig; ConfigError naming file:line and the key."""
    if e.problem:
        raise ConfigError(e.problem)
    fields = dict(e.fields)
    if fields.get("ssh_config") is not None:
        fields["ssh_config"] = _trusted_ssh_config(e, fields["ssh_config"])
    slurm = fields.get("slurm")
    if isinstance(slurm, dict) and slurm.get("clusters") is not None and not e.trusted:
        raise ConfigError(
            f"{e.path}:{e.lines.get(f'{e.name}.slurm', e.line)}: hosts.{e.name}.slurm.clusters: "
            f"only your own {user_hosts_file()} may send jobs to another cluster; {e.path} is a "
            "project file (e.g. a checked-out repo)"
        )
    try:
        host = HostConfig(
            name=e.name,
            source=f"{e.path}:{e.line}",
            project_local_code=_runs_local_code(e),
            **fields,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        kline = e.lines.get(f"{e.name}.{err['loc'][0]}", e.line) if err["loc"] else e.line
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{e.path}:{kline}: hosts.{e.name}.{key}: {msg}") from exc
    except TypeError as exc:  # e.g. a non-string key
        raise ConfigError(f"{e.path}:{e.line}: hosts.{e.name}: {exc}") from exc
    if CLI_SSH_CONFIG is not None and not host.is_local:
        host = host.model_copy(update={"ssh_config": str(CLI_SSH_CONFIG)})
    return host


def _trusted_ssh_config(e: _Entry, value: Any) -> Any:
    """``ssh_config:`` is a whole ssh config (ProxyCommand, Match exec, Include...), so only a
    trusted file may name one, and a relative path is relative to that file's directory
    (never the current directory, which may be a checked-out repo)."""
    where = f"{e.path}:{e.lines.get(f'{e.name}.ssh_config', e.line)}: hosts.{e.name}.ssh_config"
    if not e.trusted:
        raise ConfigError(
            f"{where}: only your own {user_hosts_file()} or --ssh-config may name an ssh "
            f"config file; {e.path} is a project file (e.g. a checked-out repo) and an ssh "
            "config can make ssh run commands"
        )
    try:
        HostConfig._ssh_path(value)
    except (TypeError, ValueError):
        return value  # reported by the model with its usual message
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        path = e.path.parent / path
    if not _config_file(path):
        raise ConfigError(f"{where}: {path} is not a file")
    return str(path)


def _config_file(path: Path) -> bool:
    """A file ssh can read as its config (``/dev/null``, "no config at all", included)."""
    return path.is_file() or str(path) == os.devnull


def _strs(entry: dict[Any, Any]) -> dict[str, Any]:
    return {str(k): v for k, v in entry.items()}


def _entries() -> dict[str, _Entry]:
    """Every entry by name, the user's file winning over the project's; the project file's
    ``local`` is ignored (it may not redefine this machine's built-in host)."""
    user = user_hosts_file()
    out: dict[str, _Entry] = {}
    for f in host_files():
        trusted = f == user
        out.update((e.name, e) for e in _read_file(f, trusted) if trusted or e.name != LOCAL)
    return out


def load_hosts() -> dict[str, HostConfig]:
    """All hosts, every entry checked: built-in ``local``, the project file, the user's."""
    hosts: dict[str, HostConfig] = {LOCAL: HostConfig(name=LOCAL, source=BUILT_IN)}
    for name, e in _entries().items():
        hosts[name] = _build(e)
    return hosts


_announced: set[str] = set()


def announce(host: HostConfig) -> None:
    """Say once per process, on stderr, that ``host`` runs what a project file names."""
    if not host.project_local_code or host.source in _announced:
        return
    _announced.add(host.source or "")
    what = ", ".join(
        f"{k} {getattr(host, k)}" for k in _LOCAL_CODE_FIELDS if k in host.model_fields_set
    )
    sys.stderr.write(f"note: host {host.name} comes from the project file {host.source} ({what})\n")


# One resolution per entry: ``get_host`` re-reads the (small) files on every call, so an edit
# is seen, but validates an entry into a HostConfig once per content (and --ssh-config): every
# caller in one command gets the same object, and ``transport_for`` the same transport.
_resolved: dict[tuple[str, ...], HostConfig] = {}


def _resolve(e: _Entry) -> HostConfig:
    """``_build(e)``, once per entry content."""
    key = (str(e.path), str(e.trusted), e.name, str(e.line), repr(e.fields), str(CLI_SSH_CONFIG))
    host = _resolved.get(key)
    if host is None:
        host = _resolved[key] = _build(e)
    return host


def as_host(host: HostConfig | str | None, *, explicit: bool = True) -> HostConfig:
    """``host`` as a HostConfig: one already resolved (a plan's, a recorded run's) is used as it
    is, never looked up again; a name (None: ``local``) is resolved by :func:`get_host`."""
    return host if isinstance(host, HostConfig) else get_host(host, explicit=explicit)


def get_host(name: str | None, *, explicit: bool = True, quiet: bool = False) -> HostConfig:
    """The host called ``name`` (default ``local``), checking only that entry; ConfigError
    listing known hosts if absent (or the bad name in a hosts file, which may be the one
    meant).

    ``explicit``: the user named it (``--host``/``--nodes``, a recorded run). Only then is
    a project entry that runs a local python/venv/workdir used (and announced, unless
    ``quiet``); a name from a profile's ``nodes:`` (``explicit=False``) is refused, naming the
    file."""
    name = name or LOCAL
    entries = _entries()
    if name in entries:
        host = _resolve(entries[name])
        if host.project_local_code and not explicit:
            raise ConfigError(
                f"{host.source}: host {name} comes from the project file and names a python, "
                f"venv or workdir on this machine; it is used only when you name it: "
                f"--host {name}"
            )
        if not quiet:
            announce(host)
        return host
    if name == LOCAL:
        return HostConfig(name=LOCAL, source=BUILT_IN)
    bad = [e.problem for e in entries.values() if e.bad_name and e.problem]
    if bad:
        raise ConfigError(bad[0])
    files = ", ".join(str(f) for f in host_files())
    known = sorted({LOCAL, *(n for n, e in entries.items() if not e.problem)})
    raise ConfigError(f"unknown host {name!r}; known hosts: {', '.join(known)} (from {files})")


# Compared between a run's recorded entry and today's: where it came from is not a difference.
_NOT_COMPARED = frozenset({"source", "project_local_code"})


def recorded_host(
    name: str, recorded: dict[str, Any] | None, run_id: str
) -> tuple[HostConfig, str | None]:
    """The host a run is on: the entry it was launched with (recorded in the run store, which
    is the user's own, so a project hosts.yaml edited since cannot redirect it), and a one-line
    note when today's hosts.yaml differs or lacks it (the recorded one is used all the same).
    A run recorded before glmserve kept the entry falls back to today's (said in the note)."""
    if recorded is None:
        today = get_host(name, quiet=True)
        if today.source == BUILT_IN:  # this machine, no entry then or now: nothing to differ
            return today, None
        return today, (
            f"run {run_id} was recorded before glmserve kept each run's host entry: using "
            f"today's hosts.yaml entry for {name} ({today.source})"
        )
    try:
        host = HostConfig.model_validate(recorded)
    except ValidationError as exc:
        why = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        return get_host(name, quiet=True), (
            f"run {run_id}: its recorded entry for host {name} is not readable ({why}): using "
            "today's hosts.yaml entry"
        )
    if CLI_SSH_CONFIG is not None and not host.is_local:  # the user typed it for this command
        host = host.model_copy(update={"ssh_config": str(CLI_SSH_CONFIG)})
    try:
        today = get_host(name, quiet=True)
    except ConfigError as exc:
        return host, (
            f"host {name} of run {run_id} has no usable hosts.yaml entry now ({exc}); "
            f"acting on the entry it was launched with ({host.source})"
        )
    changed = [
        k for k in HostConfig.model_fields
        if k not in _NOT_COMPARED and getattr(today, k) != getattr(host, k)
    ]  # fmt: skip
    if not changed:
        return host, None
    return host, (
        f"host {name}: hosts.yaml changed since run {run_id} was launched ({', '.join(changed)}); "
        f"acting on the entry it was launched with ({host.source})"
    )
