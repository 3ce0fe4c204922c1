"""Turn one rank's stream of trace events into a ``RankProfile`` (pure).

GPU kernels are attributed to the op that launched them through the kernel's ``External id``
(kineto stamps it with the innermost op on the stack at launch), falling back to the
``correlation`` id of the ``cudaLaunchKernel`` runtime event / ``ac2g`` flow start and the
innermost ``cpu_op`` enclosing it. Decode steps come from the best marker the trace has:
``ProfilerStep#N`` spans, SGLang's forward_decode/replay python frames (with_stack), CUDA graph
launches, else the whole GPU (or CPU) span, said in the profile's notes.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from glmserve.profiling.events import (
    GPU_CATEGORIES,
    RUNTIME_CATEGORIES,
    KernelSpan,
    OpSpan,
    as_dur,
    as_int,
    as_ts,
    category,
)
from glmserve.profiling.labels import (
    cast_dtypes,
    kernel_fp8_cast,
    kernel_kind,
    kernel_label,
    op_cast,
    op_dims,
    op_label,
    short_kernel,
)
from glmserve.profiling.results import KernelStat, OpStat, RankProfile
from glmserve.profiling.spans import Enclosing, not_within, outermost, share, union_length

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
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass
class _Window:
    """The decode steps of one rank, what a profile's shares are of."""

    spans: list[tuple[float, float]]  # CPU spans of the steps ([] without step markers)
    kernels: list[KernelSpan]  # the GPU activity that belongs to them
    window_us: float
    steps: int
    source: str  # which marker the steps came from
    notes: list[str] = field(default_factory=list)


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
        self.ops: list[OpSpan] = []
        self.ops_by_ext: dict[int, int] = {}
        self.kernels: list[KernelSpan] = []
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
            corr, ts = as_int(ev.get("id")), as_ts(ev.get("ts"))
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
        ts, end = as_ts(begin.get("ts")), as_ts(ev.get("ts"))
        if ts is None or end is None:
            self.skipped += 1
            return
        args = begin.get("args") if isinstance(begin.get("args"), dict) else {}
        if isinstance(ev.get("args"), dict):
            args = {**args, **ev["args"]}
        self._complete({**begin, "args": args}, ts, end - ts)

    def _complete(self, ev: dict[str, Any], raw_ts: Any, raw_dur: Any) -> None:
        # A complete event without a usable ts or dur (a string, null, negative, 1e308: see
        # events.MAX_TS_US) is skipped and counted, never guessed: one such event made every
        # share NaN. The note in ``finish`` says how many.
        ts, dur = as_ts(raw_ts), as_dur(raw_dur)
        if ts is None or dur is None:
            self.skipped += 1
            return
        cat = category(ev.get("cat"))
        args = ev.get("args")
        if not isinstance(args, dict):
            args = {}
        if cat in GPU_CATEGORIES:
            dev = as_int(args.get("device"))
            self.kernels.append(
                (
                    ts,
                    dur,
                    self._name(ev.get("name")),
                    cat,
                    as_int(args.get("External id", args.get("external id"))),  # 1.8: lower
                    as_int(args.get("correlation")),
                    dev if dev is not None else as_int(ev.get("pid")),
                )
            )
            return
        name = self._name(ev.get("name"))
        if cat in RUNTIME_CATEGORIES:
            corr = as_int(args.get("correlation"))
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
            step = as_int(m.group(1)) if m else None
            if step is not None:
                self.steps[step] = (ts, dur)
                return
            if cat == "user_annotation":
                return
            ext = as_int(args.get("External id"))
            keep = {
                k: args[k] for k in ("Input type", "Input Dims", "Concrete Inputs") if k in args
            }
            if keep:  # the same shapes repeat every layer and step: keep one copy of each
                keep = self._shapes.setdefault(repr(keep), keep)
            self.ops.append(OpSpan(ts, ts + dur, ev.get("pid"), ev.get("tid"), name, ext, keep))
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
        decode = not_within(self.decode_frames, self.prefill_frames)
        if decode:
            return outermost(decode), "forward_decode/replay frames"
        if self.graph_launches and self.kernels:
            return sorted(self.graph_launches), "cudaGraphLaunch"
        return [], ""

    def finish(self, steps_hint: int | None = None) -> RankProfile:
        """The rank's profile, shares of the decode steps' time (see ``_window``).
        ``steps_hint``: how many steps were recorded, for traces without any step marker
        (the GPU busy span is then split evenly over that many steps)."""
        win = self._window(steps_hint)
        kernels = win.kernels
        notes = win.notes
        if self.prefill_frames and win.source == "forward_decode/replay frames":
            prefills = len(outermost(self.prefill_frames))
            notes.append(f"{prefills} prefill (forward_extend) forward(s) left out")
        devices = sorted({k[6] for k in kernels if k[6] is not None})
        if len(devices) > 1:
            notes.append(
                f"kernels of {len(devices)} GPUs ({', '.join(map(str, devices))}) in one "
                "rank's trace: their times add up, so shares can pass 100%"
            )
        if self.skipped:
            notes.append(
                f"{self.skipped} event(s) with missing or unusable ts/dur skipped (a "
                "non-number, null, negative or out of range)"
            )
        if kernels:
            k_stats, ops = self._gpu_stats(win.window_us, kernels)
        else:
            k_stats, ops = [], self._cpu_self_stats(win.window_us, win.spans)
        return RankProfile(
            rank=self.rank,
            source=self.source,
            steps=win.steps,
            step_us=win.window_us / win.steps if win.steps else 0.0,
            window_us=win.window_us,
            step_source=win.source,
            gpu_busy_us=union_length(sorted((k[0], k[0] + k[1]) for k in kernels)),
            has_gpu=bool(kernels),
            kernels=k_stats,
            ops=ops,
            event_count=self.events,
            label=self.label,
            devices=devices,
            notes=notes,
        )

    def _window(self, steps_hint: int | None) -> _Window:
        """The decode steps shares are measured against: each step runs from its CPU marker's
        start to the end of the last GPU kernel it launched (GPU work lags the CPU),
        overlapping steps counted once; without markers, the whole GPU (else CPU) span."""
        spans, source = self._step_spans(steps_hint)
        if spans:
            kernels, extents, left = self._kernels_in_steps(spans)
            win = _Window(spans, kernels, union_length(sorted(extents)), len(spans), source)
            if left[0]:
                win.notes.append(
                    f"{left[0]} GPU activities ({left[1] / 1000:.2f} ms) outside the "
                    f"{win.steps} decode step(s) left out"
                )
            return win
        kernels = self.kernels
        if kernels:
            first = min(k[0] for k in kernels)
            window = max(k[0] + k[1] for k in kernels) - first
            source = "gpu busy span" + (f" / {steps_hint} steps" if steps_hint else "")
            note = (
                "no decode-step markers (ProfilerStep#N, forward_decode/replay frames, "
                "cudaGraphLaunch): shares are of the whole profiled GPU span"
                + ("" if steps_hint else ", one step assumed")
            )
            return _Window([], kernels, window, steps_hint or 1, source, [note])
        if self.ops:
            window = max(o.end for o in self.ops) - min(o.ts for o in self.ops)
            note = "no decode-step markers: shares are of the whole profiled CPU span"
            return _Window([], kernels, window, 1, "cpu span", [note])
        return _Window([], kernels, 0.0, 0, "empty")

    def _launch_ts(self, ext: int | None, corr: int | None) -> float | None:
        if corr is not None and corr in self.launch_sites:
            return self.launch_sites[corr][2]
        if ext is not None and ext in self.ops_by_ext:
            return self.ops[self.ops_by_ext[ext]].ts
        return None

    def _kernels_in_steps(
        self, spans: list[tuple[float, float]]
    ) -> tuple[list[KernelSpan], list[tuple[float, float]], tuple[int, float]]:
        """Kernels launched inside a step's CPU span (or, unlinked, starting in it)."""
        starts = [s for s, _ in spans]
        ends = [max(e, s) for s, e in spans]
        inside: list[KernelSpan] = []
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
    def _launchers(self, kernels: list[KernelSpan]) -> list[OpSpan | None]:
        """The op that launched each kernel: its ``External id`` op when that op encloses the
        launch call, else the innermost op enclosing the launch (correlation / ac2g flow)."""
        sites = [self.launch_sites.get(k[5]) if k[5] is not None else None for k in kernels]
        enclosing = Enclosing(self.ops).find_all(
            [(s[0], s[1], s[2]) if s is not None else None for s in sites]
        )
        out: list[OpSpan | None] = []
        for k, site, inner in zip(kernels, sites, enclosing, strict=True):
            ext = k[4]
            op = self.ops[self.ops_by_ext[ext]] if ext in self.ops_by_ext else None
            if op is not None and (site is None or op.ts <= site[2] <= op.end):
                out.append(op)
            else:
                out.append(inner)
        return out

    def _gpu_stats(
        self, window: float, kernels: list[KernelSpan]
    ) -> tuple[list[KernelStat], list[OpStat]]:
        k_total: dict[str, float] = defaultdict(float)
        k_count: dict[str, int] = defaultdict(int)
        k_cat: dict[str, str] = {}
        k_launchers: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        o_total: dict[tuple[str, str], float] = defaultdict(float)
        o_calls: dict[tuple[str, str], set[int]] = defaultdict(set)
        o_kernels: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        o_example: dict[tuple[str, str], OpSpan] = {}
        o_cast: dict[tuple[str, str], tuple[str, str] | None] = {}
        for k, op in zip(kernels, self._launchers(kernels), strict=True):
            _ts, dur, name, cat, _ext, corr, _dev = k
            k_total[name] += dur
            k_count[name] += 1
            k_cat[name] = cat
            if op is None:
                site = self.launch_sites.get(corr) if corr is not None else None
                graph = site is not None and "Graph" in site[3]
                key = ("(cuda graph)" if graph else "(unattributed)", kernel_label(name, cat))
                call_id = corr if corr is not None else -1
            else:
                key = (op.name, op_label(op, name))
                call_id = id(op)
                o_example.setdefault(key, op)
                o_cast.setdefault(key, op_cast(op, name))
            if key[0] == "(cuda graph)" or key[0] == "(unattributed)":
                o_cast.setdefault(key, kernel_fp8_cast(name))
            k_launchers[name][_join(key)] += dur
            o_total[key] += dur
            o_calls[key].add(call_id)
            o_kernels[key][short_kernel(name)] += dur
        kernel_stats = [
            KernelStat(
                name=name,
                short_name=short_kernel(name),
                category=k_cat[name],
                total_us=total,
                count=k_count[name],
                share=share(total, window),
                launched_by=max(k_launchers[name].items(), key=lambda kv: kv[1])[0],
                kind=kernel_kind(
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
                share=share(total, window),
                kernels=[k for k, _ in sorted(o_kernels[key].items(), key=lambda kv: -kv[1])][:3],
                example_dims=op_dims(o_example.get(key)),
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

            def in_step(op: OpSpan) -> bool:
                i = bisect_right(starts, op.ts) - 1
                return i >= 0 and op.ts <= spans[i][1]

            ops = [o for o in ops if in_step(o)]
        by_thread: dict[tuple[Any, Any], list[OpSpan]] = defaultdict(list)
        for op in ops:
            by_thread[(op.pid, op.tid)].append(op)
        self_time: dict[int, float] = {}
        for lst in by_thread.values():
            lst.sort(key=lambda o: (o.ts, -o.end))
            stack: list[OpSpan] = []
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
        example: dict[tuple[str, str], OpSpan] = {}
        for op in ops:
            key = (op.name, op_label(op, ""))
            total[key] += max(self_time[id(op)], 0.0)
            count[key] += 1
            example.setdefault(key, op)
        stats = [
            OpStat(
                name=key[0],
                label=key[1],
                total_us=t,
                count=count[key],
                share=share(t, window),
                example_dims=op_dims(example[key]),
                cast=cast_dtypes(example[key]),
            )
            for key, t in total.items()
        ]
        stats.sort(key=lambda o: -o.total_us)
        return stats


def _join(key: tuple[str, str]) -> str:
    """An op key as one label: ``aten::copy_ (fp8_e4m3 -> bf16 elementwise)``."""
    return f"{key[0]} ({key[1]})" if key[1] else key[0]
