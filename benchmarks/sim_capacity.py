"""Simulator capacity: >= 1,000 concurrent streams, >= 20,000 tokens/s, step times within 2%.

Starts the simulator as a subprocess (trtllm_mla on sm100 so the batch is not dominated by the
whole-pool cast), opens N concurrent streaming ``/generate`` requests over raw asyncio sockets
(a client far lighter than the server, so the 2-core box measures the server), then compares:

* achieved output tokens/s (client-counted tokens over the client's window) with the rate the
  cost model predicts for the same steps (sum of tokens / sum of configured step times);
* every steady decode step's achieved duration (gap between the server's emission times of
  consecutive steps, from ``/sim/trace``) with its configured duration (model_s * time_scale).

Usage: python benchmarks/sim_capacity.py [--streams 1000] [--output-len 300] [--target 25000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import select
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import itertools

from glmserve.simulator import costmodel
from glmserve.simulator.costmodel import CostModel, ServerShape


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_load(port: int, streams: int, input_len: int, output_len: int) -> dict:
    """Open ``streams`` streaming /generate requests and count SSE events with raw epoll.

    Why not asyncio: the client shares the 2 cores with the server; a bare epoll loop costs a
    fraction of an asyncio Protocol per chunk, so the box measures the server, not the client.
    """
    payload = json.dumps(
        {
            "input_ids": [1] * input_len,
            "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True},
            "stream": True,
        }
    ).encode()
    req = (
        f"POST /generate HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json"
        f"\r\ncontent-length: {len(payload)}\r\n\r\n"
    ).encode() + payload
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < streams + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, streams + 1024), hard))
    ep = select.epoll()
    socks: dict[int, socket.socket] = {}
    events = {}
    tails = {}
    t0 = time.perf_counter()
    for _ in range(streams):
        sk = socket.create_connection(("127.0.0.1", port))
        sk.sendall(req)
        sk.setblocking(False)
        socks[sk.fileno()] = sk
        events[sk.fileno()] = 0
        tails[sk.fileno()] = b""
        ep.register(sk.fileno(), select.EPOLLIN)
    connect_s = time.perf_counter() - t0
    tokens = 0
    first = last = None
    open_fds = set(socks)
    deadline = time.monotonic() + 600
    while open_fds and time.monotonic() < deadline:
        for fd, _ in ep.poll(1.0):
            try:
                data = socks[fd].recv(1 << 16)
            except BlockingIOError:
                continue
            now = time.perf_counter()
            chunk = tails[fd] + data
            n = chunk.count(b"data: {")
            if n:
                events[fd] += n
                tokens += n
                first = first or now
                last = now
            tails[fd] = chunk[-16:]
            if not data or b"data: [DONE]" in chunk:
                ep.unregister(fd)
                socks[fd].close()
                open_fds.discard(fd)
    ep.close()
    return {
        "tokens": tokens,
        "first": first,
        "last": last,
        "connect_s": connect_s,
        "per_stream": list(events.values()),
    }


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--input-len", type=int, default=16)
    ap.add_argument("--output-len", type=int, default=300)
    ap.add_argument("--target", type=float, default=25000.0, help="configured tokens/s")
    ap.add_argument("--send-threads", type=int, default=0, help="simulator --sim-send-threads")
    args = ap.parse_args()

    load0 = os.getloadavg()
    shape = ServerShape(attention_backend="trtllm_mla", kv_cache_dtype="fp8_e4m3")
    mid_ctx = args.streams * (args.input_len + args.output_len // 2)
    step_s = costmodel.decode_step_s(CostModel(), shape, args.streams, mid_ctx)
    speed = args.target * step_s / args.streams  # time scale that yields the target rate
    port = free_port()
    cmd = [
        sys.executable, "-u", "-m", "glmserve.simulator", "--model-path", "glm-5-sim",
        "--port", str(port), "--tp-size", "8", "--attention-backend", "trtllm_mla",
        "--disable-cuda-graph", "--max-running-requests", str(args.streams + 24),
        "--sim-gpu-arch", "sm100", "--sim-speed", f"{speed:.6f}",
        "--sim-send-threads", str(args.send_threads),
        "--sim-load-seconds", "0.2", "--sim-kv-seconds", "0", "--sim-warmup-seconds", "0",
    ]  # fmt: skip
    log = open("/tmp/sim_capacity.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                print("simulator did not become ready; see /tmp/sim_capacity.log")
                return 1
            time.sleep(0.1)
        cpu0 = os.times()
        srv0 = proc_cpu_s(proc.pid)
        stats = run_load(port, args.streams, args.input_len, args.output_len)
        srv_cpu = proc_cpu_s(proc.pid) - srv0
        trace = get_json(f"http://127.0.0.1:{port}/sim/trace")
        cfg = get_json(f"http://127.0.0.1:{port}/sim/config")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    cpu1 = os.times()
    scale = cfg["time_scale"]
    steps = trace["steps"]
    decode = [s for s in steps if s["kind"] == "decode" and s["batch"] == args.streams]
    ratios = []
    for prev, cur in itertools.pairwise(steps):
        if cur in decode and prev["kind"] == "decode" and prev["batch"] == args.streams:
            ratios.append((cur["emitted"] - prev["emitted"]) / (cur["model_s"] * scale))
    full = [s for s in steps if s["batch"] == args.streams or s["kind"] == "prefill"]
    t_first = min(s["start"] for s in full)
    t_last = max(s["emitted"] for s in full)
    configured_window = sum(s["model_s"] * scale for s in full)
    tokens = stats["tokens"]
    client_window = stats["last"] - stats["first"]
    achieved = tokens / client_window
    configured = tokens / configured_window
    steady = decode[len(decode) // 10 :]
    steady_tokens = sum(s["batch"] for s in steady)
    steady_cfg = steady_tokens / sum(s["model_s"] * scale for s in steady)
    steady_ach = steady_tokens / (
        steady[-1]["emitted"] - steady[0]["emitted"] + steady[0]["model_s"] * scale
    )
    p99 = sorted(ratios)[int(0.99 * len(ratios))]
    within2 = sum(1 for r in ratios if abs(r - 1) <= 0.02) / len(ratios)
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(f"machine: {' '.join(platform.uname())}")
    print(f"nproc={os.cpu_count()} {platform.uname().system} {platform.uname().release} "
          f"{platform.uname().machine} python {platform.python_version()}")  # fmt: skip
    print("load average before run (other jobs on the box): " + " ".join(f"{x:.2f}" for x in load0))
    print(f"command: python benchmarks/sim_capacity.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"streams: {args.streams} concurrent, input {args.input_len}, output {args.output_len}")
    print(f"all streams completed: {all(c == args.output_len for c in stats['per_stream'])} "
          f"(tokens received {tokens} of {args.streams * args.output_len})")  # fmt: skip
    print(f"sim speed: {speed:.3f}x (configured decode step at batch {args.streams}: "
          f"{step_s * 1e3 / speed:.2f} ms wall)")  # fmt: skip
    print(f"output tokens/s  configured {configured:10.0f}  achieved {achieved:10.0f}  "
          f"ratio {achieved / configured:.4f}")  # fmt: skip
    print(f"steady decode    configured {steady_cfg:10.0f}  achieved {steady_ach:10.0f}  "
          f"ratio {steady_ach / steady_cfg:.4f}")  # fmt: skip
    print(f"decode step time achieved/configured: mean {statistics.mean(ratios):.4f}  "
          f"median {statistics.median(ratios):.4f}  p99 {p99:.4f}  "
          f"steps within 2%: {within2 * 100:.1f}% of {len(ratios)}")  # fmt: skip
    print(f"server window {t_last - t_first:.2f} s vs configured {configured_window:.2f} s")
    print(f"cpu during the load: server {srv_cpu:.2f} s "
          f"({srv_cpu / tokens * 1e6:.1f} us/token), "
          f"client {cpu1.user - cpu0.user + cpu1.system - cpu0.system:.2f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
