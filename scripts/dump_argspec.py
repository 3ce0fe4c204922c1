#!/usr/bin/env python3
"""Regenerate ``src/glmserve/argspecs/sglang-<V>.json`` from a real SGLang release.

Usage: ``python scripts/dump_argspec.py 0.5.9 [--out DIR] [--keep-venv]``

Makes a throwaway venv that sees the system site-packages (so the CPU torch already
installed there is used, and pip never pulls a CUDA torch), installs ``sglang==V`` and a
few light packages ``sglang.srt.server_args`` imports, all with ``--no-deps``, then runs
``glmserve.argspec.DUMP_SNIPPET`` (the same program the lifecycle code runs on GPU hosts)
with the venv's python. Modules that are still missing are stubbed by the snippet and
listed in the spec's ``stubbed_modules``; they only matter at import time.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from glmserve.argspec import DUMP_SNIPPET  # noqa: E402

# Imported by sglang.srt.server_args' import chain (found by trial on 0.5.8-0.5.23); each is
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


def _run(cmd: list[str]) -> None:
    print("+", shlex.join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def _pinned(py: str, package: str) -> str | None:
    """The exact version the installed sglang pins ``package`` to, if it pins one."""
    code = "\n".join(
        [
            "import importlib.metadata as m, re",
            "for req in m.requires('sglang') or []:",
            f"    hit = re.match(r'{package}\\s*==\\s*([\\w.]+)\\s*$', req)",
            "    if hit:",
            "        print(hit.group(1))",
            "        break",
        ]
    )
    proc = subprocess.run([py, "-c", code], capture_output=True, text=True, check=False)
    return proc.stdout.strip() or None


def dump(version: str, out_dir: Path, keep_venv: bool = False) -> Path:
    """Dump one release's spec into ``out_dir`` and return the written path."""
    tmp = Path(tempfile.mkdtemp(prefix=f"argspec-{version}-"))
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "install", "--quiet", "--no-deps"]
    _run([*pip, f"sglang=={version}", *LIGHT_PACKAGES])
    made_by = (
        f"scripts/dump_argspec.py {version}: venv --system-site-packages on python "
        f"{sys.version.split()[0]}; pip install --no-deps sglang=={version} "
        + " ".join(LIGHT_PACKAGES)
    )
    transformers = _pinned(py, "transformers")
    if transformers:
        # sglang registers its own configs with transformers at import time; another
        # transformers release may already own those names (0.5.12: 'qwen3_asr'), so use
        # the pinned one. transformers does not depend on torch: its deps are all light.
        _run([py, "-m", "pip", "install", "--quiet", f"transformers=={transformers}"])
        made_by += f"; pip install transformers=={transformers}"
    proc = subprocess.run(
        [py, "-c", DUMP_SNIPPET],
        capture_output=True,
        text=True,
        env={"GLMSERVE_ARGSPEC_MADE_BY": made_by, "PATH": "/usr/bin:/bin"},
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"dump failed for sglang {version} (venv kept at {tmp})")
    spec = json.loads(proc.stdout)
    if spec["sglang_version"] != version:
        raise SystemExit(f"venv has sglang {spec['sglang_version']}, wanted {version}")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"sglang-{version}.json"
    path.write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
    if not keep_venv:
        subprocess.run(["rm", "-rf", "--", str(tmp)], check=False)
    print(f"wrote {path} ({len(spec['actions'])} actions, stubbed {spec['stubbed_modules']})")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", nargs="+", help="sglang release(s), e.g. 0.5.9")
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "src" / "glmserve" / "argspecs",
        help="directory for sglang-<V>.json (default: the package data dir)",
    )
    parser.add_argument("--keep-venv", action="store_true", help="keep the throwaway venv")
    args = parser.parse_args()
    for version in args.version:
        dump(version, args.out, args.keep_venv)


if __name__ == "__main__":
    main()
