"""Issue 14 #5, pure parts: consistent tick labels, flag maps, the flag diff."""

from __future__ import annotations

import pytest

from glmserve.report import ReportSeries, flag_diff, flag_map, tick_labels


def test_tick_labels_share_their_decimals():
    assert tick_labels(2.5) == ["0.000", "0.625", "1.250", "1.875", "2.500"]
    assert tick_labels(20.0) == ["0", "5", "10", "15", "20"]
    assert tick_labels(2.0) == ["0.0", "0.5", "1.0", "1.5", "2.0"]
    assert tick_labels(5000.0) == ["0", "1,250", "2,500", "3,750", "5,000"]


def test_flag_map_and_diff():
    assert flag_map(["python", "-m", "x", "--a", "1", "--b", "--c=3"]) == {
        "--a": "1", "--b": "(set)", "--c": "3"}  # fmt: skip
    s1 = ReportSeries("one", "ok", argv=["--tp-size", "8", "--x", "1"])
    s2 = ReportSeries("two", "ok", argv=["--tp-size", "8", "--x", "2", "--y"])
    s3 = ReportSeries("three", "ok")  # argv unknown: left out
    differing, maps = flag_diff([s1, s2, s3])
    assert differing == ["--x", "--y"]
    assert list(maps) == ["one", "two"]


def test_run_report_metadata_names_result_ids_and_flag_diff():
    import re

    from glmserve.report import ReportData, render_html, series_from_run, with_speedups

    def bench_row(rid: int, tok_s: float) -> dict:
        res = {"mode": "decode", "decode_tok_s": tok_s, "complete": True, "levels": [],
               "settings": {"mode": "decode", "api": "native", "input_len": 128,
                            "output_len": 256},
               "server": {"version": "0.5.9"},
               "meta": {"sglang_version": "0.5.9", "host": "gpu1",
                        "gpus": ["NVIDIA H200, 143771 MiB, 570.86"] * 2}}  # fmt: skip
        return {"id": rid, "run_id": f"r{rid}", "created_at": 1764583200.0, "result": res,
                "meta": {"labels": {"team": "infra"}}}  # fmt: skip

    runs = [
        ({"run_id": "r1", "profile": "a", "state": "READY",
          "spec": {"command": ["python3", "-m", "sglang.launch_server", "--tp-size", "2"]}},
         [bench_row(7, 10.0)]),
        ({"run_id": "r2", "profile": "b", "state": "READY",
          "spec": {"command": ["python3", "-m", "sglang.launch_server", "--tp-size", "2",
                               "--enable-torch-compile"]}},
         [bench_row(8, 12.0)]),
    ]  # fmt: skip
    series = with_speedups([series_from_run(run, rows) for run, rows in runs])
    page = render_html(ReportData(title="t", sources=["r1", "r2"], series=series))
    meta = page[page.index('<section id="metadata">') : page.index("</section>")]
    cells = re.findall(r"<td>(.*?)</td>", meta)
    assert "7" in cells and "8" in cells and "2 x NVIDIA H200" in cells and "team=infra" in cells
    assert "2025-12-01 10:00 UTC" in cells
    assert re.search(r"<td>--enable-torch-compile</td><td>\(absent\)</td><td>\(set\)</td>", meta)
    assert "NOT comparable" not in page  # same settings: a speedup is shown
    assert "1.20x" in page


def test_chart_axes_start_at_zero_with_the_same_nice_ticks_in_svg_and_png():
    import re

    from tests.fixtures.report import three_profile_sweep

    from glmserve.report import ReportData, chart_specs, line_chart, nice_axis, series_from_sweep

    assert nice_axis(274.0) == (300.0, [0.0, 100.0, 200.0, 300.0])
    assert nice_axis(13.8)[0] == 15.0 and nice_axis(41.0)[0] == 50.0
    svg = line_chart("throughput", "t", "tok/s", "c", {"a": {1: 120.0, 8: 274.0}}, {"a": "#000"})
    assert re.findall(r'class="tick"[^>]*>([^<]*)<', svg) == ["0", "100", "200", "300"]

    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from glmserve.report import png_figure
    from glmserve.report.svg import _svg_for

    for spec in chart_specs(ReportData("t", ["x"], series_from_sweep(three_profile_sweep()))):
        fig = png_figure(spec, plt)
        if fig is None:
            continue
        ax = fig.axes[0]
        svg_ticks = re.findall(r'class="tick"[^>]*>([^<]*)<', _svg_for(spec))
        assert ax.get_ylim()[0] == 0, spec["chart"]
        assert [t.get_text() for t in ax.get_yticklabels()] == svg_ticks, spec["chart"]
        plt.close(fig)
