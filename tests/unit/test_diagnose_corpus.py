"""diagnose against the corpus of real SGLang logs in tests/data/logs (issue 4 acceptance).

Each file starts with `# source:` / `# expect:` header lines (optionally `# note:`); the body
below them is the log as posted, and expected line numbers count body lines only.
"""

from __future__ import annotations

import pytest
from tests.fixtures.diagnose_corpus import CASES, Case

from glmserve.diagnose import Category, State, diagnose_text


def test_corpus_is_big_enough_and_cites_sources() -> None:
    assert len(CASES) >= 25
    for case in CASES:
        assert case.source, case.path.name
        real = not case.source.startswith("synthetic")
        assert not real or case.source.startswith("https://"), case.path.name
    assert sum(not c.source.startswith("synthetic") for c in CASES) >= 25


def test_corpus_covers_every_category_and_startups() -> None:
    seen = {c.category for c in CASES}
    assert {cat.value for cat in Category} <= seen
    states = [c.state for c in CASES]
    assert states.count(State.READY.value) >= 2
    in_progress = {State.LOADING_WEIGHTS, State.KV_ALLOCATED, State.CAPTURING_GRAPHS, State.WARMUP}
    assert {State(s) for s in states} >= in_progress


def test_corpus_accuracy_at_least_95_percent() -> None:
    right = 0
    line_right = 0
    wrong: list[str] = []
    for case in CASES:
        d = diagnose_text(case.body)
        got_cat = d.category.value if d.category else None
        if d.state.value == case.state and got_cat == case.category:
            right += 1
        else:
            wrong.append(f"{case.path.name}: got {d.state.value}/{got_cat}")
        line_right += d.line == case.line
    accuracy = right / len(CASES)
    print(
        f"\ndiagnose corpus: {right}/{len(CASES)} fully right ({accuracy:.1%}); "
        f"root-cause line right in {line_right}/{len(CASES)}"
    )
    assert accuracy >= 0.95, "\n".join(wrong)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.line is not None], ids=lambda c: c.path.stem
)
def test_root_cause_line_names_the_error(case: Case) -> None:
    """The reported line is the root cause, and root_cause is that line without its prefix."""
    d = diagnose_text(case.body)
    assert d.line == case.line
    body_line = case.body.split("\n")[case.line - 1]
    assert d.root_cause and d.root_cause[:40] in body_line
    assert d.hint
