"""The docs as a contract, checked without building the site (the build itself:
``tests/integration/test_docs_build.py``): every exit code of ``errors.py`` has its row on the
exit-codes page and no row names a code the code lacks; every page is in the nav; every link
of the README to a docs page resolves."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from glmserve import errors

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_the_exit_codes_page_is_the_code_table():
    codes = {v for k, v in vars(errors).items() if k.startswith("EXIT_") and isinstance(v, int)}
    page = (DOCS / "exit-codes.md").read_text(encoding="utf-8")
    rows = {int(c) for c in re.findall(r"^\| (\d+) \|", page, re.M)}
    assert rows == codes


def _nav_files(nav) -> set[str]:  # type: ignore[no-untyped-def]
    out: set[str] = set()
    for item in nav:
        for value in item.values() if isinstance(item, dict) else [item]:
            out |= _nav_files(value) if isinstance(value, list) else {value}
    return out


def test_every_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = _nav_files(config["nav"])
    pages = {p.name for p in DOCS.glob("*.md")}
    generated = {"cli.md", "simulator.md"}  # scripts/mkdocs_hooks.py
    assert pages | generated == nav


def test_the_readme_links_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert links
    for link in links:
        assert (ROOT / link).exists(), link
