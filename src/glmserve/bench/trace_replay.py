"""``glmserve bench --dataset-name mooncake --dataset-path TRACE.jsonl``: replay a Mooncake
trace on its timestamps.

Format (Mooncake FAST'25 release, ``FAST25-release/arxiv-trace/mooncake_trace.jsonl``; read
the same way by sglang 0.5.9 ``bench_serving.py`` ``get_mooncake_request_over_time``, line
1095): one JSON object a line with ``timestamp`` (ms), ``input_length``, ``output_length``
(tokens) and ``hash_ids`` (one id per 512-token block of the prompt; equal ids are the same
block, so requests sharing ids share a prefix).

Prompts are token ids: block ``h`` is 512 ids drawn from ``random.Random(f"{seed}:{h}")``
(the same block wherever it appears), the prompt is its blocks in order, cut to
``input_length`` or padded with ids of its own. Rows are sorted by timestamp (as
bench_serving does) and request i is due ``(timestamp_i - timestamp_0) / 1000 /
--trace-speedup`` seconds after the level starts (bench_serving's
``--mooncake-slowdown-factor`` is the inverse: 2 there is 0.5 here). The level is open loop:
its ``request_rate`` is the trace's mean rate, for the record; the due times are the trace's.

A bad line is one ConfigError naming ``file:line`` (exit 2), before any server is asked.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from typing import Any

from glmserve.bench.workload import TOKEN_ID_RANGE, Request, build_request, check_dataset_file
from glmserve.errors import ConfigError
from glmserve.strictjson import loads as strict_loads

MOONCAKE = "mooncake"
BLOCK = 512  # tokens per hash id in Mooncake's traces
MAX_SPEEDUP = 1000.0
MAX_TRACE_TOKENS = 20_000_000  # every prompt id built (as bench.session.MAX_PROMPT_TOKENS)
MAX_TRACE_BYTES = 256 << 20


@dataclass(frozen=True)
class TraceRow:
    timestamp: float  # ms
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def _int(obj: dict[str, Any], key: str, where: str, low: int) -> int:
    v = obj.get(key)
    if type(v) is not int or v < low:
        raise ConfigError(f"{where}: {key} must be an integer >= {low}, got {v!r}"[:200])
    return v


def read_trace(path: str) -> list[TraceRow]:
    """The trace's rows sorted by timestamp; ConfigError names ``file:line``."""
    check_dataset_file(path, MAX_TRACE_BYTES)
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_TRACE_BYTES + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--dataset-path {path}: cannot read ({exc})") from exc
    rows: list[TraceRow] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = strict_loads(line)
        except ValueError as exc:
            raise ConfigError(f"{where}: not valid JSON ({exc})"[:200]) from exc
        if not isinstance(obj, dict):
            raise ConfigError(f"{where}: expected an object with timestamp, input_length, "
                              "output_length, hash_ids")  # fmt: skip
        ts = obj.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) \
                or ts < 0:  # fmt: skip
            raise ConfigError(f"{where}: timestamp must be a number of ms >= 0, got {ts!r}"[:200])
        hashes = obj.get("hash_ids", [])
        if not isinstance(hashes, list) or any(type(h) is not int or h < 0 for h in hashes):
            raise ConfigError(f"{where}: hash_ids must be a list of integers >= 0")
        rows.append(TraceRow(float(ts), _int(obj, "input_length", where, 1),
                             _int(obj, "output_length", where, 1), tuple(hashes)))  # fmt: skip
    if not rows:
        raise ConfigError(f"--dataset-path {path}: no requests in the trace")
    rows.sort(key=lambda r: r.timestamp)  # stable: equal stamps keep the file's order
    total = sum(r.input_length for r in rows)
    if total > MAX_TRACE_TOKENS:
        raise ConfigError(f"--dataset-path {path}: {total:,} prompt tokens to build; at most "
                          f"{MAX_TRACE_TOKENS:,}")  # fmt: skip
    return rows


def offsets(rows: list[TraceRow], speedup: float) -> list[float]:
    """Due times, s after the level's start, of each (sorted) row at ``speedup``."""
    t0 = rows[0].timestamp
    return [(r.timestamp - t0) / 1000.0 / speedup for r in rows]


def mean_rate(rows: list[TraceRow], speedup: float) -> float:
    """Requests per second over the replay (inf for a trace whose stamps are all equal)."""
    span = offsets(rows, speedup)[-1]
    return (len(rows) - 1) / span if span > 0 else math.inf


def prompts(rows: list[TraceRow], seed: int) -> list[list[int]]:
    """Token-id prompts: shared blocks for shared hash ids (see the module docstring)."""
    lo, hi = TOKEN_ID_RANGE
    blocks: dict[int, list[int]] = {}
    out = []
    for i, r in enumerate(rows):
        ids: list[int] = []
        for h in r.hash_ids:
            if len(ids) >= r.input_length:
                break
            if h not in blocks:
                rng = random.Random(f"{seed}:{h}")
                blocks[h] = [rng.randrange(lo, hi) for _ in range(BLOCK)]
            ids += blocks[h]
        if len(ids) < r.input_length:
            rng = random.Random(f"{seed}:row:{i}")
            ids += [rng.randrange(lo, hi) for _ in range(r.input_length - len(ids))]
        out.append(ids[: r.input_length])
    return out


def check(s: Any) -> None:
    """Check the trace (read whole: a bad line is named here, before any load) and the flags
    beside it. Changes nothing; a settings value already resolved passes again."""
    if not math.isfinite(s.trace_speedup) or not 0 < s.trace_speedup <= MAX_SPEEDUP:
        raise ConfigError(f"--trace-speedup must be > 0 and at most {MAX_SPEEDUP:g}, got "
                          f"{s.trace_speedup}")  # fmt: skip
    if s.dataset_name != MOONCAKE:
        if s.trace_speedup != 1.0:
            raise ConfigError(f"--trace-speedup replays a trace: give --dataset-name {MOONCAKE} "
                              "--dataset-path TRACE.jsonl")  # fmt: skip
        return
    if not s.dataset_path:
        raise ConfigError(f"--dataset-name {MOONCAKE} needs --dataset-path TRACE.jsonl "
                          "(none is downloaded)")  # fmt: skip
    if s.trace_rows is None:
        for flag, v in (("--request-rate", s.request_rate), ("--rate-sweep", s.rate_sweep),
                        ("--num-prompts", s.num_prompts), ("--duration", s.duration)):  # fmt: skip
            if v is not None:
                raise ConfigError(f"{flag}: a trace replay sends every row at its timestamp")
    read_trace(s.dataset_path)


def resolve(s: Any) -> Any:
    """The settings (a frozen ``BenchSettings``) with the trace's rows, digest and mean rate
    (for the record) filled in; unchanged when no trace is replayed or it is done already."""
    if s.dataset_name != MOONCAKE or s.trace_rows is not None:
        return s
    from glmserve.bench.workload import dataset_digest

    rows = read_trace(s.dataset_path)
    return dataclasses.replace(
        s, trace_rows=len(rows), trace_sha256=dataset_digest(s.dataset_path),
        request_rate=[mean_rate(rows, s.trace_speedup)],
    )  # fmt: skip


def requests(s: Any, model: str, tok: Any = None) -> list[Request]:
    rows = read_trace(s.dataset_path)
    return [build_request(s.api, p, r.output_length, model, tok)
            for p, r in zip(prompts(rows, s.seed), rows, strict=True)]  # fmt: skip


def arrivals(s: Any) -> list[float]:
    return offsets(read_trace(s.dataset_path), s.trace_speedup)
