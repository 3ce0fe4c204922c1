"""PNG charts of the report (``--png DIR``), drawn with matplotlib, an optional dependency."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glmserve.errors import ConfigError
from glmserve.report.data import ReportData
from glmserve.report.svg import chart_specs, nice_axis, tick_labels


def write_pngs(data: ReportData, directory: Path) -> list[Path]:
    """One PNG per chart with data (matplotlib, optional dependency)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError("--png needs matplotlib: pip install matplotlib") from exc
    directory.mkdir(exist_ok=True)  # its parent exists (``paths.check_output_dir``)
    written = []
    for spec in chart_specs(data):
        fig = png_figure(spec, plt)
        if fig is None:
            continue
        out = directory / f"{spec['chart']}.png"
        fig.savefig(out)
        plt.close(fig)
        written.append(out)
    return written


def png_figure(spec: dict[str, Any], plt: Any) -> Any:
    """One chart as a matplotlib figure (None without data), on the SVG's y axis
    (``nice_axis``: from 0, the same ticks), so a PNG and the page never disagree."""
    fig, ax = plt.subplots(figsize=(7.2, 3.0), dpi=100)
    if spec["kind"] == "bar":
        if not spec["values"]:
            plt.close(fig)
            return None
        top = max(spec["values"].values())
        n = len(spec["series"])
        width = 0.8 / n
        for si, s in enumerate(spec["series"]):
            xs = [
                gi + si * width - 0.4 + width / 2
                for gi, g in enumerate(spec["groups"])
                if (g, s) in spec["values"]
            ]
            ys = [spec["values"][(g, s)] for g in spec["groups"] if (g, s) in spec["values"]]
            ax.bar(xs, ys, width=width * 0.95, color=spec["colors"][s], label=s)
        ax.set_xticks(range(len(spec["groups"])), spec["groups"])
        if n > 1:
            ax.legend(fontsize=8)
    else:
        lines = {k: v for k, v in spec["lines"].items() if v}
        if not lines:
            plt.close(fig)
            return None
        top = max(y for pts in lines.values() for y in pts.values())
        for name, pts in lines.items():
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], marker="o", color=spec["colors"][name], label=name)
        ax.set_xscale("log", base=2)
        xticks = sorted({x for pts in lines.values() for x in pts})
        ax.set_xticks(xticks, [str(x) for x in xticks])
        ax.minorticks_off()
        ax.set_xlabel(spec["xlabel"])
        ax.legend(fontsize=8)
    ymax, ticks = nice_axis(top)
    ax.set_ylim(0, ymax)
    ax.set_yticks(ticks, tick_labels(ymax, len(ticks) - 1))
    ax.set_title(spec["title"], fontsize=10)
    ax.set_ylabel(spec["unit"])
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig
