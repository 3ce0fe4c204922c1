"""The CLI reference page of the docs, generated from the CLI itself so it cannot drift.

``render_reference()`` walks the click tree typer builds from ``cli.app`` (after
``cli.helptext`` tidied it, so summaries, paragraphs and metavars are the ones ``--help``
shows) and writes one Markdown section per verb: summary, usage, description, arguments and
options with their value, default and help. ``scripts/mkdocs_hooks.py`` adds it to the site
as ``cli.md`` at every ``mkdocs build``; nothing is written to the repository.
"""

from __future__ import annotations

import re
from typing import Any

from glmserve.cli.helptext import is_block

_CODE_SPAN = re.compile(r"(`[^`]*`)")
_MARKDOWN = re.compile(r"([\\*_\[\]|])")


def render_reference() -> str:
    """The whole page, Markdown."""
    import typer

    from glmserve.cli import app

    root = typer.main.get_command(app)
    ctx = _context(root, "glmserve", None)
    verbs = list(_walk(root, ctx, ()))
    out = [
        "# CLI reference",
        "",
        "Generated from the CLI at every docs build (`glmserve.cli.reference`): what "
        "`glmserve VERB --help` prints, for every verb. Exit codes: [Exit codes](exit-codes.md).",
        "",
        "| verb | what it does |",
        "| --- | --- |",
    ]
    out += [
        f"| [`{' '.join(p)}`](#{_anchor(p)}) | {_text(c.short_help or '')} |" for p, c, _ in verbs
    ]
    out += ["", "## Global options", "", "Given before the verb: `glmserve --debug VERB ...`.", ""]
    out += _params_table(root, ctx, "option")
    for path, cmd, sub_ctx in verbs:
        out += _verb(path, cmd, sub_ctx)
    return "\n".join(out) + "\n"


def _walk(cmd: Any, ctx: Any, path: tuple[str, ...]) -> Any:
    for name, sub in (getattr(cmd, "commands", None) or {}).items():
        sub_ctx = _context(sub, name, ctx)
        yield (*path, name), sub, sub_ctx
        yield from _walk(sub, sub_ctx, (*path, name))


def _context(cmd: Any, name: str, parent: Any) -> Any:
    return cmd.context_class(cmd, info_name=name, parent=parent)


def _anchor(path: tuple[str, ...]) -> str:
    return "glmserve-" + "-".join(path)


def _verb(path: tuple[str, ...], cmd: Any, ctx: Any) -> list[str]:
    name = " ".join(path)
    out = ["", f"## glmserve {name} {{#{_anchor(path)}}}", ""]
    if cmd.short_help:
        out += [f"**{_text(cmd.short_help)}**", ""]
    usage = " ".join(["glmserve", name, *cmd.collect_usage_pieces(ctx)])
    out += ["```text", usage, "```", ""]
    out += _description(cmd.help or "")
    if name == "simulate":  # its options are the simulator's own (argparse), not click's
        from glmserve.simulator import sim_help

        out += ["```text", sim_help(80).rstrip(), "```", ""]  # as a terminal shows it
        return out
    for kind, title in (("argument", "Arguments"), ("option", "Options")):
        rows = _params_table(cmd, ctx, kind)
        if rows:
            out += [f"**{title}**", "", *rows]
    return out


def _description(help_text: str) -> list[str]:
    """Prose paragraphs as paragraphs; blocks (examples, lists under a heading) as text."""
    out: list[str] = []
    for para in help_text.split("\n\n"):
        lines = [ln for ln in para.split("\n") if ln.strip() != "\b"]
        if not lines:
            continue
        if is_block(lines):
            head = lines[0].strip()
            if head.endswith(":") and not lines[0][:1].isspace():
                out += [f"*{_text(head)}*", ""]
                lines = lines[1:]
            if lines:
                out += ["```text", *lines, "```", ""]
        else:
            out += [_text(" ".join(ln.strip() for ln in lines)), ""]
    return out


def _params_table(cmd: Any, ctx: Any, kind: str) -> list[str]:
    params = [p for p in cmd.get_params(ctx) if p.param_type_name == kind]
    if not params:
        return []
    rows = ["| name | value | default | what |", "| --- | --- | --- | --- |"]
    for p in params:
        names = ", ".join(f"`{o}`" for o in [*p.opts, *getattr(p, "secondary_opts", [])])
        if kind == "argument":
            names = _text(p.metavar or p.name.upper())
        value = _text(p.metavar) if p.metavar and kind == "option" else ""
        rows.append(
            f"| {names} | {value} | {_default(p)} | {_text(getattr(p, 'help', '') or '')} |"
        )
    return [*rows, ""]


def _default(param: Any) -> str:
    if getattr(param, "is_flag", False) or getattr(param, "required", False):
        return ""
    default = param.default
    if default is None or default == () or default == []:
        return ""
    if isinstance(default, (list, tuple)):
        default = ",".join(str(d) for d in default)
    return f"`{default}`"


def _text(text: str) -> str:
    """Help text as Markdown: code spans kept, everything else escaped (``<id>``,
    ``*-TP-*``, a table's ``|``); rich's ``\\[`` escape becomes a plain bracket first."""
    text = text.replace("\\[", "[")
    parts = _CODE_SPAN.split(text)
    return "".join(
        part.replace("|", "\\|")
        if part.startswith("`")
        else _MARKDOWN.sub(r"\\\1", part).replace("<", "&lt;").replace(">", "&gt;")
        for part in parts
    )
