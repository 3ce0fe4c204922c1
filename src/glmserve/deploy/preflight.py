"""``glmserve check``: everything that would stop a launch, found in one pass over the host.

Each check yields a :class:`CheckRow` (ok / warn / fail / skip). ``fail`` blocks a launch (the
CLI exits 2), except that an unreachable host ends the pass at once and exits 5. In simulate
mode the GPU and SGLang rows are informative only: the simulator needs neither.

A host group (``run_group_checks``) is checked node by node, concurrently, each node with its
own argv (``--node-rank i``) and its share of the GPUs (tp-size / nnodes); then across nodes:
SGLang must be the same version everywhere (ranks on different versions do not rendezvous, or
worse, mis-shard) and node 0 must have the dist-init port free (its TCP store binds it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from glmserve.argspec.releases import argspec_cache_path
from glmserve.config.flags import Flags
from glmserve.config.spec import MODEL_FLAGS, LaunchSpec
from glmserve.errors import ConfigError, FlagValidationError, GlmserveError, TransportError
from glmserve.remote.host_config import HostConfig
from glmserve.remote.transport import Transport, shell_path
from glmserve.store import RunStore

if TYPE_CHECKING:
    from glmserve.argspec.model import ArgSpec

MIN_LOG_DISK_MB = 200  # below: blocking
WARN_LOG_DISK_MB = 2048  # below: warning


@dataclass
class CheckRow:
    name: str
    status: str  # ok | warn | fail | skip
    detail: str
    node: int | None = None  # node rank in a host group; None: single host or all nodes
    host: str | None = None  # that node's host (a group check only)

    @property
    def blocking(self) -> bool:
        return self.status == "fail"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"check": self.name, "status": self.status, "detail": self.detail}
        if self.host is not None or self.node is not None:
            d.update(node=self.node, host=self.host)
        return d


def _py(spec: LaunchSpec, code: str) -> str:
    """Shell running ``code`` with the spec's python (its venv activated first)."""
    act = ""
    if spec.venv:
        v = shell_path(spec.venv)
        missing = _sq(f"no virtualenv at {spec.venv} (bin/activate missing)")
        act = (
            f"if [ ! -f {v}/bin/activate ]; then echo {missing} >&2; exit 1; fi; "
            f". {v}/bin/activate >/dev/null 2>&1 && "
        )
    # one word, as the rendered launch script has it (``exec 'python3' -u -m ...``)
    return f"{act}{shell_path(spec.python)} -c {_sq(code)}"


def _sq(s: str) -> str:
    import shlex

    return shlex.quote(s)


def check_python(t: Transport, spec: LaunchSpec) -> tuple[CheckRow, CheckRow, str | None]:
    """Rows for the python and the SGLang version; returns that version (None if absent)."""
    code = (
        "import sys, importlib.metadata as m\n"
        "print(sys.version.split()[0])\n"
        "try:\n    print(m.version('sglang'))\nexcept Exception:\n    print('-')\n"
    )
    res = t.run(_py(spec, code), timeout=60)
    where = f"{spec.python}" + (f" (venv {spec.venv})" if spec.venv else "")
    if not res.ok:
        row = CheckRow("python", "fail", f"{where}: {res.tail() or 'failed'}")
        return row, CheckRow("sglang", "skip", "no python"), None
    lines = res.stdout.split()
    pyver, sgl = [*lines, "?", "-"][:2]
    prow = CheckRow("python", "ok", f"{where}: Python {pyver}")
    simulate = spec.launcher == "simulator"
    if sgl == "-":
        status = "warn" if simulate else "fail"
        srow = CheckRow("sglang", status, "not installed" + (" (simulate: not needed)" * simulate))
        return prow, srow, None
    detail = f"sglang {sgl}"
    status = "ok"
    if spec.sglang_range:
        try:
            from packaging.specifiers import SpecifierSet

            if sgl not in SpecifierSet(spec.sglang_range):
                status, detail = "warn", f"{detail}, profile targets {spec.sglang_range}"
        except Exception:  # packaging absent or odd version: informative only
            detail += f" (profile targets {spec.sglang_range})"
    return prow, CheckRow("sglang", status, detail), sgl


def check_argspec(t: Transport, spec: LaunchSpec, version: str | None) -> CheckRow:
    """Dump the host's live argparse spec (cached by version) and validate the argv with it."""
    if version is None:
        return CheckRow("flags", "skip", "no SGLang on the host to validate against")
    try:
        from glmserve.argspec import emulator, host_dump, releases
    except ImportError:
        return CheckRow("flags", "skip", "glmserve.argspec not available")
    cache = argspec_cache_path(version)
    if not cache.exists():
        dump = host_dump.limited_dump_command(_py(spec, host_dump.dump_program_source()))
        res = t.run(dump, timeout=180)
        source = f"host {t.host.name}: argparse dump"
        if not res.ok and len(res.stdout) <= host_dump.MAX_DUMP_BYTES:  # else: too large
            return CheckRow("flags", "fail", f"dumping argparse spec failed: {res.tail()}")
        try:  # sitecustomize hooks or warnings may print before the JSON: skip them
            host_dump.argspec_from_dump(res.stdout, source)
        except GlmserveError as exc:
            return CheckRow("flags", "fail", str(exc))
        body = (
            res.stdout if res.stdout.startswith("{") else res.stdout[res.stdout.find("\n{") + 1 :]
        )
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.{id(t)}.tmp")
        tmp.write_text(body)  # nodes of a group check in parallel: never read half a file
        os.replace(tmp, cache)
    try:
        from glmserve.argspec.portable import port_spec, refusals

        live = releases.load_argspec(str(cache))
        spec, changes = port_spec(spec, live)  # spelled for the release the host runs
        refused = refusals(spec.argv, live)
        if refused:
            return CheckRow("flags", "fail", "; ".join(f.format() for f in refused))
        report = emulator.validate_argv(spec.argv, live, patches=spec.patches, strict=True)
    except GlmserveError as exc:
        return CheckRow("flags", "fail", str(exc))
    from glmserve.argspec.validation import patch_requirement_errors

    errors = [f.format() for f in report.errors] + patch_requirement_errors(spec, version)
    if errors:
        return CheckRow("flags", "fail", "; ".join(errors))
    warn = report.warnings
    detail = f"argv valid for sglang {version} (live argparse spec)"
    if changes:
        detail += "; spelled for it: " + ", ".join(f"{c.old} -> {' '.join(c.new)}" for c in changes)
    if warn:
        detail += f"; {len(warn)} warning(s): " + "; ".join(f.format() for f in warn)
    return CheckRow("flags", "warn" if warn else "ok", detail)


def check_simulated(t: Transport, spec: LaunchSpec) -> CheckRow:
    """Under ``--simulate`` the flags go to the simulator, which parses them itself: the
    host's simulator is asked to parse this argv without starting (``check_args``), so a
    bad ``--set sim.*`` or server value is a failed check (exit 2) before anything starts,
    not a BAD_ARGS crash after. A runtime patch's requirements still hold: the simulated
    workers refuse them at init exactly as the real patch does, so they fail here too."""
    from glmserve.argspec.validation import patch_requirement_errors

    # the version the simulator will report: its --sim-sglang-version (the last one, in
    # either form, as its argparse reads it), by default 0.5.9
    argv = [*spec.argv, *spec.sim_args]
    given = Flags.parse(argv).get("--sim-sglang-version")
    version = given if isinstance(given, str) else "0.5.9"
    errors = patch_requirement_errors(spec, version)
    if errors:
        return CheckRow("flags", "fail", "; ".join(errors))
    code = (
        "import json, sys\n"
        "try:\n    from glmserve.simulator import check_args\n"
        "except ImportError:\n    print('SKIP'); sys.exit(0)\n"
        f"sys.exit(check_args(json.loads({json.dumps(json.dumps(argv))})))"
    )
    res = t.run(_py(spec, code), timeout=120)
    text = res.stdout.strip()
    if res.ok and text.endswith("SKIP"):
        return CheckRow("flags", "skip", "the host's glmserve simulator cannot check flags")
    if not res.ok:
        why = text.splitlines()[-1] if text else res.tail()
        return CheckRow("flags", "fail", f"simulator refuses the argv: {why}")
    return CheckRow("flags", "ok", "argv accepted by the simulator (simulate)")


def check_gpus(t: Transport, spec: LaunchSpec, need: int | None = None) -> CheckRow:
    """GPUs on the host vs ``need`` (default tp-size; a group node needs tp-size / nnodes)."""
    need = spec.tp_size if need is None else need
    share = "" if need == spec.tp_size else f" (this node's share of tp-size {spec.tp_size})"
    res = t.run(
        "command -v nvidia-smi >/dev/null || { echo NO_NVIDIA_SMI; exit 0; }; "
        "nvidia-smi --query-gpu=index,name,compute_cap,memory.free,memory.total "
        "--format=csv,noheader,nounits",
        timeout=60,
    )
    simulate = spec.launcher == "simulator"
    soft = "warn" if simulate else "fail"
    if "NO_NVIDIA_SMI" in res.stdout:
        return CheckRow(
            "gpus", soft, "no GPU: nvidia-smi not found" + (" (simulate: not needed)" * simulate)
        )
    if not res.ok:
        return CheckRow("gpus", soft, f"nvidia-smi failed: {res.tail() or res.tail('stdout')}")
    gpus = [[c.strip() for c in ln.split(",")] for ln in res.stdout.strip().splitlines() if ln]
    if not gpus:
        return CheckRow("gpus", soft, "nvidia-smi lists no GPU")
    names = sorted({g[1] for g in gpus if len(g) > 1})
    caps = sorted({g[2] for g in gpus if len(g) > 2})
    free = [int(float(g[3])) for g in gpus if len(g) > 3 and g[3].replace(".", "").isdigit()]
    detail = (
        f"{len(gpus)}x {', '.join(names)} (sm {', '.join(caps)}), "
        f"free {min(free) if free else '?'}-{max(free) if free else '?'} MiB; "
        f"needs {need}{share}"
    )
    if len(gpus) < need:
        return CheckRow("gpus", soft, detail + f": fewer GPUs than {need}")
    return CheckRow("gpus", "ok", detail)


def check_port(
    t: Transport,
    host: HostConfig,
    spec: LaunchSpec,
    store: RunStore,
    port: int | None = None,
    name: str = "port",
) -> CheckRow:
    """``port`` (default the server's ``--port``) free on the host: no live run, no listener."""
    from glmserve.remote.address import run_probe_host
    from glmserve.remote.launch import find_alive_runs, port_in_use

    port = spec.port if port is None else port
    alive = find_alive_runs(store, t, host.name, port)
    if alive:
        return CheckRow(
            name,
            "fail",
            f"{port}: glmserve run {alive[0].run_id} is alive there (launch --replace)",
        )
    if port_in_use(t, port, run_probe_host({"argv": spec.argv})):  # where the server will bind
        return CheckRow(name, "fail", f"{port} is in use by another process")
    return CheckRow(name, "ok", f"{port} free")


def check_model(t: Transport, spec: LaunchSpec) -> CheckRow:
    model = spec.flags.get_any(MODEL_FLAGS)
    if not isinstance(model, str):
        return CheckRow("model", "warn", "no --model in the profile")
    if model.startswith(("/", "~", ".")):
        ok = t.run(f"test -e {shell_path(model)}").ok
        what = "present" if ok else "MISSING"
        return CheckRow("model", "ok" if ok else "warn", f"{model} {what}")
    repo_dir = "models--" + model.replace("/", "--")
    cmd = (
        'h="${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}"; '
        f'test -d "$h"/{shell_path(repo_dir)} && echo "$h"'
    )
    res = t.run(cmd)
    if res.ok:
        return CheckRow("model", "ok", f"{model} in HF cache {res.stdout.strip()}")
    return CheckRow("model", "warn", f"{model} not in the HF cache: the server would download it")


def check_disk(t: Transport, host: HostConfig) -> CheckRow:
    wd = host.resolved_workdir
    res = t.run(
        f'd={shell_path(wd)}; while [ ! -e "$d" ]; do d=$(dirname "$d"); done; '
        'df -Pk "$d" | tail -1'
    )
    parts = res.stdout.split()
    if not res.ok or len(parts) < 4 or not parts[3].isdigit():
        return CheckRow("disk", "warn", f"could not read free space of {wd}: {res.tail()}")
    mb = int(parts[3]) // 1024
    status = "fail" if mb < MIN_LOG_DISK_MB else "warn" if mb < WARN_LOG_DISK_MB else "ok"
    return CheckRow("disk", status, f"{mb} MiB free for logs under {wd}")


def run_checks(
    host: HostConfig, spec: LaunchSpec, t: Transport, gpus_needed: int | None = None
) -> list[CheckRow]:
    """All rows, in order. Raises TransportError (exit 5) when the host cannot be reached."""
    import time

    t0 = time.perf_counter()
    res = t.run("true", timeout=60)  # TransportError with ssh's own line if unreachable
    if not res.ok:
        raise TransportError(f"host {host.name}: `true` failed: {res.tail()}")
    how = "local" if host.is_local else f"ssh {host.target}"
    rows = [CheckRow("reachable", "ok", f"{how} ({(time.perf_counter() - t0) * 1000:.0f} ms)")]
    prow, srow, version = check_python(t, spec)
    rows += [prow, srow]
    if spec.launcher == "simulator":
        rows.append(check_simulated(t, spec))
    else:
        rows.append(check_argspec(t, spec, version))
    rows.append(check_gpus(t, spec, gpus_needed))
    with RunStore.open() as store:
        rows.append(check_port(t, host, spec, store))
    rows.append(check_model(t, spec))
    rows.append(check_disk(t, host))
    return rows


# -- host groups -------------------------------------------------------------------------------
@dataclass
class GroupCheck:
    """A host group's preflight: every row carries its node; ``unreachable`` names the nodes
    ssh could not reach (their other rows are absent), which the CLI turns into exit 5."""

    rows: list[CheckRow]
    unreachable: list[str]

    @property
    def blocking(self) -> list[CheckRow]:
        return [r for r in self.rows if r.blocking]


def _node_rows(rank: int, host: HostConfig, spec: LaunchSpec, nnodes: int) -> list[CheckRow]:
    """One node's rows (its own argv, its GPU share); unreachable: one ``reachable`` fail row."""
    from glmserve.remote.transport import transport_for

    try:
        rows = run_checks(host, spec, transport_for(host), spec.tp_size // nnodes)
    except TransportError as exc:
        rows = [CheckRow("reachable", "fail", str(exc))]
    for r in rows:
        r.node, r.host = rank, host.name
    return rows


def sglang_versions(rows: list[CheckRow]) -> dict[str, list[str]]:
    """SGLang version -> hosts, from the ``sglang`` rows of a group check (pure)."""
    out: dict[str, list[str]] = {}
    for r in rows:
        if r.name == "sglang" and r.detail.startswith("sglang ") and r.host:
            out.setdefault(r.detail.split()[1].rstrip(","), []).append(r.host)
    return out


def version_row(
    rows: list[CheckRow], simulate: bool, unchecked: tuple[str, ...] | list[str] = ()
) -> CheckRow:
    """Across nodes: one SGLang version everywhere, else a blocking row naming each node's.
    ``unchecked``: nodes that could not be asked (unreachable)."""
    versions = sglang_versions(rows)
    missing = [r.host or "?" for r in rows if r.name == "sglang" and r.host and r.status != "ok"]
    missing = [h for h in missing if not any(h in hs for hs in versions.values())]
    if len(versions) > 1:
        each = "; ".join(f"{v} on {', '.join(hs)}" for v, hs in sorted(versions.items()))
        status = "warn" if simulate else "fail"
        return CheckRow("same sglang", status, f"nodes run different SGLang versions: {each}")
    if versions and missing and not simulate:
        v = next(iter(versions))
        return CheckRow(
            "same sglang",
            "fail",
            f"sglang {v} on {', '.join(versions[v])}, none on {', '.join(missing)}",
        )
    if versions and unchecked:
        v = next(iter(versions))
        return CheckRow(
            "same sglang",
            "skip",
            f"sglang {v} on {', '.join(versions[v])}; not checked on {', '.join(unchecked)}",
        )
    if versions:
        v = next(iter(versions))
        return CheckRow("same sglang", "ok", f"sglang {v} on every node")
    return CheckRow("same sglang", "skip", "no node has SGLang")


def run_group_checks(hosts: list[HostConfig], specs: list[LaunchSpec]) -> GroupCheck:
    """Every node checked at once (a thread each: ssh round trips dominate), then the checks
    across nodes. ``specs[i]`` is node i's own spec (from ``plan.node_specs``)."""
    n = len(hosts)
    with ThreadPoolExecutor(max_workers=min(n, 8)) as pool:
        per_node = list(pool.map(lambda i: _node_rows(i, hosts[i], specs[i], n), range(n)))
    rows = [r for node in per_node for r in node]
    unreachable = [
        hosts[i].name
        for i, node in enumerate(per_node)
        if node[0].name == "reachable" and node[0].status == "fail" and len(node) == 1
    ]
    simulate = specs[0].launcher == "simulator"
    rows.append(version_row(rows, simulate, unreachable))
    dist = str(specs[0].extra.get("dist_init_addr") or "")
    port_s = dist.rsplit(":", 1)[-1]
    if hosts[0].name not in unreachable and port_s.isdigit():
        from glmserve.remote.transport import transport_for

        with RunStore.open() as store:
            row = check_port(
                transport_for(hosts[0]), hosts[0], specs[0], store, int(port_s), "dist-init port"
            )
        row.detail += f" (--dist-init-addr {dist}: node 0's rendezvous)"
        row.node, row.host = 0, hosts[0].name
        rows.append(row)
    return GroupCheck(rows, unreachable)


# -- the host's release ----------------------------------------------------------------------
def host_argspec(version: str) -> ArgSpec | None:
    """The argparse spec of ``version`` as a host runs it: shipped, else the live spec
    ``glmserve check`` cached for it; None when glmserve has neither."""
    from glmserve.argspec.releases import load_argspec, load_release_spec

    try:
        return load_release_spec(version)
    except ConfigError:
        pass
    cache = argspec_cache_path(version)
    return load_argspec(str(cache)) if cache.is_file() else None


def port_for_host(
    spec: LaunchSpec, transport: Any, say: Callable[[str], None] = lambda _m: None
) -> LaunchSpec:
    """``spec`` spelled for the SGLang release installed where it will run (one command on
    the host reads it), so a launch serves the release the user actually has. The
    simulator, or a host without SGLang, gets the flags as written. FlagValidationError
    when that release dropped a choice the profile uses."""
    if spec.launcher != "sglang":
        return spec
    _prow, _srow, version = check_python(transport, spec)
    if version is None:
        return spec
    argspec = host_argspec(version)
    if argspec is None:
        say(
            f"sglang {version} on the host has no shipped or cached argspec: flags launched as "
            "written (glmserve check caches the host's spec)"
        )
        return spec
    from glmserve.argspec.portable import port_spec, refusals

    ported, changes = port_spec(spec, argspec)
    refused = refusals(ported.argv, argspec)
    if refused:
        from glmserve.argspec.validation import format_finding

        raise FlagValidationError(
            f"sglang {version} on the host: "
            + "; ".join(format_finding(ported, f) for f in refused),
            findings=refused,
        )
    for change in changes:
        say(f"sglang {version} on the host: {change.format()}")
    return ported
