"""A/A noise on this machine: the same simulated config, a fresh server each time, N times.

For each setting (the simulator as it is, and with ``--sim-run-variation`` /
``--sim-step-jitter``), starts a fresh simulator N times and runs one ``glmserve bench``
(decode mode, one stream) against each; prints every run's decode tok/s, their median, the
spread (relative standard deviation, max/min - 1), the 95% bootstrap interval of the median
(``bench.stats``, as ``compare`` uses) and the widest pairwise "speedup" between two runs of
the same config, which is what ``compare`` would show for two single-run benches.

Usage: python benchmarks/aa_noise.py [--runs 10] [--sim-speed 5] [--output-len 64]
Output: benchmarks/results/aa_noise_<date>.txt (also printed)
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import statistics
import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.fixtures.simulator import launch_simulator  # noqa: E402

from glmserve.bench.stats import median_ci  # noqa: E402

SETTINGS = {
    "no variation": [],
    "run 4% + step 2%": ["--sim-run-variation", "0.04", "--sim-step-jitter", "0.02"],
}


def one_bench(url: str, output_len: int, num_prompts: int) -> float:
    from glmserve.cli import main

    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["bench", "--url", url, "--json", "--warmup", "1", "--output-len",
                   str(output_len), "--num-prompts", str(num_prompts)])  # fmt: skip
    if rc != 0:
        raise SystemExit(f"bench failed ({rc})")
    return float(json.loads(buf.getvalue())["decode_tok_s"])


def measure(extra: list[str], runs: int, speed: float, output_len: int, num_prompts: int,
            tmp: Path) -> list[float]:  # fmt: skip
    out = []
    for i in range(runs):
        sim = launch_simulator("--tp-size", "2", "--disable-cuda-graph", "--sim-speed", str(speed),
                               *extra, log_path=tmp / f"sim-{len(extra)}-{i}.log")  # fmt: skip
        try:
            out.append(one_bench(sim.url, output_len, num_prompts))
        finally:
            sim.stop()
    return out


def describe(name: str, vals: list[float]) -> list[str]:
    med = statistics.median(vals)
    rsd = statistics.stdev(vals) / statistics.mean(vals) if len(vals) > 1 else 0.0
    lo, hi = median_ci(vals) or (med, med)
    return [
        f"## {name}",
        "runs (decode tok/s): " + ", ".join(f"{v:.2f}" for v in vals),
        f"median {med:.2f}; relative SD {rsd:.2%}; max/min - 1 = {max(vals) / min(vals) - 1:.2%}",
        f"95% bootstrap interval of the median: {lo:.2f}..{hi:.2f} "
        f"({lo / med - 1:+.2%} .. {hi / med - 1:+.2%})",
        f"widest A/A 'speedup' between two single runs: {max(vals) / min(vals):.3f}x",
        "",
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--sim-speed", type=float, default=5.0)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--num-prompts", type=int, default=3)
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="aa_noise_")
    os.environ["GLMSERVE_HOME"] = home  # results of this script stay out of the user's store
    tmp = Path(home)
    lines = [
        f"# A/A noise, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"host {platform.node()}, {os.cpu_count()} CPUs (shared), python "
        f"{platform.python_version()}",
        f"{args.runs} fresh simulators per setting (TP2, graphs off, sim.speed={args.sim_speed}),"
        f" one decode bench each: {args.num_prompts} prompts x {args.output_len} tokens",
        "",
    ]
    for name, extra in SETTINGS.items():
        vals = measure(extra, args.runs, args.sim_speed, args.output_len, args.num_prompts, tmp)
        lines += describe(name, vals)
    text = "\n".join(lines)
    print(text)
    day = datetime.date.today().isoformat()
    (ROOT / "benchmarks" / "results" / f"aa_noise_{day}.txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
