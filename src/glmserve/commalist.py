"""The one comma-list parser: every option that takes ``a,b,c`` reads it here, under one policy.

Policy: items are stripped of blanks, and an empty item is refused, never skipped. ``1,,2`` is
a typo and ``--nodes "$A,$B"`` with ``$B`` unset is a missing host: skipping the empty item
would run something other than what was asked (one level, one node), so the error names the
flag and quotes the text (a ConfigError: one line, exit 2). Meaning the items (integers, host
names, ``KEY=MS``) is the caller's job.

Before this module, 9 places split on commas under two policies: ``--concurrency 1,,2`` was
refused while ``--nodes``, ``--hosts`` and ``--profiles`` silently dropped the empty item.
"""

from __future__ import annotations

from glmserve.errors import ConfigError


def comma_list(text: str, flag: str, example: str | None = None) -> list[str]:
    """``" a, b "`` -> ``["a", "b"]``; ConfigError naming ``flag`` for an empty text or an
    empty item (``a,,b``, ``a,b,``, ``,``), with ``example`` as the shape to give."""
    items = [x.strip() for x in text.split(",")]
    if all(items):
        return items
    like = f" (expected a comma list like {example})" if example else ""
    if not text.strip():
        raise ConfigError(f"{flag}: an empty list{like}")
    raise ConfigError(f"{flag}: an empty item in {text!r}{like}")
