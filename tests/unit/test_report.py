"""report: stored sweeps/runs -> self-contained HTML with inline SVG charts, PNGs."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from tests.fixtures.report import bench_pair, three_profile_sweep

from glmserve.report import (
    ReportData,
    chart_specs,
    load_report_data,
    render_html,
    series_from_run,
    write_pngs,
)
from glmserve.sweep.state import OK, save_sweep


class _Counter(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.chart: str | None = None
        self.counts: dict[str, dict[str, int]] = {}
        self.urls: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]
        if tag == "svg" and "data-chart" in a:
            self.chart = a["data-chart"]
            self.counts[self.chart] = {"rect": 0, "circle": 0}
        if self.chart and tag in ("rect", "circle") and "data-value" in a:
            self.counts[self.chart][tag] += 1

    def handle_endtag(self, tag):
        if tag == "svg":
            self.chart = None


def test_html_is_self_contained_and_every_chart_has_its_data():
    sw = three_profile_sweep()
    from glmserve.report import series_from_sweep, with_speedups

    data = ReportData("t", [sw.sweep_id], with_speedups(series_from_sweep(sw)))
    page = render_html(data)
    p = _Counter()
    p.feed(page)
    assert (
        not p.urls
        and "script" not in p.tags
        and "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    )
    ok = [e for e in sw.entries if e.status == OK]
    assert p.counts["decode-tok-s"]["rect"] == len(ok)
    assert p.counts["throughput"]["circle"] == sum(len(e.aggregate_tok_s()) for e in ok)
    assert p.counts["latency-ttft"]["rect"] == 3 * len(ok)
    assert p.counts["latency-itl"]["rect"] == 3 * len(ok)
    bars = re.findall(r'data-chart="decode-tok-s".*?</svg>', page, re.S)[0]
    assert 'data-group="cutlass_mla" data-series="decode tok/s" data-value="41"' in bars
    assert "UNSUPPORTED_ARCH" in page and "SM100 only" in page
    assert "GEMM kernels take 55% of decode" in page
    assert re.search(r"cutlass_mla</td>.*?2\.97x", page)


def test_chart_without_data_says_so_instead_of_drawing_an_empty_axis():
    sw = three_profile_sweep()
    for e in sw.entries:
        e.bench = [b for b in e.bench if b["mode"] == "decode"]
    from glmserve.report import series_from_sweep

    page = render_html(ReportData("t", ["x"], series_from_sweep(sw)))
    assert '<p class="no-data" data-chart="throughput">' in page
    assert 'svg class="chart" data-chart="decode-tok-s"' in page


def test_report_of_an_ambiguous_run_prefix_says_ambiguous():
    """A prefix of two runs was reported as "neither a sweep nor a run nor a bench result
    id", a false message for an id that names two runs."""
    from glmserve.errors import RunNotFound
    from glmserve.store import RunRecord, RunStore

    with RunStore.open() as store:
        for rid in ("7a289e95", "7a000000"):
            store.add_run(
                RunRecord(
                    run_id=rid, host="local", profile="p", port=1, run_dir="/tmp/x", state="READY"
                )
            )
    with pytest.raises(RunNotFound, match="ambiguous"):
        load_report_data(["7a"])


def test_report_loads_stored_sweeps_and_runs_and_rejects_unknown_ids():
    from glmserve.store import RunRecord, RunStore

    sw = three_profile_sweep()
    save_sweep(sw)
    with RunStore.open() as store:
        store.add_run(
            RunRecord(
                run_id="run-abc",
                host="local",
                profile="trtllm_mla",
                port=1,
                run_dir="/tmp/x",
                state="READY",
            )
        )
        for b in bench_pair(50.0):
            store.add_bench_result("run-abc", b)
    data = load_report_data([sw.sweep_id, "run-abc"])
    assert [s.name for s in data.series][-1] == "trtllm_mla (run-abc)"
    assert data.series[-1].decode_tok_s == pytest.approx(50.0)
    assert data.series[-1].throughput == {1: 45.0, 4: 180.0, 16: 720.0}
    from glmserve.errors import RunNotFound

    with pytest.raises(RunNotFound, match="neither a sweep nor a run"):
        load_report_data(["nope"])


def test_run_series_carries_its_latest_profiler_findings():
    run = {"run_id": "r1", "profile": "flashinfer", "state": "READY"}
    s = series_from_run(run, bench_pair(10.0), {"findings": [{"message": "cast takes 60%"}]})
    assert s.findings == ["cast takes 60%"] and s.status == OK


def test_run_without_bench_is_listed_with_its_crash():
    s = series_from_run(
        {
            "run_id": "r9",
            "profile": "trtllm_mla",
            "state": "CRASHED",
            "category": "OOM",
            "root_cause": "CUDA out of memory",
        },
        [],
    )
    assert (s.status, s.diagnosis, s.decode_tok_s) == ("crashed", "OOM: CUDA out of memory", None)


def test_pngs_one_per_chart_with_data(tmp_path):
    pytest.importorskip("matplotlib")
    from glmserve.report import series_from_sweep

    data = ReportData("t", ["x"], series_from_sweep(three_profile_sweep()))
    paths = write_pngs(data, tmp_path / "png")
    assert sorted(p.name for p in paths) == sorted(f"{s['chart']}.png" for s in chart_specs(data))
    assert all(
        p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 2000 for p in paths
    )
