"""Which trace files make one capture, and which rank each file is.

``glmserve profile DIR`` is pointed at folders SGLang (or kineto, or HTA) wrote: one
``[prefix-]{profile_id}-TP-{r}[-DP-..][-STAGE].trace.json.gz`` per rank, maybe several captures,
``-EXTEND``/``-DECODE`` stage files and a ``merged-*`` file repeating the others. The file
names are what says which files belong together and which rank each one is.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from glmserve.profiling.events import as_int

_RANK_IN_NAME = re.compile(r"(?:^|[-_.])TP-?(\d+)(?=[-_.]|$)")
_RANK_WORD_IN_NAME = re.compile(r"(?:^|[-_.])rank[-_]?(\d+)(?=[-_.]|$)", re.I)  # HTA, DDP


def find_trace_files(directory: Path) -> list[Path]:
    """Trace files under a directory: ``*.trace.json[.gz]`` (SGLang, kineto) when there are
    any, else every ``*.json[.gz]`` (HTA-style ``rank0.json.gz``)."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and _is_trace_name(p.name))
    named = [p for p in files if ".trace.json" in p.name]
    return named or files


def _is_trace_name(name: str) -> bool:
    return name.endswith((".json.gz", ".json"))


def select_trace_files(files: list[Path]) -> list[Path]:
    """The files that describe decode, one per rank: SGLang's ``-DECODE`` stage files when
    ``profile_by_stage`` also wrote ``-EXTEND`` ones, and per-rank files over the
    ``merged-*`` file that repeats them."""
    decode = [f for f in files if "-DECODE" in f.name]
    if decode:
        files = decode
    per_rank = [f for f in files if not f.name.startswith("merged-")]
    return per_rank or files


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


def _capture_of(path: Path) -> str | None:
    """SGLang names a capture's files ``[prefix-]{profile_id}-TP-{r}[-DP-..][-STAGE]``: the
    part before ``TP-{r}`` (with the folder) is the capture; None for other names."""
    m = _RANK_IN_NAME.search(path.name)
    return str(path.parent / path.name[: m.start()]) if m else None


def rank_of(path: Path, metadata: dict[str, Any]) -> int | None:
    """Rank from SGLang's file name (``-TP-{r}``), else ``distributedInfo.rank``, else a
    ``rank-N`` name; None when the file says nothing (the caller numbers it by order: a
    real rank 0 must not read as "no rank")."""
    m = _RANK_IN_NAME.search(path.name)
    if m:
        return int(m.group(1))
    info = metadata.get("distributedInfo")
    if isinstance(info, dict) and as_int(info.get("rank")) is not None:
        return as_int(info.get("rank"))
    m = _RANK_WORD_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def name_label(name: str) -> str:
    """``1712-TP-1-DP-0-DECODE.trace.json.gz`` -> ``TP-1-DP-0`` (SGLang's rank parts)."""
    return "-".join(m.group(0) for m in re.finditer(r"(?<![A-Za-z])(TP|DP|PP|EP)-\d+", name))
