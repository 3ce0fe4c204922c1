"""GPU telemetry on the server's host: one ``nvidia-smi -lms 500`` per bench, over the transport.

Why: two configs with the same tok/s can differ in power, and a level that throttles (power
cap, thermal) is measuring the cooling, not the config. The sampler runs on the server's host
(``Transport``: local or SSH), writing CSV to a private temp file there; each level reads the
lines written between its start and end. It is started in its own session (``setsid``), its
PID recorded, and stopped with the bench by that process group (never by name).

A bench killed outright (SIGKILL, OOM killer) runs no ``finally``: a *keeper* stops the loop
then. The keeper is a local ``sh`` in its own session blocked reading a pipe whose write end
only the bench holds; when the bench dies the kernel closes it, ``cat`` sees EOF and the
keeper runs the same stop command (locally, or over ssh). A normal stop kills the keeper
first (by its PID), so it never fires twice.

Fields, as NVIDIA documents them (``nvidia-smi --help-query-gpu``): ``index`` (zero based
index of the GPU), ``power.draw`` (last measured power draw for the entire board, W),
``clocks.sm`` (current SM clock, MHz), ``clocks.mem`` (current memory clock, MHz),
``utilization.gpu`` (percent of time a kernel was executing), ``memory.used`` (MiB),
``temperature.gpu`` (core temperature, C), ``clocks_throttle_reasons.active`` (bitmask of
active clock throttle reasons). With ``nounits`` the values are bare numbers; an unsupported
field prints ``[N/A]`` or ``[Not Supported]`` (kept as None).

A host without ``nvidia-smi`` (a simulator on a CPU box) gives a note, never an error.
"""

from __future__ import annotations

import contextlib
import math
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from glmserve.errors import GlmserveError

FIELDS = (
    "index",
    "power.draw",
    "clocks.sm",
    "clocks.mem",
    "utilization.gpu",
    "memory.used",
    "temperature.gpu",
    "clocks_throttle_reasons.active",
)
KEYS = ("index", "power_w", "sm_mhz", "mem_mhz", "util_pct", "mem_used_mib", "temp_c", "throttle")
PERIOD_MS = 500
ARGS = f"--query-gpu={','.join(FIELDS)} --format=csv,noheader,nounits -lms {PERIOD_MS}"
QUERY = f"nvidia-smi {ARGS}"
# Throttle-reason bits (nvml.h, nvmlClocksThrottleReason*): 0x4 SW power cap, 0x8 HW slowdown,
# 0x20 SW thermal, 0x40 HW thermal, 0x80 HW power brake. Idle (0x1), application clocks (0x2),
# sync boost (0x10) and display clock (0x100) do not slow a loaded GPU: not counted.
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
NO_SMI = "GLMSERVE_NO_NVIDIA_SMI"


def stop_script(pid: int, path: str) -> str:
    """Host shell that stops the loop by its process group and removes its files."""
    q = shlex.quote(path)
    return f"kill -TERM -- -{int(pid)} 2>/dev/null; rm -f -- {q} {shlex.quote(path + '.pid')}"


def host_argv(transport: Any, cmd: str) -> list[str] | None:
    """argv running ``cmd`` on the transport's host from a process of its own (the keeper
    outlives the bench, so it cannot call the transport), None for another transport."""
    from glmserve.remote.transport import LocalTransport, SshTransport

    if isinstance(transport, LocalTransport):
        return ["bash", "-c", cmd]
    if isinstance(transport, SshTransport):
        remote = "bash --norc --noprofile -c " + shlex.quote(cmd)
        return [*transport.ssh_base(), transport.target, "--", remote]
    return None


def start_keeper(argv: list[str]) -> subprocess.Popen[bytes] | None:
    """A local process that runs ``argv`` once the bench's end of its stdin pipe closes
    (the bench exited or was killed); its own session, so a Ctrl-C does not reach it."""
    try:
        return subprocess.Popen(
            ["sh", "-c", 'cat >/dev/null; exec "$@"', "glmserve-gpu-keeper", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        return None


MAX_GPU_INDEX = 4096
MAX_BITMASK = 2**64  # clocks_throttle_reasons.active is an unsigned long long


def _num(s: str) -> float | None:
    """A finite, non-negative reading, else None: every field here is a count, an index, a
    clock, a power, a percentage or a bitmask, and a broken (or faked) nvidia-smi printing
    ``nan``, ``inf`` or ``-5`` must not become a power, an energy or a GPU index."""
    s = s.strip()
    try:
        v = float(int(s, 16)) if s.lower().startswith("0x") else float(s)
    except (ValueError, OverflowError):
        return None  # [N/A], [Not Supported]
    return v if math.isfinite(v) and v >= 0 else None


def parse_lines(text: str) -> list[dict[str, float | None]]:
    """nvidia-smi CSV (noheader, nounits) -> one dict per line; malformed lines (a GPU index
    that is no small whole number among them) are skipped."""
    out = []
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) != len(FIELDS):
            continue
        row = {k: _num(p) for k, p in zip(KEYS, parts, strict=True)}
        index = row["index"]
        if index is None or index != int(index) or index >= MAX_GPU_INDEX:
            continue
        thr = row["throttle"]
        if thr is not None and (thr != int(thr) or thr >= MAX_BITMASK):
            row["throttle"] = None  # not a bitmask: no throttling is read from it
        out.append(row)
    return out


def derive(rows: list[dict[str, Any]], seconds: float, output_tokens: int) -> dict[str, Any]:
    """A level's GPU figures: per GPU mean power, SM clock, max temperature and throttling;
    in total mean power (sum over GPUs), energy (mean power x level time) and tokens/J."""
    per: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        per.setdefault(int(r["index"]), []).append(r)
    gpus = []
    total_w = 0.0
    have_power = False
    throttled = False
    for idx in sorted(per):
        rs = per[idx]
        pw = [r["power_w"] for r in rs if r["power_w"] is not None]
        sm = [r["sm_mhz"] for r in rs if r["sm_mhz"] is not None]
        tmp = [r["temp_c"] for r in rs if r["temp_c"] is not None]
        thr = any(int(r["throttle"] or 0) & THROTTLE_MASK for r in rs)
        throttled = throttled or thr
        mean_w = sum(pw) / len(pw) if pw else None
        if mean_w is not None:
            total_w += mean_w
            have_power = True
        gpus.append(
            {
                "index": idx,
                "samples": len(rs),
                "power_w_mean": mean_w,
                "sm_mhz_mean": sum(sm) / len(sm) if sm else None,
                "temp_c_max": max(tmp) if tmp else None,
                "throttled": thr,
            }
        )
    out: dict[str, Any] = {"gpus": gpus, "throttled": throttled, "samples": len(rows)}
    if have_power and seconds > 0:
        energy = total_w * seconds
        out.update(power_w_mean=total_w, energy_j=energy)
        out["output_tok_per_j"] = output_tokens / energy if energy > 0 else None
    return out


def series(rows: list[dict[str, Any]], t0: float, t1: float) -> dict[str, Any]:
    """Per-GPU power and SM clock lists for the charts; times spread evenly over the level
    (nvidia-smi prints one line per GPU every ``PERIOD_MS``, without a timestamp field)."""
    per: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        per.setdefault(int(r["index"]), []).append(r)
    out: dict[str, Any] = {}
    for idx, rs in sorted(per.items()):
        n = len(rs)
        dt = (t1 - t0) / n if n else 0.0
        out[str(idx)] = {
            "t": [round(dt * (i + 0.5), 3) for i in range(n)],
            "power_w": [r["power_w"] for r in rs],
            "sm_mhz": [r["sm_mhz"] for r in rs],
        }
    return out


@dataclass
class GpuSampler:
    """The host's ``nvidia-smi`` loop for one bench; ``LevelGpu`` takes each level's lines.

    The PID is the one the loop itself reports (``$$`` of the shell that execs it, after
    ``setsid``), so it is the session and group leader whether or not ``setsid`` had to fork
    (it does when the host's shell gave the job its own process group)."""

    transport: Any
    command: str = "nvidia-smi"  # on the host's PATH; a path in tests
    pid: int | None = None
    path: str | None = None
    note: str | None = None
    offset: int = 0
    keeper: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _buf: str = field(default="", repr=False)

    def start(self) -> GpuSampler:
        smi = shlex.quote(self.command)
        script = (
            f"command -v {smi} >/dev/null 2>&1 || {{ echo {NO_SMI}; exit 0; }}; "
            'f=$(mktemp "${TMPDIR:-/tmp}/glmserve-gpu.XXXXXX") || exit 1; '
            f'setsid sh -c \'echo $$ >"$1.pid"; exec "$0" {ARGS} >"$1" 2>&1\' '
            f'{smi} "$f" </dev/null >/dev/null 2>&1 & '
            'for _ in $(seq 50); do [ -s "$f.pid" ] && break; sleep 0.1; done; '
            'echo "$(cat "$f.pid" 2>/dev/null) $f"'
        )
        try:
            res = self.transport.run(script, timeout=20)
        except GlmserveError as exc:
            self.note = f"GPU telemetry not started: {exc}"
            return self
        out = res.stdout.strip()
        if NO_SMI in out:
            self.note = "no nvidia-smi on the server's host: no GPU telemetry"
            return self
        pid, _, path = out.partition(" ")
        if not res.ok or not pid.isdigit() or not path:
            self.note = f"GPU telemetry not started: {res.stderr.strip() or out or res.rc}"
            return self
        self.pid, self.path = int(pid), path
        argv = host_argv(self.transport, stop_script(self.pid, path))
        if argv is not None:
            self.keeper = start_keeper(argv)
        return self

    def read(self) -> list[dict[str, Any]]:
        """Whole lines written since the last read."""
        if self.path is None:
            return []
        try:
            data, self.offset = self.transport.read_from(self.path, self.offset)
        except GlmserveError as exc:
            self.note = f"GPU telemetry read failed: {exc}"
            return []
        text = self._buf + data.decode("utf-8", "replace")
        text, _, self._buf = text.rpartition("\n")  # a partial last line waits
        return parse_lines(text)

    def stop(self) -> None:
        """Stop the loop by its process group (the setsid'd nvidia-smi) and remove its file."""
        if self.pid is None:
            return
        pid, path = self.pid, self.path or ""
        self.pid = None
        self._drop_keeper()
        try:
            self.transport.run(stop_script(pid, path), timeout=20)
        except GlmserveError as exc:
            self.note = f"could not stop nvidia-smi (pid {pid}): {exc}"

    def _drop_keeper(self) -> None:
        """Kill the keeper (our child, by PID) before stopping the loop ourselves."""
        k, self.keeper = self.keeper, None
        if k is None:
            return
        with contextlib.suppress(OSError):
            k.kill()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            k.wait(timeout=5)
        if k.stdin is not None:
            with contextlib.suppress(OSError):
                k.stdin.close()


class LevelGpu:
    """One level's window: lines read at its start are dropped, those up to its end kept."""

    def __init__(self, sampler: GpuSampler | None) -> None:
        self.sampler = sampler
        self.t0 = self.t1 = 0.0
        self.rows: list[dict[str, Any]] = []

    def __enter__(self) -> LevelGpu:
        if self.sampler is not None:
            self.sampler.read()  # before the level: not this level's
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.t1 = time.perf_counter()
        if self.sampler is not None:
            self.rows = self.sampler.read()

    def doc(self, output_tokens: int) -> dict[str, Any] | None:
        if self.sampler is None:
            return None
        if self.sampler.pid is None and self.sampler.note:
            return {"note": self.sampler.note}
        d = derive(self.rows, self.t1 - self.t0, output_tokens)
        d["series"] = series(self.rows, self.t0, self.t1)
        if self.sampler.note:
            d["note"] = self.sampler.note
        elif not self.rows:  # a driver error prints text, not CSV: say so, do not guess
            d["note"] = "nvidia-smi printed no reading during this level"
        return d
