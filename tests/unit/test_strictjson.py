"""The strict-JSON belt behind the input checks (``--json``, the store never hold NaN or
Infinity), and stored result ids beyond SQLite's int64 (were OverflowError, exit 70)."""

from __future__ import annotations

import json
import math

import pytest
from tests.fixtures.cli import run_cli

from glmserve.errors import RunNotFound
from glmserve.store import RunStore
from glmserve.strictjson import dumps, finite_copy


def _one_line_usage_error(code: int, err: str, text: str) -> None:
    assert code == 2, err
    assert text in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


# -- 6: ids beyond SQLite's INTEGER ------------------------------------------------------


@pytest.mark.parametrize("verb", [["results", "show"], ["compare"]])
def test_result_id_beyond_int64_is_not_found(capsys, verb):
    big = "99999999999999999999999"
    code, _, err = run_cli(capsys, *verb, big)
    _one_line_usage_error(code, err, f"no bench result {big}")
    assert "glmserve results" in err  # not `glmserve runs`, which lists no results


def test_store_refuses_ids_outside_int64_as_not_found():
    with RunStore.open() as store, pytest.raises(RunNotFound):
        store.get_bench_result(2**63)
    with RunStore.open() as store, pytest.raises(RunNotFound):
        store.get_bench_result(-(2**63) - 1)


# -- the strict JSON belt ------------------------------------------------------------------


def test_strict_dumps_writes_null_for_non_finite_and_names_the_path():
    text, bad = dumps({"a": [1.0, math.nan], "b": {"c": math.inf}, "d": "inf"})
    assert json.loads(text) == {"a": [1.0, None], "b": {"c": None}, "d": "inf"}
    assert bad == ["$.a[1]", "$.b.c"]
    assert "NaN" not in text and "Infinity" not in text
    assert dumps({"x": 1.5}) == ('{"x": 1.5}', [])
    assert finite_copy((1.0, -math.inf)) == ([1.0, None], ["$[1]"])


def test_emit_json_is_strict_and_warns(capsys):
    from glmserve.cli._app import emit_json

    emit_json({"ok": 1, "slo": {"ttft_ms": math.nan}})
    cap = capsys.readouterr()
    assert json.loads(cap.out) == {"ok": 1, "slo": {"ttft_ms": None}}
    assert "NaN" not in cap.out and "$.slo.ttft_ms" in cap.err


def test_store_writes_strict_json():
    with RunStore.open() as store:
        rid = store.add_bench_result(None, {"version": 1, "x": math.nan}, {"y": math.inf})
        raw = store.db.execute(
            "SELECT result, meta FROM bench_results WHERE id = ?", (rid,)
        ).fetchone()
    assert "NaN" not in raw[0] and "Infinity" not in raw[1]
    assert json.loads(raw[0])["x"] is None and json.loads(raw[1])["y"] is None
