"""The HTML report rendered by a real headless Chromium: every chart is drawn with its data.

Needs Debian's ``chromium`` (apt-get install -y chromium); skipped only when it is absent.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from tests.fixtures.report import chromium, three_profile_sweep

from glmserve.cli import main
from glmserve.sweep.state import OK, save_sweep


class _Dom(HTMLParser):
    """Counts drawn marks per chart in the browser's serialized DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.chart: str | None = None
        self.marks: dict[str, list[dict[str, str]]] = {}
        self.no_data: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag == "svg" and "data-chart" in a:
            self.chart = a["data-chart"]
            self.marks[self.chart] = []
        elif tag == "p" and "no-data" in a.get("class", ""):
            self.no_data.append(a.get("data-chart", ""))
        elif self.chart and tag in ("rect", "circle") and "data-value" in a:
            self.marks[self.chart].append({"tag": tag, **a})

    def handle_endtag(self, tag):
        if tag == "svg":
            self.chart = None


@pytest.fixture
def report_file(tmp_path):
    sw = three_profile_sweep()
    save_sweep(sw)
    html = tmp_path / "report.html"
    rc = main(["report", sw.sweep_id, "--html", str(html)])
    assert rc == 0 and html.exists()
    return sw, html


@pytest.mark.slow
def test_rendered_dom_has_every_chart_with_its_data(tmp_path, report_file):
    sw, html = report_file
    proc = chromium(tmp_path, "--dump-dom", html.as_uri())
    assert proc.returncode == 0, proc.stderr[-1500:]
    dom = _Dom()
    dom.feed(proc.stdout)
    ok = [e for e in sw.entries if e.status == OK]
    assert not dom.no_data
    assert set(dom.marks) == {"decode-tok-s", "throughput", "latency-ttft", "latency-itl",
                              "latency-e2e"}  # fmt: skip
    decode = {m["data-group"]: float(m["data-value"]) for m in dom.marks["decode-tok-s"]}
    assert decode == {e.profile: pytest.approx(e.decode_tok_s()) for e in ok}
    points = dom.marks["throughput"]
    assert len(points) == sum(len(e.aggregate_tok_s()) for e in ok)
    for e in ok:
        got = {int(m["data-x"]): float(m["data-value"]) for m in points
               if m["data-series"] == e.profile}  # fmt: skip
        assert got == pytest.approx(e.aggregate_tok_s())
    for chart in ("latency-ttft", "latency-itl", "latency-e2e"):
        assert len(dom.marks[chart]) == 3 * len(ok)
        assert all(float(m["height"]) > 0 for m in dom.marks[chart])
    assert "crashed" in proc.stdout and "UNSUPPORTED_ARCH" in proc.stdout


@pytest.mark.slow
def test_screenshot_shows_the_bars_and_lines(tmp_path, report_file):
    image = pytest.importorskip("PIL.Image")
    _, html = report_file
    shot = tmp_path / "shot.png"
    proc = chromium(tmp_path, "--hide-scrollbars", "--window-size=900,2400",
                    f"--screenshot={shot}", html.as_uri())  # fmt: skip
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-1500:]
    img = image.open(shot).convert("RGB")

    def pixels_near(rgb: tuple[int, int, int]) -> int:
        return sum(
            n for n, px in img.getcolors(maxcolors=1 << 20)
            if all(abs(a - b) <= 12 for a, b in zip(px, rgb, strict=True))
        )  # fmt: skip

    assert pixels_near((0x42, 0x69, 0xD0)) > 3000  # decode bars, p50 bars, first line
    assert pixels_near((0xEF, 0xB1, 0x18)) > 2000  # p90 bars
    assert pixels_near((0xFF, 0x72, 0x5C)) > 2000  # p99 bars, second line
