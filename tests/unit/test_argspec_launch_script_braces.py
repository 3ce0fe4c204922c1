"""Brace expansion and process substitution in ``validate SCRIPT`` (issue 20, item 14).

Ground truth is real bash: each script is run with a stand-in ``python3`` on PATH that records
the argv it receives, and the words glmserve reads must be exactly those. A ``<(cmd)`` becomes
a path such as ``/dev/fd/63`` there; glmserve keeps it as written and marks it opaque (warned,
not checked), as it does a ``$(cmd)``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from glmserve.argspec.launch_script import check_launch, find_launch
from glmserve.argspec.releases import load_argspec
from glmserve.errors import ConfigError

L = "python3 -m sglang.launch_server"
BRACES = [
    f"{L} --model-path m --cuda-graph-bs {{1,2,4}} --tp-size 8",  # the issue's line
    f"{L} --cuda-graph-bs {{1..4}} {{8..2..-3}} {{01..3}} {{-01..2}} {{a..e..2}} {{1..3..0}}",
    f"{L} --x={{1,2}} pre{{a,b}}post {{a,b}}{{1..2}} {{a,{{b,c}}d}} x{{,}} {{,a}}",
    f"{L} {{a}} {{}} a{{}}b {{1..a}} {{1.5..3}} {{a,b {{x{{a,b}}}} {{a}}{{b,c}} a,b}}",
    f"{L} \"{{a,b}}\" '{{a,b}}' \\{{a,b}} {{a\\,b,c}} {{\"a b\",c}} {{a,'b}}'",
    f"X=1; {L} ${{X}}{{a,b}} {{$X,y}} ${{X:-{{a,b}}}} {{a,$(echo b,c)}} {{`echo a,b`,c}}",
    f'V="{{a,b}}"; {L} $V "$V"',  # a variable's value is not brace-expanded
    f"A={{a,b}}; export B={{a,b}}; declare C=x{{a,b}}; {L} $A $B $C",
    f"A=({{a,b}}c {{1..2}}); {L} \"${{A[@]}}\"",
    f"{L} {{9999999999999999999..1}} ~/{{a,b}} {{10..8}} {{1..2}}{{a,b}}{{x,y}}",
]


@pytest.fixture
def fake_python(tmp_path: Path) -> tuple[Path, Path]:
    """A ``python3`` on PATH that appends its argv (JSON) to a log and exits."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv.log"
    path = bin_dir / "python3"
    path.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "with open(os.environ['ARGV_LOG'], 'a') as fh:\n"
        "    fh.write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    path.chmod(0o755)
    return bin_dir, log


def _bash_argv(text: str, tmp_path: Path, fake_python: tuple[Path, Path]) -> list[str]:
    script = tmp_path / "run.sh"
    script.write_text(text + "\n")
    bin_dir, log = fake_python
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ARGV_LOG": str(log)}
    subprocess.run(["bash", str(script)], env=env, capture_output=True, timeout=30, check=False)
    argv = json.loads(log.read_text().splitlines()[0])
    return argv[argv.index("sglang.launch_server") + 1 :]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
@pytest.mark.parametrize("text", BRACES)
def test_braces_expand_into_the_words_bash_passes(text, tmp_path, fake_python):
    """Word for word; a word only known at run time (``$(..)``, ``${X:-..}``, ``~``) is
    kept as written and marked opaque, so there only its place is compared."""
    inv = find_launch(text, "run.sh")
    bash = _bash_argv(text, tmp_path, fake_python)
    assert len(inv.argv) == len(bash), (inv.argv, bash)
    mine = [w if i not in inv.opaque else None for i, w in enumerate(inv.argv)]
    assert mine == [w if i not in inv.opaque else None for i, w in enumerate(bash)]
    assert len(inv.opaque) <= 4  # the comparison is not vacuous


def test_the_issue_line_is_checked_as_three_values():
    """``--cuda-graph-bs {1,2,4}`` is nargs='+' of 1 2 4: no warning about a '{1,2,4}'."""
    inv = find_launch(f"{L} --model-path m --cuda-graph-bs {{1,2,4}}\n", "run.sh")
    report = check_launch(inv, load_argspec("0.5.9")).report
    assert inv.argv[-3:] == ["1", "2", "4"] and report.ok, report.findings


def test_a_huge_sequence_is_refused_with_the_line():
    with pytest.raises(ConfigError, match=r"run.sh:2: brace expansion makes more than"):
        find_launch(f"#!/bin/bash\n{L} --x {{1..100000000}}\n", "run.sh")


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
def test_process_substitution_is_one_opaque_word(tmp_path, fake_python):
    text = (
        f"{L} --model-path m --json-model-override-args <(echo '{{}}') "
        "--x a<(true)b --y >(cat) 2>(cat) --tp-size 8"
    )
    got = find_launch(text, "run.sh")
    bash = _bash_argv(text, tmp_path, fake_python)
    assert len(got.argv) == len(bash)  # nothing vanished, nothing split
    for mine, real, i in zip(got.argv, bash, range(len(bash)), strict=True):
        if "(" in mine:  # bash's /dev/fd/N, ours as written and opaque
            assert "/dev/fd/" in real and i in got.opaque, (mine, real)
        else:
            assert mine == real
    assert got.argv[3] == "<(echo '{}')" and got.argv[-1] == "8"
    located = check_launch(got, load_argspec("0.5.9"))
    warned = [f.message for f in located.report.findings if f.severity == "warning"]
    assert any("<(echo '{}')" in m and "only known when the script runs" in m for m in warned)
