"""Strict JSON out of glmserve: never ``NaN`` or ``Infinity``, whatever a dict holds.

Python's ``json.dumps`` writes ``NaN``/``Infinity`` by default, which no strict parser (``jq``,
JavaScript, Go) reads: one ``float("nan")`` that slipped past a check (an ``--slo ttft_ms=nan``
once did) made ``bench --json`` and the stored result unreadable to them, and counted every
request as meeting the SLO. Every writer of glmserve's data (``--json``, ``--output``, the run
store) goes through ``dumps`` here.

The decision, on purpose: a non-finite number is written as ``null`` and its path is returned,
not raised. Raising would turn the slip into exit 70 *after* a bench ran, losing the
measurement; ``null`` keeps the output strict and the rest of the data, and the CLI warns with
the paths (``emit_json``), so the slip is seen and fixed. Input checks refuse non-finite
values up front; this is the belt behind them.

Strict JSON *into* glmserve, from a file a user names (a dataset), goes through ``loads``:
the C decoder guards its recursion with RecursionError, which no caller expected (``[`` *
100000 was exit 70); ``loads`` turns it into the ValueError every caller already reports
as "not valid JSON" with the file's name.
"""

from __future__ import annotations

import json
import math
from typing import Any


class NestedTooDeeply(ValueError):
    """JSON text nested beyond the decoder's recursion guard (about 1000 levels); no data
    glmserve reads nests more than a handful."""


def loads(text: str | bytes) -> Any:
    """``json.loads``, with over-deep nesting reported as ``NestedTooDeeply`` (a ValueError,
    as ``json.JSONDecodeError`` is) rather than RecursionError."""
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise NestedTooDeeply("nested more than about 1000 levels deep") from exc


def finite_copy(data: Any, path: str = "$") -> tuple[Any, list[str]]:
    """``data`` with every non-finite float replaced by None, and the paths replaced."""
    if isinstance(data, float):
        return (data, []) if math.isfinite(data) else (None, [path])
    if isinstance(data, dict):
        out: dict[Any, Any] = {}
        bad: list[str] = []
        for k, v in data.items():
            out[k], b = finite_copy(v, f"{path}.{k}")
            bad += b
        return out, bad
    if isinstance(data, (list, tuple)):
        items, bad = [], []
        for i, v in enumerate(data):
            item, b = finite_copy(v, f"{path}[{i}]")
            items.append(item)
            bad += b
        return items, bad
    return data, []


def dumps(data: Any, **kwargs: Any) -> tuple[str, list[str]]:
    """Strict JSON text of ``data`` (``default=str`` as the writers use), and the paths of the
    non-finite numbers written as null (empty when there were none: the common case costs
    one ``json.dumps``)."""
    kwargs.setdefault("default", str)
    try:
        return json.dumps(data, allow_nan=False, **kwargs), []
    except ValueError:
        clean, bad = finite_copy(data)
        return json.dumps(clean, allow_nan=False, **kwargs), bad
