"""MkDocs hooks: the pages generated from the code, so they cannot drift from it.

* ``cli.md``: every verb's help (``glmserve.cli.reference.render_reference``);
* ``simulator.md``: the simulator's own README (``src/glmserve/simulator/README.md``), which
  lives beside the code it describes.

Nothing is written to the repository: the pages exist only in the build.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]


def on_files(files: Files, config: Any) -> Files:
    from glmserve.cli.reference import render_reference

    files.append(File.generated(config, "cli.md", content=render_reference()))
    sim = (ROOT / "src" / "glmserve" / "simulator" / "README.md").read_text(encoding="utf-8")
    sim = sim.replace("# glmserve simulator", "# Simulator", 1)
    files.append(File.generated(config, "simulator.md", content=sim))
    return files
