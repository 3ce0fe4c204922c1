#!/usr/bin/env python3
"""Regenerate glmserve's shipped SGLang argspecs (``src/glmserve/argspec/data/``) from releases.

Usage:
  ``python scripts/dump_argspec.py 0.5.9 0.5.11.post1 [--out DIR] [--jobs 2]``
  ``python scripts/dump_argspec.py --all [--since 0.4.0] [--until 0.5.23]``

``--all`` asks ``pip index versions sglang`` for every release in the range (post releases
included). Each worker makes one throwaway venv that sees the system site-packages (so the
CPU torch already installed there is used and pip never pulls a CUDA torch) and, per
release, installs ``sglang==V`` plus a few light packages ``sglang.srt.server_args`` imports,
all with ``--no-deps`` (plus the transformers release sglang pins, which is light), then runs
``glmserve/argspec/dump_program.py`` (the same program ``glmserve check`` runs on GPU hosts)
with the venv's python. Modules that are still missing are stubbed by it and listed
in the spec's ``stubbed_modules``; they only matter at import time.

Each distinct spec is stored once, gzip-compressed and named by its content hash, and
``index.json`` maps every release to its spec (see ``glmserve.argspec.releases.store_spec``); the
releases a run could not dump are recorded in the index with the reason.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from glmserve.argspec.host_dump import dump_command  # noqa: E402
from glmserve.argspec.releases import (  # noqa: E402
    normalize_version,
    prune_unreferenced_specs,
    read_index,
    record_failure,
    store_spec,
    version_key,
)

# Imported by sglang.srt.server_args' import chain (found by trial on 0.4.0-0.5.23); each is
# small and installed with --no-deps so none of them can drag in CUDA wheels.
LIGHT_PACKAGES = [
    "psutil",
    "pyzmq",
    "starlette",
    "openai",
    "partial_json_parser",
    "dill",
    "msgspec",
]


class DumpFailed(Exception):
    """One release could not be dumped; the text says why (kept in the index)."""


def _run(cmd: list[str]) -> None:
    print("+", shlex.join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        raise DumpFailed(f"{shlex.join(cmd[-2:])} failed: {tail[0][:300]}")


def _pinned(py: str, package: str) -> str | None:
    """The exact version the installed sglang pins ``package`` to (in any extra), if any."""
    code = "\n".join(
        [
            "import importlib.metadata as m, re",
            "for req in m.requires('sglang') or []:",
            f"    hit = re.match(r'{package}\\s*==\\s*([\\w.]+)\\s*(;.*)?$', req)",
            "    if hit:",
            "        print(hit.group(1))",
            "        break",
        ]
    )
    proc = subprocess.run([py, "-c", code], capture_output=True, text=True, check=False)
    return proc.stdout.strip() or None


def _installed(py: str, package: str) -> str | None:
    code = "\n".join(
        [
            "import importlib.metadata as m",
            f"try: print(m.version({package!r}))",
            "except Exception: pass",
        ]
    )
    proc = subprocess.run([py, "-c", code], capture_output=True, text=True, check=False)
    return proc.stdout.strip() or None


class Worker:
    """One reusable venv: releases are swapped in with ``pip install --no-deps sglang==V``."""

    def __init__(self, keep_venv: bool) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="argspec-"))
        self.keep_venv = keep_venv
        venv = self.tmp / "venv"
        _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
        self.py = str(venv / "bin" / "python")
        _run([self.py, "-m", "pip", "install", "--quiet", "--no-deps", *LIGHT_PACKAGES])

    def dump(self, version: str) -> dict:
        """The spec dict of one release (DumpFailed with a one-line reason)."""
        pip = [self.py, "-m", "pip", "install", "--quiet", "--no-deps"]
        _run([*pip, f"sglang=={version}"])
        made_by = (
            f"scripts/dump_argspec.py {version}: venv --system-site-packages on python "
            f"{sys.version.split()[0]}; pip install --no-deps sglang=={version} "
            + " ".join(LIGHT_PACKAGES)
        )
        transformers = _pinned(self.py, "transformers")
        if transformers:
            # sglang registers its own configs with transformers at import time; another
            # transformers release may already own those names (0.5.12: 'qwen3_asr'), so use
            # the pinned one. transformers does not depend on torch: its deps are all light.
            if _installed(self.py, "transformers") != transformers:
                _run([self.py, "-m", "pip", "install", "--quiet", f"transformers=={transformers}"])
            made_by += f"; pip install transformers=={transformers}"
        proc = subprocess.run(
            dump_command(self.py),
            capture_output=True,
            text=True,
            env={"GLMSERVE_ARGSPEC_MADE_BY": made_by, "PATH": "/usr/bin:/bin"},
            check=False,
        )
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            raise DumpFailed(f"dump program failed: {(lines or ['?'])[-1][:300]}")
        spec = json.loads(proc.stdout)
        if spec["sglang_version"] != version:
            raise DumpFailed(f"venv has sglang {spec['sglang_version']}, wanted {version}")
        return spec

    def close(self) -> None:
        if not self.keep_venv:
            subprocess.run(["rm", "-rf", "--", str(self.tmp)], check=False)


def pypi_versions(since: str, until: str) -> list[str]:
    """Every sglang release PyPI lists with since <= release <= until, oldest first."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang"],
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r"Available versions:\s*(.+)", proc.stdout)
    if not match:
        raise SystemExit("pip index versions sglang: no 'Available versions' line")
    found = [v.strip() for v in match.group(1).split(",") if v.strip()]
    low, high = version_key(since), version_key(until)
    # ``until`` 0.5.23 includes 0.5.23.postN: compare on the release part for the upper end.
    return sorted(
        (v for v in found if low <= version_key(v) and version_key(v)[:3] <= high[:3]),
        key=version_key,
    )


def dump_all(versions: list[str], out_dir: Path, jobs: int, keep_venv: bool) -> int:
    """Dump ``versions`` with ``jobs`` workers, storing each as it arrives; returns failures."""
    lock = threading.Lock()
    failures = 0
    local = threading.local()
    workers: list[Worker] = []

    def one(version: str) -> None:
        nonlocal failures
        if not hasattr(local, "worker"):
            local.worker = Worker(keep_venv)
            with lock:
                workers.append(local.worker)
        try:
            spec = local.worker.dump(version)
        except (DumpFailed, json.JSONDecodeError, KeyError) as exc:
            with lock:
                failures += 1
                record_failure(out_dir, version, str(exc))
            print(f"FAILED {version}: {exc}", flush=True)
            return
        with lock:
            digest = store_spec(spec, out_dir)
        print(
            f"stored {version} -> {digest} ({len(spec['actions'])} actions, "
            f"stubbed {spec['stubbed_modules']})",
            flush=True,
        )

    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            list(pool.map(one, versions))
    finally:
        for worker in workers:
            worker.close()
    prune_unreferenced_specs(out_dir)
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", nargs="*", help="sglang release(s), e.g. 0.5.9 0.5.10.post1")
    parser.add_argument("--all", action="store_true", help="every PyPI release in the range")
    parser.add_argument("--since", default="0.4.0", help="--all: oldest release (0.4.0)")
    parser.add_argument("--until", default="0.5.23", help="--all: newest release (0.5.23)")
    parser.add_argument("--missing", action="store_true", help="--all: skip releases indexed")
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "src" / "glmserve" / "argspec" / "data",
        help="directory holding index.json and specs/ (default: the package data dir)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="parallel venvs (2 at most here)")
    parser.add_argument("--keep-venv", action="store_true", help="keep the throwaway venvs")
    args = parser.parse_args()
    versions = [normalize_version(v) or v for v in args.version]  # v0.5.9 -> 0.5.9
    if args.all:
        versions += pypi_versions(args.since, args.until)
    if args.missing:
        indexed = set(read_index(args.out).get("versions", {}))
        versions = [v for v in versions if v not in indexed]
    if not versions:
        parser.error("name releases or pass --all")
    failures = dump_all(sorted(set(versions), key=version_key), args.out, args.jobs, args.keep_venv)
    print(f"{len(versions) - failures} stored, {failures} failed; index: {args.out / 'index.json'}")
    if failures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
