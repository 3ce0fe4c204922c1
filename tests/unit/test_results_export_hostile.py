"""``glmserve results`` against an adversarial user: group options that were silently ignored
by ``export``/``show``, CSV cells a spreadsheet would run as formulas, labels that a ``;`` join
made ambiguous, columns the CSV lacked, non-finite numbers written without the promised
warning, and empty filter values that matched everything."""

from __future__ import annotations

import csv
import io
import json

import pytest
from test_bench_cli import run_cli

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
