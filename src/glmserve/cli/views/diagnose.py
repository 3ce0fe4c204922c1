"""The ``glmserve diagnose`` view (rendered for ``cli/diagnose_cmd.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

if TYPE_CHECKING:
    from glmserve.diagnose import Diagnosis


# -- diagnose ------------------------------------------------------------------------------


def render_diagnosis(diag: Diagnosis, label: str) -> Text:
    """The human view: one screen, log text never interpreted as rich markup."""
    from glmserve.diagnose import State

    colour = {State.CRASHED: "red", State.EXITED: "red", State.STALLED: "yellow"}.get(
        diag.state, "green"
    )
    t = Text()
    t.append("state     ", style="bold")
    t.append(diag.state.value, style=f"bold {colour}")
    if diag.state is not diag.phase:
        t.append(f"  (phase {diag.phase.value})")
    t.append("\n")
    if diag.category is not None:
        t.append("category  ", style="bold")
        t.append(diag.category.value + "\n", style=colour)
    if diag.line is not None and diag.root_cause:
        t.append(f"{label}:{diag.line}: ", style="bold")
        t.append(diag.root_cause[:400] + "\n")
    if diag.hint:
        t.append("hint      ", style="bold")
        t.append(diag.hint + "\n")
    if diag.patches:
        t.append("patches   ", style="bold")
        t.append(f"{', '.join(diag.patches)} active on {diag.patch_active or '?'} ranks\n")
    if diag.ready_line is not None:
        t.append("ready     ", style="bold")
        t.append(f"{label}:{diag.ready_line}\n")
    elif diag.last_progress_line is not None:
        t.append("progress  ", style="bold")
        t.append(f"{label}:{diag.last_progress_line}: {diag.last_progress or ''}\n")
    return t
