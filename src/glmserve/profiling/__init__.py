"""Read torch-profiler Chrome traces and say where the decode step goes.

SGLang's ``/start_profile`` writes one ``{id}-TP-{rank}.trace.json.gz`` per rank; on a real
GLM-5 server each one reaches gigabytes, so the file is never loaded whole: ``iter_trace``
decodes the ``traceEvents`` array one event at a time (C ``raw_decode`` over a sliding text
buffer, gz or plain). Everything after the reader is pure:

    iter_trace(path) ─► TraceAccumulator.add(event) ─► .finish() -> RankProfile
    [RankProfile, ...] ─► find_bottlenecks(...) -> [Finding]   (patterns -> advice)

GPU kernels are attributed to the op that launched them through the kernel's ``External id``
(kineto stamps it with the innermost op on the stack at launch), falling back to the
``correlation`` id of the ``cudaLaunchKernel`` runtime event / ``ac2g`` flow start and the
innermost ``cpu_op`` enclosing it. With ``record_shapes`` the launching op's ``Input type``
tells an ``aten::copy_`` FP8 -> BF16 cast apart from any other copy: that is the 69% cast the
seeds found (FlashInfer MLA casting the whole FP8 KV pool to BF16 on every layer).
"""

from __future__ import annotations

import gzip
import io
import json
import re
import sys
import zlib
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from glmserve.errors import ConfigError

ANALYSIS_VERSION = 1
PROFILED_EVENT = "PROFILED"  # run-store event holding summarize_analysis() of a capture

GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
# Older kineto (PyTorch 1.8-1.9) and other exporters spell the categories differently.
_CAT_ALIASES = {
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "runtime": "cuda_runtime",
    "driver": "cuda_driver",
    "operator": "cpu_op",
    "python": "python_function",
    "hip_runtime": "cuda_runtime",
}
_RANK_IN_NAME = re.compile(r"(?:^|[-_.])TP-?(\d+)(?=[-_.]|$)")
_RANK_WORD_IN_NAME = re.compile(r"(?:^|[-_.])rank[-_]?(\d+)(?=[-_.]|$)", re.I)  # HTA, DDP
# SGLang's ProfileMerger prefixes every pid with the file's ranks: "[TP00-DP01] 1234".
_MERGED_PID = re.compile(r"^\[([A-Z]+\d+(?:-[A-Z]+\d+)*)\]\s*(.*)$")
# One decode forward in SGLang: ModelRunner.forward_decode (eager) or CudaGraphRunner.replay
# (CUDA graphs) as a with_stack python frame; prefill is forward_extend. SGLang 0.5.9's
# piecewise_cuda_graph_runner.py replay runs inside forward_extend (prefill, with
# --enable-piecewise-cuda-graph) and multimodal/vit_cuda_graph_runner.py replay is the vision
# encoder: neither is a decode step.
_DECODE_FRAME = re.compile(
    r"(?:^|[/\\])(?!piecewise_|vit_)[^/\\]*\.py\(\d+\): (forward_decode|replay)$"
)
_PREFILL_FRAME = re.compile(r"\.py\(\d+\): forward_extend$")
_GRAPH_LAUNCH = re.compile(r"^(cu|cuda|hip)GraphLaunch")
MAX_EVENT_CHARS = 64 << 20  # one JSON value larger than this is not a trace event
# torch-profiler traces gzip 10-20x (the test traces: 13-18x); deflate tops out near 1000x,
# which only runs of one character reach. Past MAX_GZIP_FLOOR of output, a stream expanding
# more than MAX_GZIP_RATIO times what was read of the file is refused as a gzip bomb, after
# a few MiB read rather than after inflating gigabytes.
MAX_GZIP_RATIO = 100
MAX_GZIP_FLOOR = 64 << 20
# A value cut by the buffer's end fails within a few characters of it ("tru", "1.", "-Inf"),
# or as "Unterminated string starting at" its start; an error further back is in the text.
_CUT_MARGIN = 256
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_WS = " \t\r\n"
_WS_RUN = re.compile(r"[ \t\r\n]*")
_DELIMS = _WS + ",]}:"

# torch ScalarType codes as they appear in ``Concrete Inputs`` of aten::to / aten::_to_copy.
_SCALAR_TYPE_CODES = {
    "5": "Half",
    "6": "Float",
    "15": "BFloat16",
    "23": "Float8_e5m2",
    "24": "Float8_e4m3fn",
}
_SHORT_DTYPE = {
    "Float8_e4m3fn": "fp8_e4m3",
    "Float8_e4m3fnuz": "fp8_e4m3",
    "Float8_e5m2": "fp8_e5m2",
    "Float8_e5m2fnuz": "fp8_e5m2",
    "BFloat16": "bf16",
    "Half": "fp16",
    "Float": "fp32",
    "Byte": "uint8",
}
_CAST_OPS = frozenset({"aten::copy_", "aten::_to_copy", "aten::to"})


class TraceFormatError(ConfigError):
    """A trace file is not a Chrome trace (message names file:line)."""


# --------------------------------------------------------------------------- reading


class _TextWindow:
    """A sliding window over a text stream: decode JSON values without holding the file."""

    def __init__(self, fh: TextIO, label: str, chunk_chars: int = 1 << 20) -> None:
        self._fh = fh
        self._label = label
        self._chunk = chunk_chars
        self._decoder = json.JSONDecoder(strict=False)
        self.buf = ""
        self.pos = 0
        self.eof = False
        self._dropped_lines = 0

    def _fill(self, at_least: int = 0) -> bool:
        """Read the next chunk (``at_least`` characters when a value longer than a chunk is
        still open: its reads double, so re-decoding it costs linear, not quadratic, time)."""
        try:
            data = self._fh.read(max(self._chunk, at_least))
        except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
            why = "truncated" if isinstance(exc, EOFError) else "corrupt"
            line = self.line_at(len(self.buf))
            raise TraceFormatError(
                f"{self._label}:{line}: {why} compressed stream ({exc})"
            ) from exc
        if not data:
            self.eof = True
            return False
        self._dropped_lines += self.buf.count("\n", 0, self.pos)
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    def line_at(self, pos: int) -> int:
        return self._dropped_lines + self.buf.count("\n", 0, pos) + 1

    def fail(self, what: str, pos: int | None = None) -> TraceFormatError:
        line = self.line_at(self.pos if pos is None else pos)
        return TraceFormatError(f"{self._label}:{line}: not a Chrome trace: {what}")

    def peek(self) -> str:
        """Next non-blank character ('' at end of file), without consuming it. Blanks are
        skipped by the regex engine: gigabytes of padding cost seconds, not minutes."""
        while True:
            self.pos = _WS_RUN.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if self.eof or not self._fill():
                return ""

    def expect(self, chars: str) -> str:
        ch = self.peek()
        if not ch or ch not in chars:
            shown = repr(ch) if ch else "end of file"
            raise self.fail(f"expected one of {chars!r}, found {shown}")
        self.pos += 1
        return ch

    def value(self) -> Any:
        """Decode the next JSON value, reading more text until it is complete."""
        self.peek()
        while True:
            try:
                obj, end = self._decoder.raw_decode(self.buf, self.pos)
            except RecursionError as exc:
                # The C decoder guards its recursion with the interpreter's limit (about 1000
                # levels); a trace event nests 3 or 4. Past it nothing is decoded or kept.
                raise self.fail(
                    "JSON nested deeper than the decoder's limit (about "
                    f"{sys.getrecursionlimit()} levels; a trace event nests 3 or 4)"
                ) from exc
            except ValueError as exc:
                if not isinstance(exc, json.JSONDecodeError):
                    # int() refuses a number of more than sys.get_int_max_str_digits() digits
                    limit = sys.get_int_max_str_digits()
                    raise self.fail(f"a number of more than {limit} digits") from exc
                if _is_syntax_error(exc, len(self.buf)):
                    raise self.fail(exc.msg, exc.pos) from exc
                if len(self.buf) - self.pos > MAX_EVENT_CHARS:
                    raise self.fail(
                        f"one value is larger than {MAX_EVENT_CHARS >> 20} MiB"
                    ) from exc
                if self.eof or not self._fill(len(self.buf) - self.pos):
                    raise self.fail(exc.msg, exc.pos) from exc
                continue
            # A number cut by the buffer's end decodes "successfully" as its prefix ("0" of
            # "0.5"): accept it only once the character after it is a delimiter.
            cut = end == len(self.buf) or self.buf[end] not in _DELIMS
            if cut and not self.eof and self._fill():
                continue
            self.pos = end
            return obj


def _is_syntax_error(exc: json.JSONDecodeError, buf_len: int) -> bool:
    """The JSON is wrong whatever follows (so reading on, up to MAX_EVENT_CHARS, is waste and
    "one value is larger than 64 MiB" would be the wrong message)."""
    return not exc.msg.startswith("Unterminated") and exc.pos < buf_len - _CUT_MARGIN


@dataclass
class TraceFile:
    """Events of one trace file, streamed; ``metadata`` fills as the file is read."""

    path: Path
    metadata: dict[str, Any] = field(default_factory=dict)
    has_event_array: bool = False  # a traceEvents array (or a bare array) was found

    def events(self) -> Iterator[dict[str, Any]]:
        """Yield every event; raises TraceFormatError (file:line) on anything not a trace."""
        with _open_text(self.path) as fh:
            win = _TextWindow(fh, str(self.path))
            first = win.peek()
            if first == "":
                raise TraceFormatError(f"{self.path}: not a Chrome trace: the file is empty")
            if first == "[":  # Chrome's bare "JSON array format"
                self.has_event_array = True
                yield from _array_items(win)
                return
            win.expect("{")
            if win.peek() == "}":
                win.pos += 1
                return
            while True:
                key = win.value()
                if not isinstance(key, str):
                    raise win.fail("object key is not a string")
                win.expect(":")
                if key == "traceEvents":
                    self.has_event_array = True
                    yield from _array_items(win)
                else:
                    self.metadata[key] = win.value()
                if win.expect(",}") == "}":
                    break
            if win.peek():
                raise win.fail("text after the end of the trace object")


def _array_items(win: _TextWindow) -> Iterator[dict[str, Any]]:
    win.expect("[")
    if win.peek() == "]":
        win.pos += 1
        return
    while True:
        item = win.value()
        if isinstance(item, dict):
            yield item
        if win.expect(",]") == "]":
            return


class _BoundedGunzip(io.RawIOBase):
    """The decompressed bytes of a ``.gz`` trace, refused (TraceFormatError) as soon as they
    outgrow what was read of the file by more than MAX_GZIP_RATIO (past MAX_GZIP_FLOOR):
    the check runs on every read, so a bomb stops after MiBs of output, not GiBs."""

    def __init__(self, raw: BinaryIO, path: Path) -> None:
        self._raw = raw
        self._gz = gzip.GzipFile(fileobj=raw, mode="rb")
        self._path = path
        self.produced = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        # at most a MiB per call, so one large read cannot inflate far past the check
        n = self._gz.readinto(memoryview(buffer)[: 1 << 20])
        self.produced += n
        consumed = max(self._raw.tell(), 1)
        if self.produced > MAX_GZIP_FLOOR and self.produced > MAX_GZIP_RATIO * consumed:
            raise TraceFormatError(
                f"{self._path}: not a Chrome trace: its gzip stream expands more than "
                f"{MAX_GZIP_RATIO}x ({self.produced >> 20} MiB from the first "
                f"{max(consumed >> 10, 1)} KiB); a profiler trace compresses 10-20x "
                "(a gzip bomb?)"
            )
        return n

    def close(self) -> None:
        if not self.closed:
            self._gz.close()
            self._raw.close()
        super().close()


def _open_text(path: Path) -> TextIO:
    try:
        raw = path.open("rb")
        magic = raw.read(2)
        raw.seek(0)
    except OSError as exc:  # missing, a directory, unreadable
        raise TraceFormatError(f"{path}: cannot read trace: {exc.strerror or exc}") from exc
    binary: Any = io.BufferedReader(_BoundedGunzip(raw, path)) if magic == b"\x1f\x8b" else raw
    return io.TextIOWrapper(binary, encoding="utf-8", errors="replace")


def iter_trace(path: str | Path) -> Iterator[dict[str, Any]]:
    """Stream the events of a Chrome trace (``.json`` or ``.json.gz``), one dict at a time."""
    return TraceFile(Path(path)).events()


# --------------------------------------------------------------------------- results


@dataclass
class KernelStat:
    """One GPU kernel name: its time over the profiled steps and who launched it."""

    name: str
    short_name: str
    category: str  # kernel | gpu_memcpy | gpu_memset
    total_us: float
    count: int
    share: float  # of decode step time (total over steps / window)
    launched_by: str  # most common launching op label, "" when unknown
    kind: str  # cast|gemm|attention|norm|allreduce|memcpy_htod|memcpy|elementwise|other


@dataclass
class OpStat:
    """One op (name + dtype label): GPU time of the kernels it launched, or CPU self time."""

    name: str
    label: str  # e.g. "fp8_e4m3 -> bf16 elementwise"
    total_us: float
    count: int
    share: float
    kernels: list[str] = field(default_factory=list)  # short kernel names it launched
    example_dims: list[Any] = field(default_factory=list)  # Input Dims of one call
    cast: tuple[str, str] | None = None  # (src, dst) dtype when the op is a dtype cast


@dataclass
class RankProfile:
    rank: int
    source: str
    steps: int
    step_us: float  # mean decode step time
    window_us: float  # steps * step time: what shares are measured against
    step_source: str  # "ProfilerStep" | "gpu busy span" | "cpu span"
    gpu_busy_us: float
    has_gpu: bool
    kernels: list[KernelStat]
    ops: list[OpStat]
    event_count: int
    label: str = ""  # e.g. "TP-1" or "TP01-DP00": where the rank number came from
    devices: list[int] = field(default_factory=list)  # GPU device ids seen in the kernels
    notes: list[str] = field(default_factory=list)  # what was guessed or left out, and why

    def top_kernels(self, n: int = 10) -> list[KernelStat]:
        return self.kernels[:n]

    def top_ops(self, n: int = 10) -> list[OpStat]:
        return self.ops[:n]


@dataclass
class Finding:
    """A pattern in the trace turned into advice."""

    kind: str  # fp8_kv_cast | allreduce | gemm_bound | memcpy_htod | gpu_idle | dominant_op
    severity: str  # high | medium | info
    share: float
    ranks: list[int]
    message: str


@dataclass
class TraceAnalysis:
    ranks: list[RankProfile]
    findings: list[Finding]
    version: int = ANALYSIS_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- accumulate


@dataclass(slots=True)
class _Op:
    ts: float
    end: float
    pid: Any
    tid: Any
    name: str
    ext_id: int | None
    args: dict[str, Any]


# One GPU activity: ts, dur, name, category, External id, correlation, device.
_Kernel = tuple[float, float, str, str, "int | None", "int | None", "int | None"]


class TraceAccumulator:
    """Pure: fed events one by one, builds a ``RankProfile`` without keeping the raw events.

    Only the fields the analysis needs are kept (op spans and shape args, kernel spans and ids,
    step markers), names interned, so memory grows with the number of events but not with
    their JSON size. Events with missing or unusable fields are counted and skipped: kineto's
    output varies by PyTorch release, and a field we do not know is not an error.
    """

    def __init__(self, rank: int, source: str = "", label: str = "") -> None:
        self.rank = rank
        self.source = source
        self.label = label
        self.events = 0
        self.skipped = 0
        self.steps: dict[int, tuple[float, float]] = {}
        self.decode_frames: list[tuple[Any, Any, float, float]] = []
        self.prefill_frames: list[tuple[Any, Any, float, float]] = []
        self.graph_launches: list[tuple[float, float]] = []
        self.ops: list[_Op] = []
        self.ops_by_ext: dict[int, int] = {}
        self.kernels: list[_Kernel] = []
        # correlation -> (pid, tid, ts, name) of the CPU-side launch (runtime call or ac2g start)
        self.launch_sites: dict[int, tuple[Any, Any, float, str]] = {}
        self.distributed: dict[str, Any] = {}
        self._shapes: dict[str, dict[str, Any]] = {}
        self._names: dict[str, str] = {}
        self._open: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)

    def _name(self, raw: Any) -> str:
        name = raw if isinstance(raw, str) else "" if raw is None else str(raw)
        return self._names.setdefault(name, name)

    def add(self, ev: dict[str, Any]) -> None:
        """Take one Chrome-trace event (``X``, ``B``/``E`` pairs, ``ac2g`` flow starts)."""
        self.events += 1
        ph = ev.get("ph")
        if ph == "X":
            self._complete(ev, ev.get("ts"), ev.get("dur"))
        elif ph == "B":
            self._open[(ev.get("pid"), ev.get("tid"))].append(ev)
        elif ph == "E":
            self._end(ev)
        elif ph == "s" and str(ev.get("cat", "")).lower() == "ac2g":
            corr, ts = _int(ev.get("id")), _num(ev.get("ts"))
            if corr is not None and ts is not None and corr not in self.launch_sites:
                self.launch_sites[corr] = (ev.get("pid"), ev.get("tid"), ts, "")

    def _end(self, ev: dict[str, Any]) -> None:
        """Close the matching ``B`` on the same thread (by name when the ``E`` has one)."""
        stack = self._open.get((ev.get("pid"), ev.get("tid")))
        if not stack:
            self.skipped += 1
            return
        idx = len(stack) - 1
        name = ev.get("name")
        if name:
            while idx >= 0 and stack[idx].get("name") != name:
                idx -= 1
            if idx < 0:
                self.skipped += 1
                return
        begin = stack.pop(idx)
        ts, end = _num(begin.get("ts")), _num(ev.get("ts"))
        if ts is None or end is None:
            self.skipped += 1
            return
        args = begin.get("args") if isinstance(begin.get("args"), dict) else {}
        if isinstance(ev.get("args"), dict):
            args = {**args, **ev["args"]}
        self._complete({**begin, "args": args}, ts, end - ts)

    def _complete(self, ev: dict[str, Any], raw_ts: Any, raw_dur: Any) -> None:
        ts = _num(raw_ts)
        dur = _num(raw_dur) if raw_dur is not None else 0.0
        if ts is None or dur is None or dur < 0:
            self.skipped += 1
            return
        cat = _category(ev.get("cat"))
        args = ev.get("args")
        if not isinstance(args, dict):
            args = {}
        if cat in GPU_CATEGORIES:
            dev = _int(args.get("device"))
            self.kernels.append(
                (
                    ts,
                    dur,
                    self._name(ev.get("name")),
                    cat,
                    _int(args.get("External id", args.get("external id"))),  # 1.8: lower
                    _int(args.get("correlation")),
                    dev if dev is not None else _int(ev.get("pid")),
                )
            )
            return
        name = self._name(ev.get("name"))
        if cat in RUNTIME_CATEGORIES:
            corr = _int(args.get("correlation"))
            if corr is not None:
                self.launch_sites[corr] = (ev.get("pid"), ev.get("tid"), ts, name)
            if _GRAPH_LAUNCH.match(name):
                self.graph_launches.append((ts, ts + dur))
        elif cat == "python_function":
            if _DECODE_FRAME.search(name):
                self.decode_frames.append((ev.get("pid"), ev.get("tid"), ts, ts + dur))
            elif _PREFILL_FRAME.search(name):
                self.prefill_frames.append((ev.get("pid"), ev.get("tid"), ts, ts + dur))
        elif cat in ("cpu_op", "user_annotation"):
            m = _STEP_NAME.match(name)
            step = _int(m.group(1)) if m else None
            if step is not None:
                self.steps[step] = (ts, dur)
                return
            if cat == "user_annotation":
                return
            ext = _int(args.get("External id"))
            keep = {
                k: args[k] for k in ("Input type", "Input Dims", "Concrete Inputs") if k in args
            }
            if keep:  # the same shapes repeat every layer and step: keep one copy of each
                keep = self._shapes.setdefault(repr(keep), keep)
            self.ops.append(_Op(ts, ts + dur, ev.get("pid"), ev.get("tid"), name, ext, keep))
            if ext is not None:
                self.ops_by_ext.setdefault(ext, len(self.ops) - 1)

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        info = metadata.get("distributedInfo")
        if isinstance(info, dict):
            self.distributed = info

    # -- decode steps
    def _step_spans(self, steps_hint: int | None) -> tuple[list[tuple[float, float]], str]:
        """CPU spans of the decode steps, best marker first, and which marker it was."""
        if self.steps:
            return sorted((t, t + d) for t, d in self.steps.values()), "ProfilerStep"
        decode = _not_within(self.decode_frames, self.prefill_frames)
        if decode:
            return _outermost(decode), "forward_decode/replay frames"
        if self.graph_launches and self.kernels:
            return sorted(self.graph_launches), "cudaGraphLaunch"
        return [], ""

    def finish(self, steps_hint: int | None = None) -> RankProfile:
        """Shares are of the decode steps' time: each step runs from its CPU marker's start
        to the end of the last GPU kernel it launched (GPU work lags the CPU), overlapping
        steps counted once. ``steps_hint``: how many steps were recorded, for traces without
        any step marker (the GPU busy span is then split evenly over that many steps)."""
        notes: list[str] = []
        spans, step_source = self._step_spans(steps_hint)
        kernels = self.kernels
        if spans:
            kernels, extents, left = self._kernels_in_steps(spans)
            window, n_steps = _union_length(sorted(extents)), len(spans)
            if left[0]:
                notes.append(
                    f"{left[0]} GPU activities ({left[1] / 1000:.2f} ms) outside the "
                    f"{n_steps} decode step(s) left out"
                )
        elif kernels:
            first = min(k[0] for k in kernels)
            window = max(k[0] + k[1] for k in kernels) - first
            n_steps = steps_hint or 1
            step_source = "gpu busy span" + (f" / {steps_hint} steps" if steps_hint else "")
            notes.append(
                "no decode-step markers (ProfilerStep#N, forward_decode/replay frames, "
                "cudaGraphLaunch): shares are of the whole profiled GPU span"
                + ("" if steps_hint else ", one step assumed")
            )
        elif self.ops:
            n_steps = 1
            window = max(o.end for o in self.ops) - min(o.ts for o in self.ops)
            step_source = "cpu span"
            notes.append("no decode-step markers: shares are of the whole profiled CPU span")
        else:
            n_steps, window, step_source = 0, 0.0, "empty"
        if self.prefill_frames and step_source == "forward_decode/replay frames":
            prefills = len(_outermost(self.prefill_frames))
            notes.append(f"{prefills} prefill (forward_extend) forward(s) left out")
        devices = sorted({k[6] for k in kernels if k[6] is not None})
        if len(devices) > 1:
            notes.append(
                f"kernels of {len(devices)} GPUs ({', '.join(map(str, devices))}) in one "
                "rank's trace: their times add up, so shares can pass 100%"
            )
        if self.skipped:
            notes.append(f"{self.skipped} event(s) with missing or unusable ts/dur skipped")
        has_gpu = bool(kernels)
        busy = _union_length(sorted((k[0], k[0] + k[1]) for k in kernels))
        if has_gpu:
            k_stats, ops = self._gpu_stats(window, kernels)
        else:
            k_stats, ops = [], self._cpu_self_stats(window, spans)
        return RankProfile(
            rank=self.rank,
            source=self.source,
            steps=n_steps,
            step_us=window / n_steps if n_steps else 0.0,
            window_us=window,
            step_source=step_source,
            gpu_busy_us=busy,
            has_gpu=has_gpu,
            kernels=k_stats,
            ops=ops,
            event_count=self.events,
            label=self.label,
            devices=devices,
            notes=notes,
        )

    def _launch_ts(self, ext: int | None, corr: int | None) -> float | None:
        if corr is not None and corr in self.launch_sites:
            return self.launch_sites[corr][2]
        if ext is not None and ext in self.ops_by_ext:
            return self.ops[self.ops_by_ext[ext]].ts
        return None

    def _kernels_in_steps(
        self, spans: list[tuple[float, float]]
    ) -> tuple[list[_Kernel], list[tuple[float, float]], tuple[int, float]]:
        """Kernels launched inside a step's CPU span (or, unlinked, starting in it)."""
        starts = [s for s, _ in spans]
        ends = [max(e, s) for s, e in spans]
        inside: list[_Kernel] = []
        left_n, left_us = 0, 0.0
        for k in self.kernels:
            launch = self._launch_ts(k[4], k[5])
            i = bisect_right(starts, k[0] if launch is None else launch) - 1
            if i < 0:
                ok = False
            elif launch is not None:
                ok = launch <= spans[i][1]
            elif i + 1 < len(starts):  # unlinked: it runs before the next step starts
                ok = k[0] < starts[i + 1]
            else:  # unlinked, last step: within one step length after its CPU end
                ok = k[0] <= 2 * spans[i][1] - spans[i][0]
            if not ok:
                left_n, left_us = left_n + 1, left_us + k[1]
                continue
            inside.append(k)
            ends[i] = max(ends[i], k[0] + k[1])
        return inside, list(zip(starts, ends, strict=True)), (left_n, left_us)

    # -- GPU: kernel time, attributed to launching ops
    def _launchers(self, kernels: list[_Kernel]) -> list[_Op | None]:
        """The op that launched each kernel: its ``External id`` op when that op encloses the
        launch call, else the innermost op enclosing the launch (correlation / ac2g flow)."""
        sites = [self.launch_sites.get(k[5]) if k[5] is not None else None for k in kernels]
        enclosing = _Enclosing(self.ops).find_all(
            [(s[0], s[1], s[2]) if s is not None else None for s in sites]
        )
        out: list[_Op | None] = []
        for k, site, inner in zip(kernels, sites, enclosing, strict=True):
            ext = k[4]
            op = self.ops[self.ops_by_ext[ext]] if ext in self.ops_by_ext else None
            if op is not None and (site is None or op.ts <= site[2] <= op.end):
                out.append(op)
            else:
                out.append(inner)
        return out

    def _gpu_stats(
        self, window: float, kernels: list[_Kernel]
    ) -> tuple[list[KernelStat], list[OpStat]]:
        k_total: dict[str, float] = defaultdict(float)
        k_count: dict[str, int] = defaultdict(int)
        k_cat: dict[str, str] = {}
        k_launchers: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        o_total: dict[tuple[str, str], float] = defaultdict(float)
        o_calls: dict[tuple[str, str], set[int]] = defaultdict(set)
        o_kernels: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        o_example: dict[tuple[str, str], _Op] = {}
        o_cast: dict[tuple[str, str], tuple[str, str] | None] = {}
        for k, op in zip(kernels, self._launchers(kernels), strict=True):
            _ts, dur, name, cat, _ext, corr, _dev = k
            k_total[name] += dur
            k_count[name] += 1
            k_cat[name] = cat
            if op is None:
                site = self.launch_sites.get(corr) if corr is not None else None
                graph = site is not None and "Graph" in site[3]
                key = ("(cuda graph)" if graph else "(unattributed)", _kernel_label(name, cat))
                call_id = corr if corr is not None else -1
            else:
                key = (op.name, _op_label(op, name))
                call_id = id(op)
                o_example.setdefault(key, op)
                o_cast.setdefault(key, _op_cast(op, name))
            if key[0] == "(cuda graph)" or key[0] == "(unattributed)":
                o_cast.setdefault(key, _kernel_fp8_cast(name))
            k_launchers[name][_join(key)] += dur
            o_total[key] += dur
            o_calls[key].add(call_id)
            o_kernels[key][_short_kernel(name)] += dur
        kernel_stats = [
            KernelStat(
                name=name,
                short_name=_short_kernel(name),
                category=k_cat[name],
                total_us=total,
                count=k_count[name],
                share=_share(total, window),
                launched_by=max(k_launchers[name].items(), key=lambda kv: kv[1])[0],
                kind=_kernel_kind(
                    name, k_cat[name], max(k_launchers[name], key=k_launchers[name].get)
                ),
            )
            for name, total in k_total.items()
        ]
        ops = [
            OpStat(
                name=key[0],
                label=key[1],
                total_us=total,
                count=len(o_calls[key]),
                share=_share(total, window),
                kernels=[k for k, _ in sorted(o_kernels[key].items(), key=lambda kv: -kv[1])][:3],
                example_dims=_dims(o_example.get(key)),
                cast=o_cast.get(key),
            )
            for key, total in o_total.items()
        ]
        kernel_stats.sort(key=lambda k: -k.total_us)
        ops.sort(key=lambda o: -o.total_us)
        return kernel_stats, ops

    # -- CPU only: self time of each op (nested children subtracted)
    def _cpu_self_stats(self, window: float, spans: list[tuple[float, float]]) -> list[OpStat]:
        ops = self.ops
        if spans:  # only ops that start inside a step: the window is the steps' time
            starts = [s for s, _ in spans]

            def in_step(op: _Op) -> bool:
                i = bisect_right(starts, op.ts) - 1
                return i >= 0 and op.ts <= spans[i][1]

            ops = [o for o in ops if in_step(o)]
        by_thread: dict[tuple[Any, Any], list[_Op]] = defaultdict(list)
        for op in ops:
            by_thread[(op.pid, op.tid)].append(op)
        self_time: dict[int, float] = {}
        for lst in by_thread.values():
            lst.sort(key=lambda o: (o.ts, -o.end))
            stack: list[_Op] = []
            for op in lst:
                while stack and stack[-1].end <= op.ts:
                    stack.pop()
                self_time[id(op)] = op.end - op.ts
                if stack:
                    parent = stack[-1]
                    self_time[id(parent)] -= min(op.end, parent.end) - op.ts
                stack.append(op)
        total: dict[tuple[str, str], float] = defaultdict(float)
        count: dict[tuple[str, str], int] = defaultdict(int)
        example: dict[tuple[str, str], _Op] = {}
        for op in ops:
            key = (op.name, _op_label(op, ""))
            total[key] += max(self_time[id(op)], 0.0)
            count[key] += 1
            example.setdefault(key, op)
        stats = [
            OpStat(
                name=key[0],
                label=key[1],
                total_us=t,
                count=count[key],
                share=_share(t, window),
                example_dims=_dims(example[key]),
                cast=_cast_dtypes(example[key]),
            )
            for key, t in total.items()
        ]
        stats.sort(key=lambda o: -o.total_us)
        return stats


def _outermost(frames: list[tuple[Any, Any, float, float]]) -> list[tuple[float, float]]:
    """Spans of frames not nested in another frame of the same thread."""
    kept: list[tuple[float, float]] = []
    last: dict[tuple[Any, Any], float] = {}
    for pid, tid, ts, end in sorted(frames, key=lambda f: (f[2], -f[3])):
        if ts < last.get((pid, tid), float("-inf")):
            continue
        last[(pid, tid)] = end
        kept.append((ts, end))
    return sorted(kept)


def _not_within(
    frames: list[tuple[Any, Any, float, float]], outer: list[tuple[Any, Any, float, float]]
) -> list[tuple[Any, Any, float, float]]:
    """``frames`` not nested in an ``outer`` frame of the same thread: a runner's replay
    called from forward_extend is part of that prefill, not a decode step."""
    spans: dict[tuple[Any, Any], list[tuple[float, float]]] = defaultdict(list)
    for pid, tid, ts, end in outer:
        spans[(pid, tid)].append((ts, end))
    starts: dict[tuple[Any, Any], list[float]] = {}
    ends: dict[tuple[Any, Any], list[float]] = {}
    for key, lst in spans.items():
        merged = _outermost([(None, None, ts, end) for ts, end in lst])
        starts[key], ends[key] = [s for s, _ in merged], [e for _, e in merged]
    kept = []
    for f in frames:
        key = (f[0], f[1])
        i = bisect_right(starts.get(key, []), f[2]) - 1
        if i < 0 or ends[key][i] < f[3]:
            kept.append(f)
    return kept


class _Enclosing:
    """Innermost op on a thread that encloses a timestamp (for correlation-only launches)."""

    def __init__(self, ops: list[_Op]) -> None:
        self._by_thread: dict[tuple[Any, Any], list[_Op]] = defaultdict(list)
        for op in ops:
            self._by_thread[(op.pid, op.tid)].append(op)
        for lst in self._by_thread.values():
            lst.sort(key=lambda o: (o.ts, -o.end))

    def find(self, pid: Any, tid: Any, ts: float) -> _Op | None:
        return self.find_all([(pid, tid, ts)])[0]

    def find_all(self, queries: list[tuple[Any, Any, float] | None]) -> list[_Op | None]:
        """Answer every query in one sweep per thread: O((ops + queries) log) in all, where
        a scan per query would be quadratic on a GB trace."""
        out: list[_Op | None] = [None] * len(queries)
        per_thread: dict[tuple[Any, Any], list[tuple[float, int]]] = defaultdict(list)
        for i, q in enumerate(queries):
            if q is not None:
                per_thread[(q[0], q[1])].append((q[2], i))
        for key, qs in per_thread.items():
            ops = self._by_thread.get(key, [])
            qs.sort()
            stack: list[_Op] = []
            j = 0
            for ts, i in qs:
                while j < len(ops) and ops[j].ts <= ts:
                    while stack and stack[-1].end < ops[j].ts:
                        stack.pop()
                    stack.append(ops[j])
                    j += 1
                while stack and stack[-1].end < ts:
                    stack.pop()
                out[i] = stack[-1] if stack else None
        return out


# --------------------------------------------------------------------------- labels


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError, OverflowError):
        return None


def _num(v: Any) -> float | None:
    """A timestamp or duration: a number, or a numeric string (some exporters quote them)."""
    if isinstance(v, bool):
        return None
    if not isinstance(v, (int, float, str)):
        return None
    try:
        f = float(v)
    except (ValueError, OverflowError):  # "abc"; an int of 400 digits is past any float
        return None
    return f if f == f and abs(f) != float("inf") else None


def _category(raw: Any) -> str:
    cat = str(raw).lower() if raw is not None else ""
    return _CAT_ALIASES.get(cat, cat)


def _share(part: float, window: float) -> float:
    return part / window if window > 0 else 0.0


def _join(key: tuple[str, str]) -> str:
    return f"{key[0]} ({key[1]})" if key[1] else key[0]


def _union_length(spans: list[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total


def _short_kernel(name: str) -> str:
    """``void at::native::unrolled_elementwise_kernel<...>(...)`` -> its bare name."""
    base = name.removeprefix("void ")
    depth, cut = 0, len(base)
    for i, ch in enumerate(base):
        if ch in "<(" and depth == 0:
            cut = i
            break
    base = base[:cut].strip()
    return base.rsplit("::", 1)[-1] or name[:60]


def _dtype(type_str: Any) -> str:
    s = str(type_str).removeprefix("c10::")
    return _SHORT_DTYPE.get(s, s.lower() if s else "")


def _cast_dtypes(op: _Op) -> tuple[str, str] | None:
    """(src, dst) when the op converts dtypes, from ``Input type`` (record_shapes)."""
    types = op.args.get("Input type") or []
    if op.name == "aten::copy_" and len(types) >= 2:
        dst, src = _dtype(types[0]), _dtype(types[1])
    elif op.name in ("aten::to", "aten::_to_copy") and types:
        src = _dtype(types[0])
        concrete = op.args.get("Concrete Inputs") or []
        code = str(concrete[1]) if len(concrete) > 1 else ""
        dst = _dtype(_SCALAR_TYPE_CODES.get(code, ""))
    else:
        return None
    if src and dst and src != dst and src not in ("scalar", "") and dst != "scalar":
        return (src, dst)
    return None


def _dims(op: _Op | None) -> list[Any]:
    if op is None:
        return []
    return [d for d in (op.args.get("Input Dims") or []) if d]


def _kernel_fp8_cast(name: str) -> tuple[str, str] | None:
    """A copy kernel whose functor takes ``c10::Float8_e4m3fn``: an FP8 upcast.

    Used when the trace lacks ``record_shapes``; the destination dtype is only named when the
    kernel name carries it (direct_copy_kernel's lambdas name the source type only).
    """
    if "Float8_e4m3" not in name or "copy" not in name:
        return None
    dst = "bf16" if "BFloat16" in name else "fp16" if "Half" in name else "wider"
    return ("fp8_e4m3", dst)


def _kernel_dtype_cast(name: str) -> bool:
    """A dtype-converting copy kernel whose name does not say the types (newer torch:
    ``direct_copy_kernel_cuda`` through ``LoadWithCast``/``StoreWithCast``)."""
    return "copy" in name and ("LoadWithCast" in name or "StoreWithCast" in name)


def _kernel_label(name: str, cat: str) -> str:
    if cat == "gpu_memcpy":
        return name
    cast = _kernel_fp8_cast(name)
    if cast:
        return f"{cast[0]} -> {cast[1]} elementwise"
    return "dtype cast" if _kernel_dtype_cast(name) else ""


def _op_cast(op: _Op, kernel_name: str) -> tuple[str, str] | None:
    cast = _cast_dtypes(op)
    if cast is None and op.name in _CAST_OPS:
        cast = _kernel_fp8_cast(kernel_name)
    return cast


def _op_label(op: _Op, kernel_name: str) -> str:
    cast = _op_cast(op, kernel_name)
    if cast is None:
        return ""
    suffix = " elementwise" if "elementwise" in kernel_name or not kernel_name else ""
    return f"{cast[0]} -> {cast[1]}{suffix}"


_GEMM = re.compile(r"gemm|gemv|cutlass|matmul|\bmm\b|_mm_|sm\d+_xmma|cublas|nvjet|fp4|mma", re.I)
_NORM = re.compile(r"rms_?norm|layer_?norm|norm_kernel|::norm::", re.I)
_ATTN = re.compile(r"attention|attn|mla|fmha|flash_?mla|softmax|decode_kernel", re.I)
_ALLREDUCE = re.compile(
    r"nccl.*(allreduce|all_reduce|reducescatter|allgather)|cross_device_reduce|all_reduce|allreduce",
    re.I,
)


def _kernel_kind(name: str, cat: str, launcher: str) -> str:
    if cat == "gpu_memcpy":
        return "memcpy_htod" if "HtoD" in name else "memcpy"
    if cat == "gpu_memset":
        return "memset"
    if _ALLREDUCE.search(name) or "nccl" in name.lower():
        return "allreduce"
    if ("->" in launcher and "elementwise" in name) or _kernel_fp8_cast(name):
        return "cast"
    if _kernel_dtype_cast(name):
        return "cast"
    if _NORM.search(name):
        return "norm"
    if _GEMM.search(name) or launcher.startswith(("aten::mm", "aten::addmm", "aten::bmm")):
        return "gemm"
    if _ATTN.search(name):
        return "attention"
    if "elementwise" in name:
        return "elementwise"
    return "other"


# --------------------------------------------------------------------------- analysis


def rank_of(path: Path, metadata: dict[str, Any]) -> int | None:
    """Rank from SGLang's file name (``-TP-{r}``), else ``distributedInfo.rank``, else a
    ``rank-N`` name; None when the file says nothing (the caller numbers it by order: a
    real rank 0 must not read as "no rank")."""
    m = _RANK_IN_NAME.search(path.name)
    if m:
        return int(m.group(1))
    info = metadata.get("distributedInfo")
    if isinstance(info, dict) and _int(info.get("rank")) is not None:
        return _int(info.get("rank"))
    m = _RANK_WORD_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def _name_label(name: str) -> str:
    """``1712-TP-1-DP-0-DECODE.trace.json.gz`` -> ``TP-1-DP-0`` (SGLang's rank parts)."""
    return "-".join(m.group(0) for m in re.finditer(r"(?<![A-Za-z])(TP|DP|PP|EP)-\d+", name))


class _RankRouter:
    """Sends each event of one file to its rank's accumulator.

    A plain per-rank file is one rank; SGLang's merged trace (``merged-<id>.trace.json.gz``)
    prefixes every pid with its ranks (``"[TP01] 1234"``), so it splits back into ranks.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.by_label: dict[str, TraceAccumulator] = {}

    def add(self, ev: dict[str, Any]) -> None:
        pid = ev.get("pid")
        label = ""
        if isinstance(pid, str):
            m = _MERGED_PID.match(pid)
            if m:
                label = m.group(1)
        acc = self.by_label.get(label)
        if acc is None:
            acc = self.by_label[label] = TraceAccumulator(0, str(self.path), label)
        acc.add(ev)


def summarize_trace_ranks(
    path: str | Path, steps_hint: int | None = None, fallback_rank: int = 0
) -> list[RankProfile]:
    """Stream one trace file into one RankProfile per rank found in it (the only I/O step);
    ``fallback_rank`` is the rank of a file that names none (its place among the files)."""
    trace = TraceFile(Path(path))
    router = _RankRouter(trace.path)
    for ev in trace.events():
        if isinstance(ev, dict):
            router.add(ev)
    if not trace.has_event_array:
        raise TraceFormatError(f"{trace.path}: not a Chrome trace: no traceEvents array")
    accs = [a for a in router.by_label.values() if a.label or len(router.by_label) == 1]
    if not accs or not any(a.kernels or a.ops or a.steps for a in accs):
        raise TraceFormatError(
            f"{trace.path}: no profiler events (GPU kernels or CPU ops) in this trace"
        )
    profiles = []
    for i, acc in enumerate(sorted(accs, key=lambda a: a.label)):
        acc.set_metadata(trace.metadata)
        if acc.label:  # merged trace: "TP01-DP00"
            m = re.search(r"TP(\d+)", acc.label)
            tp = _int(m.group(1)) if m else None
            acc.rank = tp if tp is not None else i
        else:
            rank = rank_of(trace.path, trace.metadata)
            acc.rank = rank if rank is not None else fallback_rank
            acc.label = _name_label(trace.path.name)
        profiles.append(acc.finish(steps_hint))
    return profiles


def summarize_trace(
    path: str | Path, rank: int | None = None, steps_hint: int | None = None
) -> RankProfile:
    """The first (usually only) rank of one trace file."""
    prof = summarize_trace_ranks(path, steps_hint)[0]
    if rank is not None:
        prof.rank = rank
    return prof


def analyze_traces(paths: Iterable[str | Path], steps_hint: int | None = None) -> TraceAnalysis:
    """Summarize every rank's trace and derive findings across them."""
    ranks: list[RankProfile] = []
    for i, p in enumerate(sorted(Path(x) for x in paths)):
        ranks.extend(summarize_trace_ranks(p, steps_hint=steps_hint, fallback_rank=i))
    seen = [r.rank for r in ranks]
    if len(set(seen)) != len(seen):  # e.g. TP-0-DP-0 and TP-0-DP-1: number them in order
        for i, r in enumerate(sorted(ranks, key=lambda r: (r.label, r.source))):
            r.rank = i
    ranks.sort(key=lambda r: r.rank)
    return TraceAnalysis(ranks=ranks, findings=find_bottlenecks(ranks))


def analyze_path(target: str | Path, steps_hint: int | None = None) -> TraceAnalysis:
    """Offline analysis of a trace file or a directory of them (``glmserve profile PATH``)."""
    path = Path(target)
    files = select_trace_files(find_trace_files(path)) if path.is_dir() else [path]
    if not files:
        raise TraceFormatError(f"{path}: no *.trace.json[.gz] / *.json[.gz] files in it")
    files, note = newest_capture(files)
    analysis = analyze_traces(files, steps_hint=steps_hint)
    if note:
        for r in analysis.ranks:
            r.notes.append(note)
    return analysis


def _capture_of(path: Path) -> str | None:
    """SGLang names a capture's files ``[prefix-]{profile_id}-TP-{r}[-DP-..][-STAGE]``: the
    part before ``TP-{r}`` (with the folder) is the capture; None for other names."""
    m = _RANK_IN_NAME.search(path.name)
    return str(path.parent / path.name[: m.start()]) if m else None


def newest_capture(files: list[Path]) -> tuple[list[Path], str]:
    """Only the newest capture's files when a directory holds several (each has its own
    TP-0, TP-1...: mixed, their ranks would collide), and a note naming the ones left out."""
    groups: dict[str, list[Path]] = defaultdict(list)
    for f in files:
        key = _capture_of(f)
        if key is None:
            return files, ""
        groups[key].append(f)
    if len(groups) < 2:
        return files, ""
    newest = max(groups, key=lambda k: (max(f.stat().st_mtime for f in groups[k]), k))
    older = ", ".join(Path(k).name.rstrip("-_.") for k in sorted(groups) if k != newest)
    note = (
        f"{len(groups)} captures in the directory: analysed the newest "
        f"({Path(newest).name.rstrip('-_.')}), left out {older}"
    )
    return groups[newest], note


def select_trace_files(files: list[Path]) -> list[Path]:
    """The files that describe decode, one per rank: SGLang's ``-DECODE`` stage files when
    ``profile_by_stage`` also wrote ``-EXTEND`` ones, and per-rank files over the
    ``merged-*`` file that repeats them."""
    decode = [f for f in files if "-DECODE" in f.name]
    if decode:
        files = decode
    per_rank = [f for f in files if not f.name.startswith("merged-")]
    return per_rank or files


def summarize_analysis(analysis: TraceAnalysis, top: int = 5) -> dict[str, Any]:
    """The part of an analysis worth storing (sweep.json, the run's events): per rank the
    step time and top kernels/ops, plus every finding."""
    return {
        "version": analysis.version,
        "ranks": [
            {
                "rank": r.rank,
                "step_ms": r.step_us / 1000,
                "steps": r.steps,
                "step_source": r.step_source,
                "notes": r.notes,
                "top_kernels": [
                    {"name": k.short_name, "share": k.share, "kind": k.kind}
                    for k in r.kernels[:top]
                ],
                "top_ops": [
                    {"name": o.name, "label": o.label, "share": o.share} for o in r.ops[:top]
                ],
            }
            for r in analysis.ranks
        ],
        "findings": [asdict(f) for f in analysis.findings],
    }


def find_trace_files(directory: Path) -> list[Path]:
    """Trace files under a directory: ``*.trace.json[.gz]`` (SGLang, kineto) when there are
    any, else every ``*.json[.gz]`` (HTA-style ``rank0.json.gz``)."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and _is_trace_name(p.name))
    named = [p for p in files if ".trace.json" in p.name]
    return named or files


def _is_trace_name(name: str) -> bool:
    return name.endswith((".json.gz", ".json"))


# Thresholds on the share of decode step time (worst rank).
CAST_SHARE = 0.10
ALLREDUCE_SHARE = 0.15
GEMM_SHARE = 0.40
HTOD_SHARE = 0.05
IDLE_SHARE = 0.30
DOMINANT_SHARE = 0.25
# A cast buffer this many rows or more is a KV pool, not one batch's gathered rows.
WHOLE_POOL_ROWS = 100_000


def find_bottlenecks(ranks: list[RankProfile]) -> list[Finding]:
    """Pure: turn the per-rank shares into advice, worst rank first, biggest share first."""
    findings: list[Finding] = []
    cast = _worst(ranks, lambda r: [o for o in r.ops if o.cast and o.cast[0].startswith("fp8")])
    if cast and cast[1] >= CAST_SHARE:
        op, share, rks, prof = cast
        per_step = op.count / prof.steps if prof.steps else op.count
        dims = op.example_dims[0] if op.example_dims else None
        shape = f" of a {list(dims)} buffer" if dims else ""
        src, dst = op.cast or ("fp8", "bf16")
        rows = _rows(dims)
        gathered = _has_gather(prof) and not (rows is not None and rows >= WHOLE_POOL_ROWS)
        if gathered:
            why = (
                "only the batch's KV rows are cast (gather-then-cast is active); the rest "
                "needs an FP8-native attention backend (trtllm_mla or cutlass_mla: SM100 GPUs only)"
            )
        else:
            why = (
                "the whole KV pool is cast every layer; try flashinfer_gtc (gather-then-cast) "
                "or trtllm_mla (reads FP8 KV natively)"
            )
        findings.append(
            Finding(
                kind="fp8_kv_cast",
                severity="high" if share >= 0.3 else "medium",
                share=share,
                ranks=rks,
                message=(
                    f"{op.name} ({src.split('_')[0]} -> {dst} elementwise) takes {share:.0%} of "
                    f"decode ({per_step:.0f} casts{shape} per step): {why}"
                ),
            )
        )
    dtype_cast = _worst_kind(ranks, "cast")
    if not findings and dtype_cast and dtype_cast[0] >= CAST_SHARE:
        findings.append(
            Finding(
                kind="dtype_cast",
                severity="high" if dtype_cast[0] >= 0.3 else "medium",
                share=dtype_cast[0],
                ranks=dtype_cast[1],
                message=(
                    f"dtype-converting copy kernels take {dtype_cast[0]:.0%} of decode (the "
                    "trace does not name the dtypes: profile with record_shapes to see them); "
                    "with an FP8 KV cache this is the whole pool cast to BF16 every layer: "
                    "try flashinfer_gtc or trtllm_mla"
                ),
            )
        )
    ar = _worst_kind(ranks, "allreduce")
    if ar and ar[0] >= ALLREDUCE_SHARE:
        ar_shares = [
            sum(k.share for k in r.kernels if k.kind == "allreduce") for r in ranks if r.has_gpu
        ]
        skew = (
            " (shares differ across ranks, "
            + ", ".join(f"{x:.0%}" for x in ar_shares)
            + ": part of it is waiting for the slowest rank, so check that rank first)"
            if len(ar_shares) > 1 and max(ar_shares) > 2 * min(ar_shares)
            else ""
        )
        findings.append(
            Finding(
                kind="allreduce",
                severity="high" if ar[0] >= 0.3 else "medium",
                share=ar[0],
                ranks=ar[1],
                message=(
                    f"all-reduce kernels take {ar[0]:.0%} of decode{skew}: on PCIe-only GPUs "
                    "check NCCL_P2P_LEVEL (SYS lets P2P cross the root complex), keep SGLang's "
                    "custom all-reduce on (no --disable-custom-all-reduce), or use fewer TP "
                    "ranks"
                ),
            )
        )
    gemm = _worst_kind(ranks, "gemm")
    if gemm and gemm[0] >= GEMM_SHARE:
        findings.append(
            Finding(
                kind="gemm_bound",
                severity="info",
                share=gemm[0],
                ranks=gemm[1],
                message=(
                    f"GEMM kernels take {gemm[0]:.0%} of decode: expected for weight-bandwidth-"
                    "bound decode; gains now come from fewer bytes per step (quantization, MTP)"
                ),
            )
        )
    htod = _worst_kind(ranks, "memcpy_htod")
    if htod and htod[0] >= HTOD_SHARE:
        findings.append(
            Finding(
                kind="memcpy_htod",
                severity="medium",
                share=htod[0],
                ranks=htod[1],
                message=(
                    f"host-to-device copies take {htod[0]:.0%} of decode: use pinned memory "
                    "(pin_memory=True / non_blocking copies) and keep per-step inputs on the GPU"
                ),
            )
        )
    idle = [
        (1 - _share(r.gpu_busy_us, r.window_us), r.rank)
        for r in ranks
        if r.has_gpu and r.window_us > 0
    ]
    if idle:
        worst_idle = max(idle)
        if worst_idle[0] >= IDLE_SHARE:
            findings.append(
                Finding(
                    kind="gpu_idle",
                    severity="medium",
                    share=worst_idle[0],
                    ranks=[r for s, r in idle if s >= IDLE_SHARE],
                    message=(
                        f"the GPU is idle {worst_idle[0]:.0%} of the decode step: launch-bound; "
                        "enable CUDA graphs (drop --disable-cuda-graph) or raise the batch size"
                    ),
                )
            )
    named = {f.kind for f in findings}
    dom = _worst(ranks, lambda r: [o for o in r.ops if not o.name.startswith("(")][:1])
    if dom and dom[1] >= DOMINANT_SHARE and "fp8_kv_cast" not in named:
        op, share, rks, _ = dom
        label = f" ({op.label})" if op.label else ""
        kernels = f" via {', '.join(op.kernels)}" if op.kernels else ""
        findings.append(
            Finding(
                kind="dominant_op",
                severity="info",
                share=share,
                ranks=rks,
                message=f"{op.name}{label} takes {share:.0%} of decode{kernels}",
            )
        )
    findings.sort(key=lambda f: ({"high": 0, "medium": 1, "info": 2}[f.severity], -f.share))
    return findings


_GATHER_OPS = frozenset({"aten::index", "aten::index_select", "aten::gather", "aten::take"})


def _has_gather(prof: RankProfile) -> bool:
    """Rows are gathered before the cast (the flashinfer_gtc pattern) in this rank's trace."""
    if any(o.name in _GATHER_OPS for o in prof.ops):
        return True
    return any(
        "gather" in k.short_name or "index_elementwise" in k.short_name for k in prof.kernels
    )


def _rows(dims: Any) -> int | None:
    try:
        return int(dims[0]) if dims else None
    except (TypeError, ValueError, IndexError):
        return None


def _worst(
    ranks: list[RankProfile], pick: Any
) -> tuple[OpStat, float, list[int], RankProfile] | None:
    best: tuple[OpStat, float, list[int], RankProfile] | None = None
    hit_ranks: list[int] = []
    for r in ranks:
        ops = pick(r)
        if not ops:
            continue
        op = max(ops, key=lambda o: o.share)
        hit_ranks.append(r.rank)
        if best is None or op.share > best[1]:
            best = (op, op.share, hit_ranks, r)
    return best


def _worst_kind(ranks: list[RankProfile], kind: str) -> tuple[float, list[int]] | None:
    shares = [(sum(k.share for k in r.kernels if k.kind == kind), r.rank) for r in ranks]
    shares = [s for s in shares if s[0] > 0]
    if not shares:
        return None
    return max(s for s, _ in shares), [rk for _, rk in shares]


# --------------------------------------------------------------------------- capture (I/O edge)


def parse_load(load: str) -> tuple[str, int]:
    """``decode`` -> (decode, 1); ``concurrency:C`` -> (concurrency, C)."""
    if load == "decode":
        return "decode", 1
    kind, _, n = load.partition(":")
    if kind == "concurrency" and n.isdigit() and int(n) > 0:
        return "concurrency", int(n)
    raise ConfigError(f"--load: expected decode or concurrency:C (C > 0), got {load!r}")


def _drive_load(base_url: str, concurrency: int, stop: Any, output_len: int) -> list[str]:
    """Keep ``concurrency`` native /generate requests in flight until ``stop`` is set."""
    import random
    import threading

    import httpx

    errors: list[str] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(timeout=httpx.Timeout(60.0, connect=5.0)) as client:
            while not stop.is_set():
                body = {
                    "input_ids": [rng.randrange(100, 30000) for _ in range(64)],
                    "sampling_params": {
                        "max_new_tokens": output_len,
                        "temperature": 0.0,
                        "ignore_eos": True,
                    },
                }
                try:
                    client.post(f"{base_url}/generate", json=body).raise_for_status()
                except httpx.HTTPError as exc:
                    errors.append(str(exc))
                    stop.wait(0.2)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    return errors


def capture_profile(
    run_id: str,
    steps: int = 5,
    load: str = "decode",
    timeout_s: float = 180.0,
    output_len: int = 64,
    say: Any = None,
) -> TraceAnalysis:
    """Record ``steps`` profiled steps on a live run, fetch the traces, analyze them.

    POSTs ``/start_profile`` with ``output_dir`` inside the run dir and ``num_steps`` (SGLang
    stops by itself after that many forward steps and writes ``{id}-TP-{r}.trace.json.gz``),
    drives the load meanwhile, polls the host until every rank's file is there and no longer
    growing, copies them to ``$GLMSERVE_HOME/profiles/<run>/<stamp>/`` and parses them.
    """
    import threading
    import time

    import httpx

    from glmserve.deploy.identity import RunMonitor, serving_endpoint
    from glmserve.errors import ServerNotReady, TransportError
    from glmserve.paths import glmserve_home
    from glmserve.remote.process import read_log_bytes, transport_for_run
    from glmserve.remote.transport import shell_path
    from glmserve.store import RunStore

    say = say or (lambda _m: None)
    if steps <= 0:
        raise ConfigError(f"--steps: must be > 0, got {steps}")
    _, concurrency = parse_load(load)
    with RunStore.open() as store:
        run = store.get_run(run_id)
    t = transport_for_run(run)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    remote_dir = f"{run.run_dir}/profile-{stamp}"
    t.run(f"mkdir -p -- {shell_path(remote_dir)}", check=True, what="create profile dir")
    want = max(int(run.tp_size or 1), 1)
    stop = threading.Event()
    # the run's own live server, watched meanwhile: a crash ends the wait with its diagnosis
    with serving_endpoint(run.run_id) as (base, run, _ident), RunMonitor(run, t) as monitor:
        body = {
            "output_dir": remote_dir,
            "num_steps": steps,
            "activities": ["CPU", "GPU"],
            "record_shapes": True,
        }
        try:
            r = httpx.post(f"{base}/start_profile", json=body, timeout=30)
        except httpx.HTTPError as exc:
            raise TransportError(f"run {run.run_id}: POST /start_profile: {exc}") from exc
        if r.status_code != 200:
            raise TransportError(
                f"run {run.run_id}: /start_profile answered {r.status_code}: {r.text.strip()[:200]}"
            )
        say(f"profiling {steps} steps on {want} rank(s) under {load} load")
        errors = _drive_load(base, concurrency, stop, output_len)
        try:
            gone = lambda: monitor.verdict is not None  # noqa: E731
            files = _wait_for_traces(t, remote_dir, want, time.monotonic() + timeout_s, gone)
            if monitor.verdict is not None:
                raise monitor.verdict.error(run.run_id)
            if len(files) < want:
                httpx.post(f"{base}/stop_profile", timeout=30)
                files = _wait_for_traces(t, remote_dir, want, time.monotonic() + 30)
        finally:
            stop.set()
    if not files:
        raise ServerNotReady(
            f"run {run.run_id}: no trace files in {remote_dir} after {timeout_s:.0f}s"
            + (f" (load errors: {errors[-1]})" if errors else "")
        )
    local = glmserve_home() / "profiles" / run.run_id / stamp
    local.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in files:
        data, _ = read_log_bytes(t, f"{remote_dir}/{name}")
        (local / name).write_bytes(data)
        paths.append(local / name)
    say(f"fetched {len(paths)} trace file(s) to {local}")
    analysis = analyze_traces(paths, steps_hint=steps)
    summary = {**summarize_analysis(analysis), "traces": str(local), "load": load}
    with RunStore.open() as store:  # `glmserve report RUN` shows these findings
        store.add_event(run.run_id, PROFILED_EVENT, None, summary)
    return analysis


def _wait_for_traces(
    t: Any, remote_dir: str, want: int, deadline: float, gone: Any = lambda: False
) -> list[str]:
    """Trace file names once ``want`` exist and their sizes held still for one poll (what
    there is as soon as ``gone()``: the server died and will write no more)."""
    import time

    from glmserve.remote.transport import shell_path

    last: dict[str, int] = {}
    while True:
        res = t.run(
            f"cd {shell_path(remote_dir)} 2>/dev/null && "
            'for f in *.trace.json.gz; do [ -e "$f" ] && stat -c \'%s %n\' -- "$f"; done; true'
        )
        sizes = {}
        for line in res.stdout.splitlines():
            size, _, name = line.partition(" ")
            if size.isdigit() and name:
                sizes[name] = int(size)
        if len(sizes) >= want and sizes == last:
            return sorted(sizes)
        if time.monotonic() > deadline or gone():
            return sorted(sizes) if sizes == last else []
        last = sizes
        time.sleep(0.5)
