"""Big logs: wall time and peak RSS of ``glmserve diagnose`` and ``glmserve logs -n`` (issue 11 #9).

Writes a deterministic SGLang serving log of ``--mb`` MB (default 200): a real-shaped start-up
(server_args, load, KV cache, graph capture, "ready to roll"), then "Decode batch"/"Prefill
batch"/access-log lines in the 0.5.9 format, and an OOM crash of TP3 at the very end, so the
verdict needs the whole file (CRASHED/OOM at the last lines). Then runs, each as its own
``glmserve`` process (peak RSS: the process's own ``VmHWM`` from /proc at exit; ``ru_maxrss``
would also count the parent's pages at fork/exec):

* ``diagnose FILE``             the log as a file (target: < 10 s on the 2-core box)
* ``diagnose - < FILE``         the same log on stdin
* ``diagnose REQUESTS``         the same start-up, then per-request lines each carrying a unique
                                32-hex request id (every line a new shape: the worst case for the
                                line-shape cache), ending in the same crash
* ``diagnose RANDOM``           ``--mb`` MB of random bytes (must refuse it: exit 6)
* ``logs RUN -n 5``             the log's tail through a run recorded in a throwaway store
                                (``GLMSERVE_HOME`` in a temp dir, host ``local``)

``--src DIR`` runs another checkout's ``src`` (e.g. the code before a change, from ``git
archive``) with the same interpreter, for a before/after on one machine.

    python benchmarks/large_log.py [--mb 200] [--src DIR] [--skip-random]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAD = """\
[2026-03-02 10:00:00] server_args=ServerArgs(model_path='zai-org/GLM-5-FP8', tp_size=8, \
port=30000, mem_fraction_static=0.88, max_running_requests=64, cuda_graph_max_bs=64, \
chunked_prefill_size=8192)
[2026-03-02 10:00:05 TP0] Init torch distributed begin.
[2026-03-02 10:00:09 TP0] Load weight begin. avail mem=138.12 GB
[2026-03-02 10:08:09 TP0] Load weight end. type=GlmMoeDsaForCausalLM, dtype=torch.bfloat16, \
avail mem=51.02 GB, mem usage=87.10 GB.
[2026-03-02 10:08:12 TP0] KV Cache is allocated. #tokens: 1204224, KV size: 38.11 GB
[2026-03-02 10:08:12 TP0] Memory pool end. avail mem=10.3 GB
[2026-03-02 10:08:13 TP0] Capture cuda graph begin. This can take up to several minutes. \
avail mem=10.2 GB
[2026-03-02 10:09:13 TP0] Capture cuda graph end. Time elapsed: 60.1 s. mem usage=2.1 GB. \
avail mem=8.1 GB.
[2026-03-02 10:09:15] INFO:     Started server process [12345]
[2026-03-02 10:09:15] INFO:     Waiting for application startup.
[2026-03-02 10:09:15] INFO:     Application startup complete.
[2026-03-02 10:09:15] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
[2026-03-02 10:09:16] INFO:     127.0.0.1:40000 - "GET /model_info HTTP/1.1" 200 OK
[2026-03-02 10:09:17] The server is fired up and ready to roll!
"""
BODY = (
    "[2026-03-02 11:{m:02d}:{s:02d} TP0] Decode batch. #running-req: {r}, #token: {t}, "
    "token usage: 0.{u:02d}, cuda graph: True, gen throughput (token/s): {g}.{h}, "
    "#queue-req: 0, ",
    "[2026-03-02 11:{m:02d}:{s:02d} TP0] Prefill batch. #new-seq: 1, #new-token: {t}, "
    "#cached-token: {r}, token usage: 0.{u:02d}, #running-req: {r}, #queue-req: 0, ",
    '[2026-03-02 11:{m:02d}:{s:02d}] INFO:     127.0.0.1:{t} - "POST /v1/chat/completions '
    'HTTP/1.1" 200 OK',
)
TAIL = """\
[2026-03-02 12:00:00 TP3] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2790, in run_scheduler_process
    scheduler.event_loop_overlap()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total \
capacity of 139.81 GiB of which 1.02 GiB is free.
[2026-03-02 12:00:00] Received sigquit from a child process. It usually means the child failed.
Killed
"""


def write_log(path: Path, mb: int) -> int:
    """The serving log, ``mb`` MiB; returns the 1-based line number of the OOM line."""
    rnd = random.Random(1)
    lines = []
    for i in range(20_000):
        tpl = rnd.choices(BODY, (8, 1, 1))[0]
        lines.append(
            tpl.format(
                m=i % 60,
                s=(i * 7) % 60,
                r=rnd.randint(1, 64),
                t=rnd.randint(1000, 60000),
                u=rnd.randint(0, 99),
                g=rnd.randint(100, 3000),
                h=rnd.randint(0, 9),
            )
            + "\n"
        )
    block = "".join(lines).encode()
    target = mb * 1024 * 1024 - len(TAIL)
    n_lines = HEAD.count("\n")
    with path.open("wb") as f:
        f.write(HEAD.encode())
        size = len(HEAD)
        while size < target:
            part = block[: target - size]
            part = part[: part.rfind(b"\n") + 1] or block[: block.index(b"\n") + 1]
            f.write(part)
            size += len(part)
            n_lines += part.count(b"\n")
        f.write(TAIL.encode())
    return n_lines + 4


# Prepended to the CLI: print the process's peak RSS (KiB) to stderr at exit.
REPORT_PEAK = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write('PEAK_RSS_KB ' + next(\n"
    "    ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:')) + '\\n'))\n"
)
# The console script (cli.main returns the exit status).
CLI = "from glmserve.cli import main; raise SystemExit(main())"


def write_requests_log(path: Path, mb: int) -> int:
    """Start-up, then lines with unique request ids, then the crash; the OOM line number."""
    rnd = random.Random(2)
    target = mb * 1024 * 1024 - len(TAIL)
    n_lines = HEAD.count("\n")
    with path.open("w") as f:
        f.write(HEAD)
        size = len(HEAD)
        while size < target:
            rid = f"{rnd.getrandbits(128):032x}"
            line = (
                f"[2026-03-02 11:00:{n_lines % 60:02d} TP0] Req {rid} done: prompt_tokens="
                f"{rnd.randint(10, 9000)}, completion_tokens={rnd.randint(1, 2000)}, "
                f"cached_tokens={rnd.randint(0, 4000)}, e2e_latency={rnd.random() * 30:.3f}\n"
            )
            f.write(line)
            size += len(line)
            n_lines += 1
        f.write(TAIL)
    return n_lines + 4


def measure(argv: list[str], env: dict[str, str], stdin: Path | None = None) -> dict:
    """Run one command; wall seconds, peak RSS (MiB) of that process, exit status, stderr."""
    fin = stdin.open("rb") if stdin else subprocess.DEVNULL
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv, env=env, stdin=fin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    wall = time.perf_counter() - t0
    if stdin:
        fin.close()  # type: ignore[union-attr]
    err = proc.stderr.decode("utf-8", "replace")
    peak = err.rsplit("PEAK_RSS_KB ", 1)
    lines = [ln for ln in peak[0].strip().splitlines() if ln.strip()]
    return {
        "wall_s": wall,
        "rss_mib": int(peak[1].split()[0]) / 1024 if len(peak) == 2 else float("nan"),
        "rc": proc.returncode,
        "stderr": lines[-1:],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--src", help="run glmserve from this src directory instead")
    ap.add_argument("--skip-random", action="store_true")
    ap.add_argument(
        "--only", choices=["diagnose", "stdin", "requests", "random", "logs"], action="append"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="glmserve-biglog-") as tmp:
        home = Path(tmp) / "home"
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        log = run_dir / "server.log"
        oom_line = write_log(log, args.mb)
        env = dict(os.environ, GLMSERVE_HOME=str(home))
        if args.src:
            env["PYTHONPATH"] = str(Path(args.src).resolve())
        glm = [sys.executable, "-c", REPORT_PEAK + CLI]
        sys.path.insert(0, env.get("PYTHONPATH", ""))
        from glmserve.store import RunRecord, RunStore

        os.environ["GLMSERVE_HOME"] = str(home)
        with RunStore.open() as store:
            store.add_run(
                RunRecord(run_id="b1600000", host="local", profile="big", port=1,
                          run_dir=str(run_dir), state="READY")
            )  # fmt: skip
        cases = [
            ("diagnose", f"glmserve diagnose server.log  ({args.mb} MiB)", ["diagnose", str(log)],
             None, 3, oom_line),
            ("stdin", "glmserve diagnose - < server.log", ["diagnose", "-"], log, 3, oom_line),
            ("logs", "glmserve logs RUN -n 5", ["logs", "b1600000", "-n", "5"], None, 0, 0),
        ]  # fmt: skip
        req = Path(tmp) / "requests.log"
        req_oom = write_requests_log(req, args.mb)
        cases.append(
            ("requests", f"glmserve diagnose requests.log  ({args.mb} MiB, unique ids)",
             ["diagnose", str(req)], None, 3, req_oom)
        )  # fmt: skip
        if not args.skip_random:
            rnd = Path(tmp) / "random.bin"
            with rnd.open("wb") as f:
                for _ in range(args.mb):
                    f.write(os.urandom(1 << 20))
            cases.append(
                ("random", f"glmserve diagnose random.bin  ({args.mb} MiB of os.urandom)",
                 ["diagnose", str(rnd)], None, 6, 0)
            )  # fmt: skip
        print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC")
        py = platform.python_version()
        print(f"machine: nproc={os.cpu_count()} {platform.platform()} python {py}")
        print(f"command: python {' '.join(sys.argv)}")
        print(f"code: {args.src or 'this checkout'}; log: {log.stat().st_size} bytes, OOM at "
              f"line {oom_line}")  # fmt: skip
        ok = True
        for key, label, argv, stdin, want, line in cases:
            if args.only and key not in args.only:
                continue
            r = measure([*glm, *argv], env, stdin)
            right = r["rc"] == want and (want != 3 or f":{line}" in " ".join(r["stderr"]))
            ok = ok and right
            print(f"{label:<58} wall {r['wall_s']:6.2f} s  peak RSS {r['rss_mib']:7.1f} MiB  "
                  f"exit {r['rc']} ({'as expected' if right else f'expected {want}'})"
                  f"  {' '.join(r['stderr'])[:110]}")  # fmt: skip
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
