"""The measurement set of the second round on logs_2026_c (issue 26): 13 excerpts from public
threads no other corpus cites, labelled and committed (687b0f3) before they were scored, and
scored once, after the round's rule changes. Nothing here is fitted: the whole set is held out,
so the only checks are its provenance, the reported figures and bulk/per-line agreement."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import score_diagnose as sd  # noqa: E402

CASES = [sd.load(p) for p in sorted(sd.NEW_D.glob("*.log"))]
OLDER = {
    line.split("(")[0].removeprefix("# source:").strip()
    for d in (sd.FITTED, sd.NEW, sd.NEW_B, sd.NEW_C)
    for p in d.glob("*.log")
    for line in p.read_text().splitlines()
    if line.startswith("# source: https://")
}


def test_every_log_cites_one_thread_no_other_corpus_cites() -> None:
    assert len(CASES) >= 13
    seen: set[str] = set()
    for case_path in sorted(sd.NEW_D.glob("*.log")):
        head = case_path.read_text().split("\n", 1)[0]
        assert head.startswith("# source: https://github.com/"), case_path.name
        url = head.split("(")[0].removeprefix("# source:").strip()
        assert url not in OLDER and url not in seen, case_path.name
        seen.add(url)


def test_reported_figures_do_not_regress() -> None:
    """Scored once after the round-2 rules (96913b9): 12/13, strict 9/13 (the rules of main
    and of round 1 score the same). Issue 31 fixed its one miss, the known limit of a kernel
    library's native CUDA check line (FlashMLA, sglang#25620): 13/13, strict 10/13, now in
    sample. A guard on the reported figures, never a fitting target."""
    assert sd.score(CASES)[0] >= 13
    assert sd.strict_score(CASES) >= 10


def test_score_script_prints_the_set() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "score_diagnose.py")],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    assert "2026_d held-out (round 2)" in out and "2026_d strict (round 2)" in out


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bulk_path_gives_the_per_line_verdict(case: sd.Case) -> None:
    from glmserve.diagnose import diagnose_lines, diagnose_stream

    data = case.body.encode()
    chunks = [data[i : i + 97] for i in range(0, len(data), 97)]
    assert diagnose_stream(chunks).to_dict() == diagnose_lines(case.body.split("\n")).to_dict()
