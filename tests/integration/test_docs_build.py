"""The docs site builds with ``mkdocs build --strict`` (a broken link, a page missing from the
nav or a bad anchor fails it), and its CLI reference is generated from the CLI: every verb
there, with the help ``--help`` prints (issue 21 #5)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[2]


def _verbs() -> list[str]:
    from glmserve.cli import app

    out: list[str] = []

    def walk(cmd, path: str) -> None:
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            out.append(f"{path} {name}".strip())
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    src = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": src, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_the_site_builds_strict_with_every_page(site: Path) -> None:
    pages = {p.parent.name for p in site.rglob("index.html")}
    for page in ("profiles", "lifecycle", "hosts", "bench", "sweep-tune", "diagnose",
                 "simulator", "exit-codes", "guarantees", "known-limits", "cli"):  # fmt: skip
        assert page in pages, sorted(pages)


def test_the_cli_reference_lists_every_verb_with_its_help(site: Path) -> None:
    from glmserve.cli.helptext import SUMMARIES

    html = (site / "cli" / "index.html").read_text(encoding="utf-8")
    text = re.sub(r"<[^>]+>", "", html)
    for verb in _verbs():
        anchor = "glmserve-" + verb.replace(" ", "-")
        assert f'id="{anchor}"' in html, verb
        assert SUMMARIES[verb].replace("'", "&#x27;") in text or SUMMARIES[verb] in text, verb
    # a verb's options come from the CLI, not from hand-written text
    assert "--stall-budget" in text and "PHASE=SECONDS" in text
    assert "--request-rate" in text and "--rate-sweep" in text


def test_the_readme_stays_an_introduction() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for command in ("bash scripts/main_job.sh", "python3 -m pytest -q tests"):
        assert f"\n{command}\n" in readme, command
    assert "\npython3 -m pytest -q tests\n" in ci  # CI runs exactly the README's test command
