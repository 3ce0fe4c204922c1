"""Read a hand-written YAML config (profile, hosts.yaml, ``--set`` value) defensively.

``yaml.safe_load`` never runs code, but it still accepts things a config should not: alias
bombs (billion laughs: a few lines whose aliases expand to 10^9 nodes once anything walks
them), nesting deep enough to overflow the parser's recursion, duplicate keys (silently keeping
the last one), and YAML 1.1 surprises (``on``/``no`` read as booleans, ``010`` as 8). This
module parses with ``SafeLoader`` only, and turns each of those into a ConfigError naming
``file:line``, so the rest of glmserve sees plain, bounded data.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from glmserve.errors import ConfigError, YamlSyntaxError
from glmserve.paths import read_capped

MAX_BYTES = 1 << 20  # a config file is a few KiB; 1 MiB is generous and bounds parse time
MAX_DEPTH = 64  # profiles nest 2-4 levels; deeper is a mistake or an attack
MAX_NODES = 100_000  # nodes after alias expansion (billion laughs stops here in ms)
# A config value is a word, a number or a path; far longer ones only fail later, as
# "Argument list too long" (one argv string is at most 128 KiB on Linux).
MAX_SCALAR = 64 * 1024

_BOOL_TAG = "tag:yaml.org,2002:bool"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"
# The value YAML makes of a number node, without parsing its text again.
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_NUMBER = {
    _INT_TAG: yaml.constructor.SafeConstructor.construct_yaml_int,
    _FLOAT_TAG: yaml.constructor.SafeConstructor.construct_yaml_float,
}
_OCTAL_1_1 = re.compile(r"^[-+]?0[0-7_]+$")


def read_config_text(path: Path, what: str, missing: str | None = None) -> str:
    """A config file's text: a regular file, at most MAX_BYTES, UTF-8 (a BOM is dropped).

    Size is checked before reading, so ``/dev/zero`` or a 10 GiB file cannot exhaust memory;
    a decoding error names the line of the bad byte. ``missing`` words a path that does not
    exist (as ``paths.read_capped``'s).
    """
    raw = read_capped(path, MAX_BYTES, what, missing)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}:{line}: {what} is not UTF-8 text (byte 0x{raw[exc.start]:02x})"
        ) from exc
    return text.removeprefix("\ufeff")


def load_yaml(
    text: str, source: str, syntax_label: str = "YAML syntax error"
) -> tuple[Any, yaml.Node | None]:
    """(data, root node) of one YAML document, or ConfigError naming ``source:line``.

    The root node is returned so callers can map keys to lines without parsing again;
    ``syntax_label`` words the not-YAML-at-all message (files keep their historic wording).
    """
    if len(text) > MAX_BYTES:
        raise ConfigError(f"{source}: YAML text is larger than {MAX_BYTES} bytes")
    _check_depth(text, source)
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)  # its reader rejects NUL and other control bytes here
        root = loader.get_single_node()
        if root is None:
            return None, None
        _check_nodes(root, source)
        return loader.construct_document(root), root
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        raise YamlSyntaxError(f"{where}: {syntax_label}: {_one_line(exc.problem or exc)}") from exc
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(f"{source}: {syntax_label}: {_one_line(exc)}") from exc
    except RecursionError as exc:  # belt and braces: _check_depth should prevent it
        raise ConfigError(f"{source}: YAML nested too deeply") from exc
    finally:
        if loader is not None:
            loader.dispose()


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


def _check_depth(text: str, source: str) -> None:
    """Reject nesting deeper than MAX_DEPTH using the event stream (iterative, so a
    ``[[[[...`` line cannot overflow the recursive composer before we object)."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    line = event.start_mark.line + 1
                    raise ConfigError(
                        f"{source}:{line}: YAML nested more than {MAX_DEPTH} levels deep"
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return  # the real parse reports it with its line


def _check_nodes(root: yaml.Node, source: str) -> None:
    """Walk the node graph as the data would be walked (aliases expanded), counting nodes,
    and reject duplicate keys, non-scalar keys and YAML 1.1 boolean/number surprises.
    Each node carries its key path (``server.model-path``, ``nodes[1]``) for messages."""
    stack: list[tuple[yaml.Node, int, str]] = [(root, 1, "")]
    visited = 0
    while stack:
        node, depth, path = stack.pop()
        visited += 1
        if visited > MAX_NODES or depth > MAX_DEPTH:
            raise ConfigError(
                f"{source}:{node.start_mark.line + 1}: YAML aliases expand to more than "
                f"{MAX_NODES} nodes or {MAX_DEPTH} levels (an alias bomb or a recursive alias)"
            )
        if isinstance(node, yaml.ScalarNode):
            _check_scalar(node, source, path)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((c, depth + 1, f"{path}[{i}]") for i, c in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            _check_keys(node, source)
            for key, value in node.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
                child = f"{path}.{name}" if path else name
                stack.append((key, depth + 1, child))
                stack.append((value, depth + 1, child))


def _check_text(node: yaml.ScalarNode, source: str, path: str) -> None:
    """Text no program can receive: a NUL ends an argv string, an environment value and a
    line of a shell script (bash drops it), so "a\\0b" would silently become "ab" on the host;
    a value over MAX_SCALAR overflows one argv string."""
    where = f"{source}:{node.start_mark.line + 1}: {path + ': ' if path else ''}"
    if "\0" in node.value:
        raise ConfigError(
            f"{where}a NUL byte (\\0) cannot be passed to a program (argv, environment and "
            "scripts end at NUL); remove it"
        )
    if len(node.value) > MAX_SCALAR:
        raise ConfigError(
            f"{where}value is {len(node.value)} characters long; the limit is {MAX_SCALAR}"
        )


def _check_keys(node: yaml.MappingNode, source: str) -> None:
    seen: dict[str, int] = {}
    for key, _ in node.value:
        line = key.start_mark.line + 1
        if not isinstance(key, yaml.ScalarNode):
            raise ConfigError(
                f"{source}:{line}: a mapping key must be a plain value, not a "
                f"{'list' if isinstance(key, yaml.SequenceNode) else 'mapping'}"
            )
        if key.tag == _MERGE_TAG:
            continue
        if key.value in seen:
            raise ConfigError(
                f"{source}:{line}: duplicate key {key.value!r} (first at line "
                f"{seen[key.value]}); YAML would silently keep only the last one"
            )
        seen[key.value] = line


def _check_scalar(node: yaml.ScalarNode, source: str, path: str = "") -> None:
    """Plain scalars YAML 1.1 reads differently from how people mean them."""
    _check_text(node, source, path)
    if node.style is not None:  # quoted: the user said "string"
        return
    text = node.value
    line = node.start_mark.line + 1
    if node.tag == _BOOL_TAG and text.lower() not in ("true", "false"):
        raise ConfigError(
            f"{source}:{line}: {text!r} is read by YAML as the boolean "
            f"{'true' if text.lower() in ('yes', 'on') else 'false'}; write true/false, or "
            f'quote it ("{text}") for the word'
        )
    if node.tag in (_INT_TAG, _FLOAT_TAG) and (":" in text or _OCTAL_1_1.match(text)):
        raise ConfigError(
            f"{source}:{line}: {text!r} is read by YAML 1.1 as a base-60 or octal number; "
            f'quote it ("{text}") if you mean the text'
        )
    if node.tag in (_INT_TAG, _FLOAT_TAG) and str(_NUMBER[node.tag](_CONSTRUCTOR, node)) != text:
        # 2.20 -> 2.2, 0x10 -> 16, 1_000 -> 1000: the launch script would get another string
        # than the one written (a version, a mask, a revision). Keep the text as written;
        # a field that needs a number still parses "0.80" or reports it by line.
        node.tag = _STR_TAG
