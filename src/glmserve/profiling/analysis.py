"""Where the decode step goes, across a capture's trace files (``glmserve profile PATH``).

    trace files ─► trace.iter_trace ─► accumulate.TraceAccumulator (per rank) -> RankProfile
    [RankProfile, ...] ─► findings.find_bottlenecks -> [Finding]   (patterns -> advice)

Reading the files is the only I/O; everything after it is pure. ``summarize_analysis`` is the
part of an analysis the run store keeps, under the ``PROFILED_EVENT`` event.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from glmserve.errors import TraceFormatError
from glmserve.paths import require_regular_file
from glmserve.profiling.accumulate import TraceAccumulator
from glmserve.profiling.events import as_int
from glmserve.profiling.findings import find_bottlenecks
from glmserve.profiling.results import RankProfile, TraceAnalysis
from glmserve.profiling.trace import TraceFile
from glmserve.profiling.tracefiles import (
    find_trace_files,
    name_label,
    newest_capture,
    rank_of,
    select_trace_files,
)

PROFILED_EVENT = "PROFILED"  # run-store event holding summarize_analysis() of a capture
# SGLang's ProfileMerger prefixes every pid with the file's ranks: "[TP00-DP01] 1234".
_MERGED_PID = re.compile(r"^\[([A-Z]+\d+(?:-[A-Z]+\d+)*)\]\s*(.*)$")


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
        skipped = sum(a.skipped for a in router.by_label.values())
        why = (
            f" ({skipped} event(s) skipped: ts/dur missing, not a number, negative or out "
            "of range)"
            if skipped
            else ""
        )
        raise TraceFormatError(
            f"{trace.path}: no profiler events (GPU kernels or CPU ops) in this trace{why}"
        )
    profiles = []
    for i, acc in enumerate(sorted(accs, key=lambda a: a.label)):
        acc.set_metadata(trace.metadata)
        if acc.label:  # merged trace: "TP01-DP00"
            m = re.search(r"TP(\d+)", acc.label)
            tp = as_int(m.group(1)) if m else None
            acc.rank = tp if tp is not None else i
        else:
            rank = rank_of(trace.path, trace.metadata)
            acc.rank = rank if rank is not None else fallback_rank
            acc.label = name_label(trace.path.name)
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
    if not path.is_dir():  # a FIFO or device would hang the reader or never end
        require_regular_file(path, "trace file", missing="no such trace file or directory")
    files = select_trace_files(find_trace_files(path)) if path.is_dir() else [path]
    if not files:
        raise TraceFormatError(f"{path}: no *.trace.json[.gz] / *.json[.gz] files in it")
    files, note = newest_capture(files)
    analysis = analyze_traces(files, steps_hint=steps_hint)
    if note:
        for r in analysis.ranks:
            r.notes.append(note)
    return analysis


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
