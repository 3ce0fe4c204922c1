"""The package layout is the pipeline: a stage imports only stages before it (or itself).

The ranks below are the allowed import direction documented in docs/ARCHITECTURE.md; a new
package gets a rank here and a line there. Imports inside functions count too (a lazy import
is still a dependency); imports under ``if TYPE_CHECKING:`` do not (annotations only).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "glmserve"

# stage -> rank: a module may import a stage of lower or equal rank, never a higher one.
RANKS: dict[str, int] = {
    # foundations: no stage logic
    "__init__": 0,
    "errors": 0,
    "paths": 0,
    "sigterm": 0,
    "strictjson": 0,
    "commalist": 0,  # the one comma-list parser of every option
    "optmodel": 0,  # Opt metadata of the stages' options models (pydantic only)
    "runtime": 0,  # the patch shipped to the GPU host; imports nothing of glmserve
    "statedir": 1,
    "store": 1,
    "store_migrations": 1,  # the run store's schema
    # profile YAML -> LaunchSpec -> rendered script
    "config": 2,
    # the flags of an SGLang release; reading a log into a verdict
    "argspec": 3,
    "diagnose": 3,
    # hosts, transport, process control
    "remote": 4,
    # the lifecycle, once: plan, deployment, watch, preflight
    "deploy": 5,
    # load, metrics, results, comparison
    "bench": 6,
    "profiling": 7,
    "sweep": 8,
    "tune": 9,
    "report": 10,
    "simulator": 10,
    "cli": 11,
    "__main__": 11,  # the console script: imports the CLI inside its Ctrl-C handler
}

# The one upward import, on purpose: ``load_profile(name, sglang_version=V)`` returns the
# profile spelled for release V, a public API that predates the packages (a lazy import).
EXCEPTIONS = {("glmserve.config.profiles", "glmserve.argspec.portable")}


def _stage(module: str) -> str:
    """``glmserve.bench.runner`` -> ``bench``; ``glmserve`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                for sub in ast.walk(child):
                    if hasattr(sub, "lineno"):
                        lines.add(sub.lineno)
    return lines


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported glmserve module) of every import in ``path`` outside TYPE_CHECKING."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip = _type_checking_lines(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("glmserve")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "glmserve":
                found += [(node.lineno, f"glmserve.{a.name}") for a in node.names]
            elif node.module.startswith("glmserve."):
                found.append((node.lineno, node.module))
    return found


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        out.append((".".join(rel.parts), path))
    return out


def test_every_stage_has_a_rank():
    stages = {_stage(m) for m, _ in _modules()}
    assert stages <= set(RANKS), (
        f"give these a rank here and in ARCHITECTURE.md: {stages - set(RANKS)}"
    )


@pytest.mark.parametrize("module,path", _modules(), ids=lambda v: v if isinstance(v, str) else "")
def test_imports_follow_the_pipeline(module, path):
    here = _stage(module)
    wrong = [
        f"{path.relative_to(SRC)}:{line} imports {target} ({_stage(target)}, rank "
        f"{RANKS.get(_stage(target))}) from {here} (rank {RANKS[here]})"
        for line, target in _imports(path)
        if _stage(target) in RANKS
        and RANKS[_stage(target)] > RANKS[here]
        and (module, target) not in EXCEPTIONS
    ]
    assert not wrong, "\n".join(wrong)


def test_the_checker_sees_a_backward_import(tmp_path):
    """The rule can fail: a store module importing the bench is flagged."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from glmserve.cli import views\n"
        "def f():\n    from glmserve.bench.runner import run\n"
    )
    assert _imports(bad) == [(5, "glmserve.bench.runner")]


def test_the_cli_starts_without_loading_the_stages():
    """``glmserve --help`` pays only for typer and the verb modules: every stage a verb uses is
    imported when that verb runs (benchmarks/cli_import_time.py measures the effect)."""
    code = (
        "import sys, glmserve.cli\n"
        "print('\\n'.join(m for m in sys.modules if m.startswith('glmserve.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.split()
    # The stages' options models are declarations the verbs' parameters are generated from
    # (``glmserve.optmodel``): loaded with the CLI, and they import no stage logic.
    declared = [
        m for m in loaded
        if m == "glmserve.optmodel" or (m.endswith(".options") and _stage(m) != "cli")
    ]  # fmt: skip
    declared += [m.rsplit(".", 1)[0] for m in declared if m.count(".") == 2]  # their packages
    for pkg in declared:  # a package loaded for its options model runs no code of its own
        init = SRC.joinpath(*pkg.split(".")[1:], "__init__.py")
        assert not init.is_file() or not _imports(init), f"{pkg} imports on load"
    heavy = [
        m for m in loaded
        if _stage(m) not in ("cli", "errors", "paths", "__init__") and m not in declared
    ]  # fmt: skip
    assert set(heavy) <= {"glmserve.bench", "glmserve.bench.progress"}, heavy
