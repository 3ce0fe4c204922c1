"""Mooncake trace rows (``bench.trace_replay``): bad lines are one line naming file:line,
rows sort by timestamp, shared hash ids are shared prompt blocks, due times scale with
``--trace-speedup``."""

from __future__ import annotations

import json
import math

import pytest

from glmserve.bench.settings import BenchSettings
from glmserve.bench.trace_replay import (
    BLOCK,
    check,
    mean_rate,
    offsets,
    prompts,
    read_trace,
    resolve,
)
from glmserve.errors import ConfigError


def _write(tmp_path, *lines: str):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(line + "\n" for line in lines))
    return str(p)


def row(ts, n=1100, out=4, h=(0, 1)) -> str:
    return json.dumps({"timestamp": ts, "input_length": n, "output_length": out,
                       "hash_ids": list(h)})  # fmt: skip


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected an object"),
        (json.dumps({"timestamp": -1, "input_length": 5, "output_length": 1}), "timestamp"),
        (json.dumps({"timestamp": "1", "input_length": 5, "output_length": 1}), "timestamp"),
        (json.dumps({"timestamp": 1, "input_length": 0, "output_length": 1}), "input_length"),
        (json.dumps({"timestamp": 1, "input_length": 5, "output_length": 1.5}), "output_length"),
        (json.dumps({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [-1]}),
         "hash_ids"),
    ],
)  # fmt: skip
def test_a_bad_line_names_file_and_line(tmp_path, bad, needle):
    path = _write(tmp_path, row(0), "", bad)
    with pytest.raises(ConfigError) as e:
        read_trace(path)
    assert str(e.value).startswith(f"{path}:3: ") and needle in str(e.value)
    assert "\n" not in str(e.value)


def test_an_empty_trace_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no requests"):
        read_trace(_write(tmp_path, ""))


def test_rows_sort_and_shared_hashes_share_blocks(tmp_path):
    rows = read_trace(_write(tmp_path, row(300, h=(0, 2)), row(0, h=(0, 1)), row(100, n=700)))
    assert [r.timestamp for r in rows] == [0, 100, 300]
    a, b, c = prompts(rows, seed=0)
    assert (len(a), len(b), len(c)) == (1100, 700, 1100)
    assert a[:BLOCK] == c[:BLOCK] == b[:BLOCK]  # hash id 0
    assert a[BLOCK:700] == b[BLOCK:]  # hash id 1, cut at b's 700 tokens
    assert a[BLOCK : 2 * BLOCK] != c[BLOCK : 2 * BLOCK]  # hash 1 vs hash 2
    assert a[2 * BLOCK :] != c[2 * BLOCK :]  # each row's own tail
    assert offsets(rows, 1) == [0, 0.1, 0.3] and offsets(rows, 2) == [0, 0.05, 0.15]
    assert mean_rate(rows, 2) == pytest.approx(2 / 0.15)


@pytest.mark.parametrize("speedup", [0.0, -1.0, math.nan, math.inf, 1001.0])
def test_trace_speedup_bounds(tmp_path, speedup):
    s = BenchSettings(base_url="", dataset_name="mooncake", dataset_path=_write(tmp_path, row(0)),
                      trace_speedup=speedup)  # fmt: skip
    with pytest.raises(ConfigError, match="--trace-speedup"):
        check(s)


def test_resolve_fills_in_the_rate_rows_and_digest_and_check_refuses_a_rate(tmp_path):
    path = _write(tmp_path, row(0), row(500), row(1000))
    s = BenchSettings(base_url="", dataset_name="mooncake", dataset_path=path)
    check(s)
    r = resolve(s)
    assert s.trace_rows is None and s.request_rate is None  # a new value: s stays as given
    check(r)  # a resolved value validates again (repeats, sweeps)
    assert resolve(r) is r
    assert (r.trace_rows, r.request_rate, r.prompts_for(0, 2.0)) == (3, [2.0], 3)
    assert r.trace_sha256 and len(r.trace_sha256) == 64
    bad = BenchSettings(base_url="", dataset_name="mooncake", dataset_path=path, request_rate=[5])
    with pytest.raises(ConfigError, match="--request-rate"):
        check(bad)
    with pytest.raises(ConfigError, match="--trace-speedup replays a trace"):
        check(BenchSettings(base_url="", trace_speedup=2.0))
