"""Issue 14 #3: ``glmserve results`` list / filters / show / export, labels given at bench
time, ``--version``; and the bench table at 80 columns (#5)."""

from __future__ import annotations

import csv
import io
import json

from rich.console import Console
from tests.fixtures.bench_levels import level_with
from tests.fixtures.cli import bench_json, run_cli

from glmserve.bench.metrics import StreamRecord
from glmserve.bench.results import BenchResult, summarize_level
from glmserve.cli.views import render_table


def test_labels_at_bench_time_filter_list_show_and_export(capsys, fake, tmp_path):
    fake.n_tokens, fake.itl = 8, 0.002
    _, a, _ = bench_json(capsys, fake, "--label", "team=infra", "--label", "gpu=h200")
    _, b, _ = bench_json(capsys, fake, "--label", "team=research")
    assert a["meta"]["labels"] == {"team": "infra", "gpu": "h200"}

    code, out, _ = run_cli(capsys, "results", "--json")
    assert code == 0 and [r["id"] for r in json.loads(out)] == [b["id"], a["id"]]
    code, out, _ = run_cli(capsys, "results", "--label", "team=infra", "--json")
    rows = json.loads(out)
    assert [r["id"] for r in rows] == [a["id"]]
    assert rows[0]["comparable"]["settings"]["output_len"] == 8
    code, out, _ = run_cli(capsys, "results", "--label", "team=nobody", "--json")
    assert json.loads(out) == []
    code, out, _ = run_cli(capsys, "results")
    assert code == 0 and "team=research" in out and "decode" in out

    code, out, _ = run_cli(capsys, "results", "show", str(a["id"]))
    assert code == 0 and "labels: team=infra, gpu=h200" in out and "output_len=8" in out
    code, out, _ = run_cli(capsys, "results", "show", str(a["id"]), "--json")
    assert json.loads(out)["decode_tok_s"] == a["decode_tok_s"]
    assert run_cli(capsys, "results", "show", "999")[0] == 2

    code, out, _ = run_cli(capsys, "results", "export", "--format", "csv")
    table = list(csv.DictReader(io.StringIO(out)))
    assert [int(r["id"]) for r in table] == [b["id"], a["id"]]  # one level each
    assert float(table[1]["ttft_ms_p95"]) > 0
    assert json.loads(table[1]["labels"]) == {"team": "infra", "gpu": "h200"}
    # the fields `bench --json` stores beside the figures (bench_json passes --warmup 0)
    assert table[1]["seed"] == "0" and table[1]["warmup"] == "0" and table[1]["stopped"] == ""
    assert int(table[1]["input_tokens"]) > 0 and table[1]["tokens_estimated"] == "False"
    code, out, _ = run_cli(capsys, "results", "export", "--format", "jsonl", "--label", "gpu=h200")
    lines = out.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["id"] == a["id"]
    dest = tmp_path / "all.json"
    code, _, _ = run_cli(capsys, "results", "export", "--format", "json", "--output", str(dest))
    assert code == 0 and len(json.loads(dest.read_text())) == 2
    assert run_cli(capsys, "results", "export", "--format", "xml")[0] == 2
    assert run_cli(capsys, "bench", "--url", fake.url, "--label", "novalue")[0] == 2


def test_version_flag(capsys):
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.startswith("glmserve ")


def _result(levels: list[int]) -> BenchResult:
    lvs = []
    for c in levels:
        recs = [StreamRecord(dispatch=0.0, send=0.0, chunk_times=[0.1 * (i + 1) for i in range(9)],
                             chunk_tokens=list(range(1, 10)), completion_tokens=9, end=0.9)
                for _ in range(c)]  # fmt: skip
        lvs.append(summarize_level(recs, c, 1, {}, None))
    return BenchResult(mode="concurrency", complete=True, levels=lvs)


def test_bench_table_fits_80_columns_and_wide_shows_all():
    res = _result([1, 64, 2048])
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(render_table(res, width=80))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "conc" in text and "output tok/s" in text and "TTFT" in text
    assert "--wide shows all" in text
    wide = Console(width=400, record=True, file=io.StringIO())
    wide.print(render_table(res, wide=True))
    all_cols = wide.export_text()
    assert "queue ms p50" in all_cols and "server tok/s" in all_cols


def _row(rid: int, levels: list[int], output_len: int = 16, speed: float | None = 10.0) -> dict:
    lvs = [{"concurrency": c, "output_tok_s": 100.0 * c, "decode_tok_s": {"p50": 50.0},
            "ttft_ms": {"p50": 10.0}} for c in levels]  # fmt: skip
    return {
        "id": rid,
        "run_id": None,
        "result": {"mode": "concurrency", "levels": lvs, "complete": True,
                   "settings": {"mode": "concurrency", "api": "native", "input_len": 32,
                                "output_len": output_len, "concurrency": levels},
                   "server": {"sim_speed": speed}},
        "meta": {},
    }  # fmt: skip


def test_compare_flags_concurrency_sets_and_output_lengths():
    from glmserve.bench.compare import compare_notes, compare_results

    table = compare_results([_row(1, [1, 4]), _row(2, [1, 4, 64]), _row(3, [1, 4], 32)])
    r2, r3 = table["rows"][1], table["rows"][2]
    assert r2["comparable"] and r2["levels"]["4"]["speedup"] == 1.0
    assert r2["levels"]["64"]["speedup"] is None  # not measured by the baseline
    assert r2["notes"] == ["levels 1,4,64 vs baseline 1,4: speedups only at shared levels"]
    assert not r3["comparable"] and r3["levels"]["4"]["speedup"] is None
    notes = compare_notes(table)
    assert any("result 3 is NOT comparable" in n and "output_len 32 vs 16" in n for n in notes)
    real = compare_results([_row(1, [1]), _row(2, [1], speed=None)])["rows"][1]
    assert real["incomparable"] == [{"field": "simulated", "baseline": True, "value": False}]


def _text(res: BenchResult, width: int, wide: bool = False) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(render_table(res, wide=wide, width=width))
    return console.export_text()


def test_80_column_table_keeps_ok_err_when_requests_failed():
    lvs = [level_with(c, 12, 4) for c in (1, 64, 2048)]
    for lv in lvs:  # a loaded server: latencies of seconds fill the first columns
        lv["ttft_ms"] = {k: 12345.6 for k in lv["ttft_ms"]}
        lv["tpot_ms"] = {k: 123.45 for k in lv["tpot_ms"]}
        lv["output_tok_s"] = 123456.7
    res = BenchResult(mode="concurrency", complete=False, levels=lvs, stopped="12 of 48 failed")
    text = _text(res, 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "ok/err" in text and "12/4" in text


def test_wide_shows_every_figure_untruncated_even_at_80_columns():
    res = BenchResult(mode="concurrency", complete=True, levels=[level_with(8, 16, 0)])
    text = _text(res, 80, wide=True)
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    figures = ("input tok/s", "total tok/s", "output tok/s full", "max conc seen", "TTFT ms p95",
               "TTFT ms mean", "TTFT ms std", "E2E ms p99", "queue ms p90")  # fmt: skip
    for figure in figures:
        assert figure in text, figure
    lv = res.levels[0]
    assert f"{lv['ttft_ms']['std']:,.1f}" in text and f"{lv['input_tok_s']:,.1f}" in text


def test_custom_percentiles_are_shown_and_exported(capsys):
    from glmserve.cli.results_cmds import export_text
    from glmserve.store import RunStore

    lv = level_with(8, 16, 0, percentiles=[50, 99.9])
    res = BenchResult(mode="concurrency", complete=True, levels=[lv])
    narrow = _text(res, 120)
    assert "TTFT ms p50/99.9" in narrow and "/-" not in narrow
    assert "TTFT ms p99.9" in _text(res, 400, wide=True)
    with RunStore.open() as store:
        store.add_bench_result(None, res.to_dict())
        rows = store.list_bench_results()
    text, bad = export_text(rows, "csv")
    table = list(csv.DictReader(io.StringIO(text)))
    assert bad == []
    assert float(table[0]["ttft_ms_p99.9"]) == lv["ttft_ms"]["p99.9"]
