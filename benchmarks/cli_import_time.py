"""Wall time of ``glmserve --help`` (start-up + imports) for this tree against a baseline
revision, measured in the same run, interleaved, so machine noise hits both alike.

Why: every verb pays the CLI's import time before it does anything, and ``--help`` is what a
new user runs first. Issue 12's redesign must not make it slower.

    python3 benchmarks/cli_import_time.py [--baseline REV] [--runs N]

Prints each side's median and min over N runs, then the ratio tree / baseline (< 1: faster).
The baseline is checked out with ``git worktree`` into a temporary folder and run from its
``src/`` through PYTHONPATH, the same way as the tree, so only the code differs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = "import sys; from glmserve.cli import main; sys.exit(main(['--help']))"


def one_run(src: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(src), COLUMNS="100")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", PROGRAM], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="d7843f3", help="git revision to compare against")
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(base), args.baseline],
            check=True,
        )
        try:
            sides = {"baseline": base / "src", "tree": ROOT / "src"}
            for src in sides.values():  # warm the page cache and write .pyc files first
                one_run(src)
            times: dict[str, list[float]] = {k: [] for k in sides}
            for _ in range(args.runs):
                for name, src in sides.items():
                    times[name].append(one_run(src))
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=True
            )
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"glmserve --help, {args.runs} runs each, interleaved; python {sys.version.split()[0]}")
    for name in sides:
        rev = args.baseline if name == "baseline" else "working tree"
        print(
            f"  {name:<8} ({rev}): median {med[name] * 1000:7.1f} ms"
            f"  min {min(times[name]) * 1000:7.1f} ms"
        )
    print(f"  ratio tree/baseline (median): {med['tree'] / med['baseline']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
