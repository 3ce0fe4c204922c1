"""``glmserve results`` against an adversarial user: group options that were silently ignored
by ``export``/``show``, CSV cells a spreadsheet would run as formulas, labels that a ``;`` join
made ambiguous, columns the CSV lacked, non-finite numbers written without the promised
warning, and empty filter values that matched everything."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from tests.fixtures.cli import run_cli

from glmserve.bench.results import BenchResult
from glmserve.store import RunStore


def _one_line_usage_error(code: int, err: str, text: str) -> None:
    assert code == 2, err
    assert text in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def _level(c: int = 1, **extra: object) -> dict:
    return {"concurrency": c, "requests": 4, "completed": 4, "errors": 0, "output_tokens": 32,
            "output_tok_s": 100.0, "input_tokens": 128, "good_requests": 3,
            "tokens_estimated": False, "ttft_ms": {"p50": 10.0}, **extra}  # fmt: skip


def _store(labels: dict | None = None, profile: str | None = None, **kw: object) -> int:
    res = BenchResult(
        mode=str(kw.pop("mode", "decode")),
        complete=bool(kw.pop("complete", True)),
        levels=kw.pop("levels", [_level()]),  # type: ignore[arg-type]
        meta={"labels": labels or {}, "profile": profile},
        **kw,  # type: ignore[arg-type]
    )
    with RunStore.open() as store:
        return store.add_bench_result(None, res.to_dict())


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


# -- 1: the group's options reach its subcommands, or are refused ---------------------------


def test_group_filters_select_what_export_writes(capsys):
    infra = _store({"team": "infra", "gpu": "h200"}, profile="fi")
    research = _store({"team": "research"}, profile="fa3")

    code, out, _ = run_cli(capsys, "results", "--profile", "nomatch", "export", "--format", "json")
    assert code == 0 and json.loads(out) == []
    code, out, _ = run_cli(
        capsys, "results", "--label", "team=infra", "export", "--format", "jsonl"
    )
    assert [json.loads(line)["id"] for line in out.splitlines()] == [infra]
    code, out, _ = run_cli(capsys, "results", "--profile", "fa3", "export")
    assert code == 0 and [int(r["id"]) for r in _csv(out)] == [research]
    # before and after `export` combine, as the filters of one list do
    code, out, _ = run_cli(
        capsys, "results", "--label", "team=infra", "export", "--format", "json",
        "--label", "gpu=h200", "--profile", "fi",
    )  # fmt: skip
    assert [r["id"] for r in json.loads(out)] == [infra]
    code, out, _ = run_cli(capsys, "results", "--last", "1", "export", "--last", "1")
    assert code == 0 and [int(r["id"]) for r in _csv(out)] == [research]


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--profile", "fi", "export", "--profile", "fa3"], "--profile"),
        (["--last", "1", "export", "--last", "2"], "--last"),
        (["--label", "team=infra", "export", "--label", "team=research"], "team"),
    ],
)
def test_a_filter_given_before_and_after_export_with_two_values_is_refused(capsys, args, flag):
    _store({"team": "infra"}, profile="fi")
    code, _, err = run_cli(capsys, "results", *args)
    _one_line_usage_error(code, err, flag)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--label", "bad", "show", "{id}"], "--label"),
        (["--label", "team=infra", "show", "{id}"], "--label"),
        (["--profile", "fi", "show", "{id}"], "--profile"),
        (["--run", "r-1", "show", "{id}"], "--run"),
        (["--mode", "decode", "show", "{id}"], "--mode"),
        (["--last", "1", "show", "{id}"], "--last"),
        (["--json", "export"], "--json"),
    ],
)
def test_group_options_a_subcommand_cannot_use_are_refused(capsys, args, flag):
    rid = _store({"team": "infra"}, profile="fi")
    code, out, err = run_cli(capsys, "results", *[a.replace("{id}", str(rid)) for a in args])
    _one_line_usage_error(code, err, flag)
    assert out == ""


def test_group_json_before_show_is_shows_json(capsys):
    rid = _store({"team": "infra"})
    code, out, _ = run_cli(capsys, "results", "--json", "show", str(rid))
    assert code == 0 and json.loads(out)["id"] == rid


# -- 2: CSV cells a spreadsheet would evaluate, ambiguous labels, missing columns -----------


def test_csv_neutralises_formulas_but_keeps_numbers(capsys):
    _store(
        {"f": "=1+1", "a": "x;b=y"},
        profile="@SUM(A1)",
        settings={"dataset_path": "=cmd|' /C calc'!A0", "api": "+native", "mode": "\tdecode"},
        levels=[_level(output_tok_s=-1.5, window_kind="-steady", stopped="\rlevel")],
    )
    code, out, _ = run_cli(capsys, "results", "export")
    assert code == 0
    row = _csv(out)[0]
    assert row["dataset_path"] == "'=cmd|' /C calc'!A0"
    assert row["profile"] == "'@SUM(A1)"
    assert row["api"] == "'+native" and row["window_kind"] == "'-steady"
    assert row["output_tok_s"] == "-1.5"  # a number stays a number
    assert json.loads(row["labels"]) == {"f": "=1+1", "a": "x;b=y"}  # one label, not two


def test_csv_has_every_stored_field_a_reader_needs(capsys):
    _store(
        {"team": "infra"},
        settings={"seed": 7, "warmup": 2, "slo": {"ttft_ms": 200.0}},
        notes=["level 64 never had 64 streams in flight"],
        levels=[_level(tokens_estimated=True)],
    )
    code, out, _ = run_cli(capsys, "results", "export")
    assert code == 0
    row = _csv(out)[0]
    assert row["seed"] == "7" and row["warmup"] == "2"
    assert json.loads(row["slo"]) == {"ttft_ms": 200.0}
    assert json.loads(row["notes"]) == ["level 64 never had 64 streams in flight"]
    assert row["input_tokens"] == "128" and row["good_requests"] == "3"
    assert row["tokens_estimated"] == "True" and row["stopped"] == ""


def test_an_interrupted_result_without_levels_is_one_row(capsys):
    _store({"team": "infra"}, complete=False, stopped="interrupted (Ctrl-C or SIGTERM)", levels=[])
    code, out, _ = run_cli(capsys, "results", "export")
    rows = _csv(out)
    assert code == 0 and len(rows) == 1
    assert rows[0]["complete"] == "False"
    assert rows[0]["stopped"] == "interrupted (Ctrl-C or SIGTERM)"
    assert rows[0]["concurrency"] == "" and json.loads(rows[0]["labels"]) == {"team": "infra"}


# -- 3: non-finite numbers: null (JSON) or an empty cell (CSV), and a warning --------------


def _store_non_finite() -> int:
    """A row as an older glmserve stored it (json.dumps wrote Infinity/NaN before strictjson)."""
    res = BenchResult(mode="decode", complete=True, levels=[_level()]).to_dict()
    res["levels"][0]["output_tok_s"] = math.inf
    res["levels"][0]["ttft_ms"]["p50"] = math.nan
    with RunStore.open() as store, store.db:
        cur = store.db.execute(
            "INSERT INTO bench_results (run_id, created_at, result, meta) VALUES (?, ?, ?, ?)",
            (None, 0.0, json.dumps(res), "{}"),
        )
    return int(cur.lastrowid or 0)


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_json_export_of_non_finite_numbers_warns(capsys, fmt):
    _store_non_finite()
    code, out, err = run_cli(capsys, "results", "export", "--format", fmt)
    assert code == 0 and "Infinity" not in out and "NaN" not in out
    doc = json.loads(out) if fmt == "json" else [json.loads(line) for line in out.splitlines()]
    assert doc[0]["levels"][0]["output_tok_s"] is None
    assert "warning: non-finite number(s) written as null" in err
    assert "levels[0].output_tok_s" in err and "levels[0].ttft_ms.p50" in err


def test_csv_export_of_non_finite_numbers_writes_empty_cells_and_warns(capsys, tmp_path):
    rid = _store_non_finite()
    dest = tmp_path / "r.csv"
    code, _, err = run_cli(capsys, "results", "export", "--output", str(dest))
    row = _csv(dest.read_text())[0]
    assert code == 0 and row["output_tok_s"] == "" and row["ttft_ms_p50"] == ""
    assert "inf" not in dest.read_text() and "nan" not in dest.read_text()
    assert "warning: non-finite number(s)" in err
    assert f"result {rid} output_tok_s" in err and f"result {rid} ttft_ms_p50" in err


def test_csv_names_a_non_finite_number_inside_a_json_cell():
    from glmserve.cli.results_cmds import export_text

    settings = {"slo": {"ttft_ms": math.inf}}
    result = {"mode": "rate", "levels": [], "settings": settings}
    row = {"id": 9, "run_id": None, "created_at": 0.0, "meta": {}, "result": result}
    text, bad = export_text([row], "csv")
    assert json.loads(_csv(text)[0]["slo"]) == {"ttft_ms": None}
    assert bad == ["result 9 slo.ttft_ms"]


# -- 4: an empty filter value matches nothing a user meant -------------------------------


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--run", ""], "--run"),
        (["--run", " "], "--run"),
        (["--profile", ""], "--profile"),
        (["--run", "", "export"], "--run"),
        (["export", "--profile", ""], "--profile"),
        (["--label", ""], "--label"),
        (["--mode", ""], "--mode"),
    ],
)
def test_empty_filter_values_are_refused(capsys, args, flag):
    _store({"team": "infra"}, profile="fi")
    code, out, err = run_cli(capsys, "results", *args)
    _one_line_usage_error(code, err, flag)
    assert out == ""
