"""feed_block's line-shape cache: a line reduced to its shape (lower case, digits folded),
and whether a shape can matter at all, so millions of serving lines cost a dict lookup each."""

from __future__ import annotations

import re

from glmserve.diagnose.patterns import _KEYWORDS, _PROGRESS, _has_any

# feed_block's line shapes: ASCII lower-cased and digits folded to "0" in one C-speed
# translate, so "Decode batch, #running-req: 12, ..." lines of a serving log share one shape.
_FOLD = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ123456789", b"abcdefghijklmnopqrstuvwxyz000000000"
)
_BORING, _PROGRESS_ONLY, _HOT = 0, 1, 2
_SHAPE_MAX_BYTES = 4096  # longer lines always take the full path (and are not cached)
_NARROW_AFTER = 64  # cache misses in one block before its keys are narrowed (_block_keys)
_MAX_FACTS = 4096  # server_args keys, patch names, patch ranks kept (a real log has ~300)
_MAX_SHAPE_BYTES = 4 << 20  # bounds the cache on input whose lines never repeat (random bytes)
_FOLD_STR = str.maketrans("123456789", "000000000")  # keys are folded like the shapes
_PROGRESS_KEYS = tuple(sorted({k.translate(_FOLD_STR) for ks, _p, _s in _PROGRESS for k in ks}))
_SHAPE_KEYWORDS = tuple(k.translate(_FOLD_STR) for k in _KEYWORDS)
# Lines the full path treats specially before the keyword check, plus the two non-ASCII
# characters whose str.lower() is ASCII (KELVIN SIGN -> "k", I WITH DOT ABOVE -> "i").
_HOT_MARKS = (
    "\r", "\x1b", "\x00", "serverargs(", "server_args=", "glmserve", "patches armed",
    "options:", "optional arguments:", "-h, --help", "max_total_num_tokens",
    "\xe2\x84\xaa", "\xc4\xb0",
)  # fmt: skip
# "token usage: 0.05" in every decode line is not argparse's "usage: prog [-h]" banner (that
# rule is anchored at the start of the message).
_WORD_USAGE = re.compile(r"\w usage:")


_ShapeKeys = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]
_ALL_SHAPE_KEYS: _ShapeKeys = (_HOT_MARKS, _SHAPE_KEYWORDS, _PROGRESS_KEYS)


def _shape_kind(shape: bytes, keys: _ShapeKeys = _ALL_SHAPE_KEYS) -> int:
    """_BORING (nothing to do), _PROGRESS_ONLY (at most a progress line) or _HOT (full path)
    for a folded line; conservative: when unsure, _HOT. ``keys`` may be narrowed to the ones
    present in the line's block (:func:`_block_keys`): an absent key cannot be in the line."""
    marks, keywords, progress = keys
    text = shape.decode("latin-1")  # byte for byte; the marks above are spelled that way
    if _has_any(text, marks):
        return _HOT
    if keywords:
        probe = _WORD_USAGE.sub("", text) if "usage:" in text else text
        if _has_any(probe, keywords):
            return _HOT
    return _PROGRESS_ONLY if _has_any(text, progress) else _BORING


def _block_keys(lines: list[bytes]) -> _ShapeKeys:
    """The marks and keywords that occur anywhere in a block (one pass per key over ~1 MiB):
    on input whose lines never repeat (request ids, random bytes) most keys are absent, and
    each line's check then costs a few comparisons instead of ~130."""
    text = b"\n".join(lines).translate(_FOLD).decode("latin-1")
    return (
        tuple(k for k in _HOT_MARKS if k in text),
        tuple(k for k in _SHAPE_KEYWORDS if k in text),
        tuple(k for k in _PROGRESS_KEYS if k in text),
    )
