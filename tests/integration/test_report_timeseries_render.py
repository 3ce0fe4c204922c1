"""Issue 24 item 5: a bench with telemetry (simulator with --enable-metrics, stand-in
nvidia-smi) reported as HTML and rendered by headless Chromium shows, per level, the six
time-series charts with every stored sample; ``results export --format series`` carries the
same samples as JSONL, and ``compare`` shows tokens/J.

Needs Debian's ``chromium``; skipped only when it is absent."""

from __future__ import annotations

import json
import os
from html.parser import HTMLParser
from pathlib import Path

import pytest
from tests.fixtures.cli import run_cli
from tests.fixtures.report import CHROMIUM, chromium

FAKE_BIN = Path(__file__).resolve().parents[1] / "fixtures" / "bin"
CHARTS = {"ts-throughput", "ts-requests", "ts-kv-usage", "ts-cache-hit", "ts-power", "ts-sm-clock"}

pytestmark = pytest.mark.slow


class _Lines(HTMLParser):
    """(chart, level) -> {series: (points, max)} from the browser's serialized DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.cur: tuple[str, str] | None = None
        self.charts: dict[tuple[str, str], dict[str, tuple[int, float, int]]] = {}

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag == "svg" and a.get("data-chart", "").startswith("ts-"):
            self.cur = (a["data-chart"], a["data-level"])
            self.charts[self.cur] = {}
        elif tag == "polyline" and self.cur and "data-n" in a:
            drawn = len(a["points"].split())
            self.charts[self.cur][a["data-series"]] = (int(a["data-n"]), float(a["data-max"]),
                                                       drawn)  # fmt: skip

    def handle_endtag(self, tag):
        if tag == "svg":
            self.cur = None


def test_report_draws_time_series_per_level(start_simulator, capsys, monkeypatch, tmp_path):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}")
    sim = start_simulator("--enable-metrics", "--max-running-requests", "4", "--sim-speed", "8")
    rc, out, err = run_cli(
        capsys, "bench", "--url", sim.url, "--mode", "concurrency", "--concurrency", "2,6",
        "--num-prompts", "24", "--input-len", "64", "--output-len", "32",
        "--metrics-interval", "0.2", "--json",
    )  # fmt: skip
    assert rc == 0, err
    res = json.loads(out)
    rid = str(res["result_id"]) if "result_id" in res else None
    if rid is None:
        rc, out, _ = run_cli(capsys, "results", "--json")
        rid = str(json.loads(out)[0]["id"])
    html = tmp_path / "report.html"
    rc, _, err = run_cli(capsys, "report", rid, "--html", str(html))
    assert rc == 0, err
    proc = chromium(tmp_path, "--dump-dom", html.as_uri())
    assert proc.returncode == 0, proc.stderr[-1500:]
    dom = _Lines()
    dom.feed(proc.stdout)
    for n, lv in enumerate(res["levels"]):
        tel = lv["telemetry"]
        assert {c for c, lvl in dom.charts if lvl == str(n)} == CHARTS
        srv = tel["server"]
        running = dom.charts[("ts-requests", str(n))]["running"]
        assert running[0] == running[2] == len(srv["t"])  # every stored sample drawn
        assert running[1] == max(srv["num_running_reqs"])
        power = dom.charts[("ts-power", str(n))]
        gpu_series = tel["gpu"]["series"]
        assert set(power) == {f"GPU {i}" for i in gpu_series}
        assert power["GPU 1"][1] == max(gpu_series["1"]["power_w"]) == 310.0

    # the same samples as JSONL, one line each
    rc, out, err = run_cli(capsys, "results", "export", "--format", "series")
    assert rc == 0, err
    lines = [json.loads(x) for x in out.splitlines()]
    server = [x for x in lines if x["source"] == "server" and x["level"] == 1]
    assert [x["t"] for x in server] == res["levels"][1]["telemetry"]["server"]["t"]
    assert [x["num_queue_reqs"] for x in server] == (
        res["levels"][1]["telemetry"]["server"]["num_queue_reqs"]
    )
    # tokens per joule in compare
    rc, out, err = run_cli(capsys, "compare", rid, rid, "--json")
    assert rc == 0, err
    row = json.loads(out)["rows"][0]
    assert row["levels"]["6"]["output_tok_per_j"] == pytest.approx(
        res["levels"][1]["output_tok_per_j"]
    )
