"""The ``glmserve profiles`` table (rendered for ``cli/profiles_cmds.py``)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from glmserve.cli.views.common import cell

# -- profiles ------------------------------------------------------------------------------


def profiles_table(rows: list[dict[str, Any]]) -> Table:
    """``glmserve profiles``: name, parent, attention backend, patches, sglang range."""
    table = Table("profile", "extends", "attention backend", "patches", "sglang", "description")
    for col in table.columns[:5]:
        col.no_wrap = True
    for r in rows:
        cells = (
            r["name"],
            r["extends"] or "",
            r["attention_backend"] or "-",
            ",".join(r["patches"]) or "-",
            r["sglang"] or "-",
            r["description"],
        )
        table.add_row(*(cell(c) for c in cells))
    return table
