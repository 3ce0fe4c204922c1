"""Cell helpers every view shares: data shown as text, never as rich markup."""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain(value: Any) -> str:
    """``str(value)`` safe for a terminal: control characters (an ANSI escape in a label
    clears the screen) are shown as ``\\xNN``, not sent."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def cell(value: Any, style: str = "") -> Text:
    """A table cell of data: never read as rich markup (a label ``[/bad]`` made every
    ``results`` listing fail with exit 70) and free of control characters."""
    return Text(plain(value), style=style)


def _f(v: Any, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"
