"""argparse's checks on one option value without sglang: its ``type`` conversion (argparse's
``_get_value``) re-implemented for the type names a dump records, and choice membership.

A dump records a type only by name (``int``, ``json.loads``,
``sglang.srt.server_args.json_list_type``), so each callable SGLang uses is re-implemented
here with the message its ``ArgumentTypeError`` gives; a name not known here is accepted,
which errs on the side of "ok" for callables whose behaviour is unknown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any


class _TypeRejected(Exception):
    """Stands for argparse.ArgumentTypeError: its text is the whole message."""


def _human_readable_int(raw: str) -> Any:
    """sglang.srt.utils.common.human_readable_int (0.5.2x): ``4096``, ``25.6k``, ``1Mi``."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", raw.strip())
    if match:
        number, suffix = match.groups()
        if suffix.endswith("i"):
            if "." in number:
                raise _TypeRejected(f"Decimals are not allowed with IEC suffixes like {suffix!r}.")
            return int(number)
        return float(number)
    try:
        return int(raw)
    except ValueError:
        raise _TypeRejected(f"Invalid integer value: {raw!r}.") from None


def _json_value(raw: str) -> Any:
    return json.loads(raw)


def _json_list(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        raise _TypeRejected(
            f"Invalid JSON list: {raw}. Please provide a valid JSON list."
        ) from None


def _cuda_graph_backend(raw: str) -> Any:
    if raw == "tc_piecewise":
        raise _TypeRejected("tc_piecewise was removed; select breakable, full, or disabled")
    return raw


def _cuda_graph_config(raw: str) -> Any:
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _TypeRejected(f"--cuda-graph-config must be JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise _TypeRejected("--cuda-graph-config must be a JSON object")
    return parsed


# Dumped type name (last dotted part) -> re-implementation.
_TYPE_CHECKS: dict[str, Any] = {
    "int": int,
    "float": float,
    "loads": _json_value,
    "json_list_type": _json_list,
    "human_readable_int": _human_readable_int,
    "parse_cuda_graph_backend_arg": _cuda_graph_backend,
    "parse_cuda_graph_config_arg": _cuda_graph_config,
}


def convert(type_name: str | None, raw: str) -> tuple[Any, str | None]:
    """Convert like argparse's ``_get_value``: (value, None) or (None, argparse's text)."""
    if type_name is None:
        return raw, None
    short = type_name.rsplit(".", 1)[-1]
    check = _TYPE_CHECKS.get(short)
    if check is None or (short == "loads" and type_name != "json.loads"):
        return raw, None
    try:
        return check(raw), None
    except _TypeRejected as exc:
        return None, str(exc)
    except RecursionError:  # json.loads past ~1000 levels: sglang's argparse crashes on it
        return None, (
            "JSON nested more than about 1000 levels deep: json.loads raises RecursionError, "
            "which argparse does not catch (the server would not start)"
        )
    except (TypeError, ValueError):
        return None, f"invalid {short} value: {raw!r}"


def in_choices(value: Any, raw: str, choices: tuple[Any, ...]) -> bool:
    """argparse's ``value in choices``, plus choices the dump could only record by repr."""
    if value in choices:
        return True
    return any(isinstance(c, dict) and c.get("repr") in (repr(value), raw) for c in choices)


def choices_text(choices: Iterable[Any]) -> str:
    """The list argparse prints after "invalid choice" (``choose from 'a', 'b'``)."""
    return ", ".join(repr(c) for c in choices)
