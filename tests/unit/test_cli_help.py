"""``--help`` reads well at any width (issue 21 #4): every verb's help rendered at 80 and 120
columns has no line that is a fragment of a paragraph (a line the next word would have fitted
on: the mark of a hard line break inside a paragraph), ``glmserve --help`` lists each verb on
one line, metavars name the value (never ``<str>``, ``<bool>``, ``<list[str]>``), and
examples use ids of the real shape."""

from __future__ import annotations

import itertools
import re

import pytest
import typer

from glmserve.cli import app, main

ANSI = re.compile(r"\x1b\[[0-9;]*m")
WIDTHS = (80, 120)


def _verbs() -> list[tuple[str, ...]]:
    root = typer.main.get_command(app)
    out: list[tuple[str, ...]] = []

    def walk(cmd, path: tuple[str, ...]) -> None:
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            out.append((*path, name))
            walk(sub, (*path, name))

    walk(root, ())
    return out


def _command(path: tuple[str, ...]):
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return cmd


def _help(path: tuple[str, ...], width: int, monkeypatch, capsys) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)  # typer reads it once, at import
    rc = main([*path, "--help"])
    cap = capsys.readouterr()
    assert rc in (0, None), cap.err
    return ANSI.sub("", cap.out).splitlines()


def _blocks(help_text: str) -> list[str]:
    """Lines of the help's blocks (examples, a heading over its list, indented lines): kept
    as written, so a short line there is no fragment. The same rule as ``cli.helptext``,
    restated so that this test does not trust the code it checks."""
    lines: list[str] = []
    for para in re.split(r"\n\s*\n", help_text or ""):
        rows = [r for r in para.split("\n") if r.strip()]
        if not rows:
            continue
        first = rows[0].strip()
        if (
            first == "\b"
            or first.startswith("Example")
            or first.endswith(":")
            or any(r[:1].isspace() for r in rows[1:])
        ):
            lines += [r.rstrip() for r in rows if r.strip() != "\b"]
    return lines


def fragments(rendered: list[str], width: int, blocks: list[str]) -> list[str]:
    """Description lines (above the first panel) that end a line early inside a paragraph."""
    out = []
    body = []
    for line in rendered:
        if line.lstrip().startswith(("╭", "usage:", "Usage:")) and body:
            break
        body.append(line)
    body = [ln for ln in body if not ln.lstrip().startswith(("Usage:", "usage:"))]
    for line, nxt in itertools.pairwise(body):
        text, following = line.strip(), nxt.strip()
        if not text or not following:
            continue
        if any(text in b for b in blocks) or any(following in b for b in blocks):  # as written
            continue
        if len(line.rstrip()) + 1 + len(following.split()[0]) <= width - 2:
            out.append(line.rstrip())
    return out


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("path", _verbs(), ids=" ".join)
def test_every_verb_help_rewraps_at_any_width(path, width, monkeypatch, capsys):
    rendered = _help(path, width, monkeypatch, capsys)
    if path == ("simulate",):  # the simulator's own text (glmserve.simulator.SIM_HELP)
        from glmserve.simulator import SIM_HELP

        assert width - 20 < max(len(ln) for ln in rendered) <= width, "\n".join(rendered)
        assert not fragments(rendered, width, _blocks(SIM_HELP)), "\n".join(rendered)
        return
    assert max(len(ln) for ln in rendered) == width  # rendered at that width
    blocks = _blocks(_command(path).help or "")
    assert not fragments(rendered, width, blocks), "\n".join(rendered)
    assert max(len(ln.rstrip()) for ln in rendered) <= width, "\n".join(rendered)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_command_list_has_one_line_per_verb(width, monkeypatch, capsys):
    rendered = _help((), width, monkeypatch, capsys)
    start = next(i for i, ln in enumerate(rendered) if "Commands" in ln)
    rows = []
    for line in rendered[start + 1 :]:
        if line.startswith("╰"):
            break
        rows.append(line.strip("│ ").strip())
    names = [r.split()[0] for r in rows]
    assert names == [p[0] for p in _verbs() if len(p) == 1], "\n".join(rendered)


@pytest.mark.parametrize("path", _verbs(), ids=" ".join)
def test_metavars_name_the_value(path, monkeypatch, capsys):
    rendered = "\n".join(_help(path, 200, monkeypatch, capsys))
    assert not re.search(r"<(bool|str|int|float|path|list\[\w+\])[^>]*>", rendered), rendered


@pytest.mark.parametrize("path", _verbs(), ids=" ".join)
def test_examples_fit_80_columns_and_use_real_ids(path):
    text = _command(path).help or ""
    for line in _blocks(text):
        assert len(line) + 2 <= 80, line  # rendered with a one-space margin each side
    for bad in re.findall(r"glmserve \w+ ([a-z]-[\w-]+|r\d+|[0-9a-f]{1,7})\b", text):
        pytest.fail(f"{path}: example id {bad!r} is not a real id (runs: 8 hex digits)")


def test_the_fragment_check_sees_a_hard_break():
    """The rule can fail: a paragraph broken at 60 columns, shown at 80, is caught."""
    rendered = [
        " The whole grid runs when it",
        " fits --budget, else a coordinate search.",
    ]
    assert fragments(rendered, 80, []) == [" The whole grid runs when it"]
    assert fragments(rendered, 80, ["The whole grid runs when it"]) == []
