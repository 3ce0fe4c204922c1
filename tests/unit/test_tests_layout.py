"""The test tree's own rule (issue 21 #6): shared fakes and helpers live in ``tests/fixtures/``
(or conftest), so no test module imports another test module to reach them."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported_test_modules(path: Path, root: Path = TESTS) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.ImportFrom) and node.level:
            names = [f".{node.module or ''}"]
        for name in names:
            last = name.split(".")[-1]
            if name.startswith(("tests.unit", "tests.integration", "tests.e2e", ".")) or (
                last.startswith("test_")
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno} imports {name}")
    return found


def test_no_test_module_imports_another():
    wrong = [
        hit
        for tier in ("unit", "integration", "e2e")
        for path in sorted((TESTS / tier).rglob("test_*.py"))
        for hit in _imported_test_modules(path)
    ]
    assert not wrong, "move what they share to tests/fixtures/:\n" + "\n".join(wrong)


def test_the_check_sees_a_test_module_import(tmp_path):
    """The rule can fail: both spellings that reached the SSE fake before are flagged, a
    fixture import is not."""
    f = tmp_path / "test_x.py"
    for text, flagged in (
        ("import test_bench_client\n", True),
        ("from tests.unit.test_report import three_profile_sweep\n", True),
        ("from tests.fixtures.report import three_profile_sweep\n", False),
    ):
        f.write_text(text)
        assert bool(_imported_test_modules(f, tmp_path)) is flagged, text


def test_no_two_test_files_share_a_basename():
    """The tiers are rootdir-relative modules without packages (no __init__.py), so pytest
    imports each test file by its basename: two files of one name stop the whole run at
    collection ("import file mismatch"), as a merge once did."""
    seen: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    twice = {name: where for name, where in seen.items() if len(where) > 1}
    assert not twice, f"rename one of each: {twice}"
