"""How many concurrent streams can the bench client measure correctly on this machine?

For each concurrency level, against one simulator started here, in the same run:

* ``glmserve`` (``glmserve.bench.runner``): aggregate output tok/s over its steady window,
  divided by the ground truth = tokens the simulator wrote to its sockets in that same window
  (``/sim/trace`` emission times; same perf_counter clock).
* SGLang's own ``python -m sglang.bench_serving --backend sglang --dataset-name random-ids``:
  its "Output token throughput" (total output tokens / its duration) divided by the ground
  truth with the same definition = its requests' tokens / (last emission - first arrival).

The same window for both (issue 14 #6): glmserve's full-window figure (``output_tok_s_full``:
its completed requests' tokens / first send to last stream end, bench_serving's definition)
is checked against the same truth definition as bench_serving's, so the two clients are judged
on identical windows; glmserve's steady-window figure is printed beside it.

Client CPU per 1,000 output tokens: user+system CPU seconds of the client (glmserve: this
process and its forked workers around the level, ``getrusage``; bench_serving: its process,
less the CPU of a 1-request run, i.e. its imports and start-up, measured once) per 1,000
output tokens the level produced.

A client "holds" a level when its full-window figure is within ``--tolerance`` (2%) of the
truth. Printed: one row per level, then the highest level each client holds and their ratio
(target: glmserve holds at least 2x bench_serving's concurrency).

bench_serving needs ``transformers`` and a tokenizer: a tiny WordLevel tokenizer is built here
with ``tokenizers`` (offline). Its top-level ``from datasets import load_dataset`` is satisfied
by a stub module on PYTHONPATH when ``datasets`` is not installed (random-ids never calls it).

Usage: python benchmarks/bench_client_capacity.py [--levels 64,128,256,512,1024] [--sim-speed 10]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

from glmserve.bench import groundtruth as gt
from glmserve.bench.metrics import aggregate_tok_s, level_metrics
from glmserve.bench.runner import BenchSettings, LevelRun, Progress, prepare_requests, run_level

VOCAB = 32000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_simulator(port: int, speed: float, log: Path) -> subprocess.Popen:
    argv = [sys.executable, "-u", "-m", "glmserve.simulator", "--model-path", "glm-5-sim",
            "--port", str(port), "--tp-size", "8", "--attention-backend", "trtllm_mla",
            "--sim-gpu-arch", "sm100", "--max-running-requests", "4096",
            "--sim-speed", str(speed)]  # fmt: skip
    out = open(log, "wb")  # noqa: SIM115 (the child owns it)
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    out.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"simulator exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("simulator not ready within 60 s")


def stop(proc: subprocess.Popen) -> None:
    """SIGKILL the simulator's own process group (recorded: it leads its session)."""
    if proc.poll() is None and os.getpgid(proc.pid) == proc.pid:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def build_tokenizer(dest: Path) -> None:
    """A WordLevel tokenizer of VOCAB words, saved as a transformers-loadable directory."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    dest.mkdir(parents=True, exist_ok=True)
    tok.save(str(dest / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}
    (dest / "tokenizer_config.json").write_text(json.dumps(config))


def trace(url: str) -> dict:
    return httpx.get(url + "/sim/trace", timeout=120).json()


def cpu_s(who: int) -> float:
    """User + system CPU seconds of ``resource.RUSAGE_SELF`` or ``RUSAGE_CHILDREN``."""
    ru = resource.getrusage(who)
    return ru.ru_utime + ru.ru_stime


def truth_full(tr: dict, since: float) -> tuple[float | None, int]:
    """Tokens of the requests that arrived after ``since`` / (first arrival - last emission):
    bench_serving's full-window definition, applied to what the server did."""
    reqs = [r for r in tr["requests"].values() if r["arrival"] >= since and r["emit_times"]]
    if not reqs:
        return None, 0
    first = min(r["arrival"] for r in reqs)
    last = max(r["emit_times"][-1] for r in reqs)
    tokens = sum(r["completion_tokens"] for r in reqs)
    return tokens / (last - first), tokens


def run_glmserve(url: str, c: int, n: int, in_len: int, out_len: int) -> dict:
    s = BenchSettings(url, mode="concurrency", concurrency=[c], input_len=in_len,
                      output_len=out_len, num_prompts=n, warmup=0)  # fmt: skip
    run = LevelRun(c, s.workers_for(c))
    requests = prepare_requests(s, "glm-5-sim")
    since = time.perf_counter()
    cpu0 = cpu_s(resource.RUSAGE_SELF) + cpu_s(resource.RUSAGE_CHILDREN)
    run_level(s, c, requests, Progress(), run)
    cpu = cpu_s(resource.RUSAGE_SELF) + cpu_s(resource.RUSAGE_CHILDREN) - cpu0
    lm = level_metrics(run.records, c)
    tok_s, win = aggregate_tok_s(run.records, c)
    tr = trace(url)
    full, tokens = truth_full(tr, since)
    return {
        "tok_s": lm.output_tok_s_full,
        "truth": full,
        "steady": tok_s,
        "steady_truth": gt.truth_tok_s(tr, win.start, win.end),
        "errors": lm.errors,
        "workers": run.workers,
        "batch": gt.mean_decode_batch(tr, win.start, win.end),
        "queue_p50_ms": lm.queue_ms["p50"],
        "cpu_per_1k": 1000 * cpu / tokens if tokens else None,
    }


def bench_serving_cmd(url: str, c: int, n: int, in_len: int, out_len: int, tok_dir: Path,
                      out_file: Path) -> list[str]:  # fmt: skip
    return [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url",
            url, "--dataset-name", "random-ids", "--random-input-len", str(in_len),
            "--random-output-len", str(out_len), "--random-range-ratio", "1",
            "--num-prompts", str(n), "--max-concurrency", str(c), "--tokenizer", str(tok_dir),
            "--model", "glm-5-sim", "--tokenize-prompt", "--disable-tqdm", "--warmup-requests",
            "1", "--output-file", str(out_file)]  # fmt: skip


def _bs_env(stub_dir: Path | None) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if stub_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(stub_dir), env.get("PYTHONPATH")]))
    return env


def bench_serving_start_cpu(url: str, tok_dir: Path, stub_dir: Path | None) -> float:
    """CPU seconds of a 1-request bench_serving run: its imports and start-up, subtracted
    from every level so that the per-token figure is the measuring loop's own cost."""
    out_file = tok_dir.parent / "bs_start.jsonl"
    cmd = bench_serving_cmd(url, 1, 1, 8, 1, tok_dir, out_file)
    cpu0 = cpu_s(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, capture_output=True, text=True, env=_bs_env(stub_dir), timeout=600)
    return cpu_s(resource.RUSAGE_CHILDREN) - cpu0


def run_bench_serving(
    url: str, c: int, n: int, in_len: int, out_len: int, tok_dir: Path, stub_dir: Path | None,
    start_cpu: float = 0.0,
) -> dict:  # fmt: skip
    out_file = tok_dir.parent / f"bs_{c}.jsonl"
    cmd = bench_serving_cmd(url, c, n, in_len, out_len, tok_dir, out_file)
    cpu0 = cpu_s(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_bs_env(stub_dir), timeout=1800)
    cpu = cpu_s(resource.RUSAGE_CHILDREN) - cpu0 - start_cpu
    if proc.returncode != 0:
        raise SystemExit(f"bench_serving failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in out_file.read_text().splitlines() if line.strip()]
    res = rows[-1]
    tr = trace(url)
    reqs = sorted(tr["requests"].values(), key=lambda r: r["arrival"])[-n:]  # its main run
    first = min(r["arrival"] for r in reqs)
    last = max(r["emit_times"][-1] for r in reqs if r["emit_times"])
    tokens = sum(r["completion_tokens"] for r in reqs)
    return {
        "tok_s": float(res["output_throughput"]),
        "truth": tokens / (last - first),
        "errors": n - int(res.get("completed", n)),
        "batch": gt.mean_decode_batch(tr, first, last),
        "cpu_per_1k": 1000 * cpu / tokens if tokens else None,
    }


def _cols() -> str:
    return f"{'truth':>9} {'ratio':>7} {'ok':>3} {'batch':>6} {'cpu/1k':>7}"


def _row(r: dict, tol: float) -> str:
    ratio = (r["tok_s"] or 0) / (r["truth"] or 1)
    ok = "yes" if holds(r, tol) else "NO"
    cpu = r.get("cpu_per_1k")
    return (
        f"{r['truth'] or 0:>9,.1f} {ratio:>7.4f} {ok:>3} {r['batch'] or 0:>6.1f} "
        f"{'-' if cpu is None else f'{cpu:.3f}':>7}"
    )


def holds(r: dict, tol: float) -> bool:
    return bool(
        r["tok_s"] and r["truth"] and abs(r["tok_s"] / r["truth"] - 1) <= tol and not r["errors"]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="64,128,256,512,1024,2048")
    ap.add_argument("--sim-speed", type=float, default=10.0)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--waves", type=int, default=2, help="requests per level = waves x level")
    ap.add_argument("--tolerance", type=float, default=0.02)
    ap.add_argument("--skip-bench-serving", action="store_true")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]

    print(f"date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}")
    print(f"machine: nproc={os.cpu_count()} {platform.uname().system} {platform.uname().release} "
          f"{platform.uname().machine} python {platform.python_version()}")  # fmt: skip
    uname = subprocess.run(["uname", "-a"], capture_output=True, text=True, check=False).stdout
    print(f"uname -a: {uname.strip()}")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"command: {' '.join([sys.executable, *sys.argv])}")
    print(
        f"simulator: TP8 trtllm_mla sm100, --sim-speed {args.sim_speed}; input {args.input_len},"
        f" output {args.output_len} tokens, {args.waves} waves per level"
    )
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        tok_dir = tmp / "tokenizer"
        stub_dir: Path | None = None
        if not args.skip_bench_serving:
            build_tokenizer(tok_dir)
            try:
                import datasets  # noqa: F401
            except ImportError:
                stub_dir = tmp / "stub"
                stub_dir.mkdir()
                (stub_dir / "datasets.py").write_text(
                    "def load_dataset(*a, **k):\n    raise RuntimeError('datasets stubbed')\n"
                )
        port = free_port()
        sim = start_simulator(port, args.sim_speed, tmp / "sim.log")
        url = f"http://127.0.0.1:{port}"
        try:
            rows = []
            start_cpu = 0.0
            if not args.skip_bench_serving:
                start_cpu = bench_serving_start_cpu(url, tok_dir, stub_dir)
                print(f"bench_serving start-up CPU (1-request run, subtracted): {start_cpu:.2f} s")
            hdr = (
                f"{'conc':>6} | {'glmserve tok/s':>14} "
                + _cols()
                + f" {'steady':>7}"
                + " | "
                + (f"{'bench_serving':>13} " + _cols())
            )
            print(hdr)
            print("-" * len(hdr))
            for c in levels:
                n = args.waves * c
                g = run_glmserve(url, c, n, args.input_len, args.output_len)
                b = None
                if not args.skip_bench_serving:
                    b = run_bench_serving(
                        url, c, n, args.input_len, args.output_len, tok_dir, stub_dir, start_cpu
                    )
                rows.append((c, g, b))
                steady = (g["steady"] or 0) / (g["steady_truth"] or 1)
                gline = (
                    f"{c:>6} | {g['tok_s'] or 0:>14,.1f} "
                    + _row(g, args.tolerance)
                    + f" {steady:>7.4f}"
                )
                if b is not None:
                    gline += f" | {b['tok_s']:>13,.1f} " + _row(b, args.tolerance)
                print(gline, flush=True)
        finally:
            stop(sim)

    def highest(idx: int) -> int:
        best = 0
        for row in rows:
            r = row[idx]
            if r is None or not holds(r, args.tolerance):
                break
            best = row[0]
        return best

    g_best = highest(1)
    print(
        f"glmserve holds up to concurrency {g_best} (within {args.tolerance:.0%} of ground truth)"
    )
    if not args.skip_bench_serving:
        b_best = highest(2)
        print(f"bench_serving holds up to concurrency {b_best}")
        for name, idx in (("glmserve", 1), ("bench_serving", 2)):
            cpus = [row[idx]["cpu_per_1k"] for row in rows if row[idx] and row[idx]["cpu_per_1k"]]
            if cpus:
                print(f"{name} client CPU per 1,000 output tokens: "
                      f"{min(cpus):.3f}-{max(cpus):.3f} s")  # fmt: skip
        if b_best:
            print(
                f"ratio glmserve / bench_serving concurrency: {g_best / b_best:.2f}x (target >= 2x)"
            )
        else:
            print("bench_serving held no level; ratio undefined")


if __name__ == "__main__":
    main()
