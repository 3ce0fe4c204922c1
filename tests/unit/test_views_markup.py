"""Stored data is shown as data: a label, profile or stop reason is never read as rich markup
(``--label 'mk=[/bad]'`` made every later ``results`` listing exit 70 with a MarkupError) and
never writes control characters to the terminal (``\\x1b[2J`` cleared it)."""

from __future__ import annotations

from tests.fixtures.bench_levels import level_with
from tests.fixtures.cli import run_cli

from glmserve.bench.results import BenchResult
from glmserve.store import RunStore

HOSTILE = {"mk": "[/bad]", "style": "[bold red]RED[/]", "esc": "\x1b[2Jgone"}


def _store(stopped: str | None = None) -> int:
    lv = level_with(1, 3, 0)
    res = BenchResult(mode="concurrency", complete=stopped is None, stopped=stopped, levels=[lv])
    with RunStore.open() as store:
        return store.add_bench_result(None, res.to_dict(), {"labels": HOSTILE})


def test_results_lists_hostile_labels_literally(capsys):
    _store()
    code, out, err = run_cli(capsys, "results")
    assert code == 0, err
    flat = "".join(out.split())  # the table may wrap a long cell
    assert "mk=[/bad]" in flat and "style=[boldred]RED[/]" in flat
    assert "\x1b" not in out and "\\x1b[2Jgone" in flat


def test_compare_shows_a_hostile_stop_reason_literally(capsys):
    a = _store()
    b = _store(stopped="server [/x] said \x1b[31mno")
    code, out, err = run_cli(capsys, "compare", str(a), str(b))
    assert code == 0, err
    assert "\x1b" not in out + err


def test_results_show_sends_no_control_characters(capsys):
    rid = _store(stopped="gone \x1b[2J")
    code, out, err = run_cli(capsys, "results", "show", str(rid))
    assert code == 0, err
    assert "\x1b" not in out and "\\x1b[2Jgone" in out
