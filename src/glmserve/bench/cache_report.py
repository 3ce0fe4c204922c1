"""The level's prefix-cache accounting from per-request ``cached_tokens`` (pure).

A hit rate is cached over prompt tokens of the successful requests that reported both
(native ``meta_info.cached_tokens``; OpenAI ``usage.prompt_tokens_details.cached_tokens``,
which SGLang sends only with ``--enable-cache-report``). Requests that did not report are
counted apart, so a rate over a few of them is never read as the level's: with none it is
None ("not reported"), never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def cache_figures(records: Sequence[Any], api: str = "native") -> dict[str, Any]:
    """``cached_tokens``, ``cache_prompt_tokens``, ``cache_hit_rate`` (None: unreported) and
    ``cache_reported`` (requests that said) over a level's records.

    On the OpenAI APIs SGLang leaves ``prompt_tokens_details`` null for a request with no
    cached token even with ``--enable-cache-report`` (sglang 0.5.9
    entrypoints/openai/usage_processor.py ``_details_if_cached``: details "only when count >
    0"). So once any request of the level reported, a silent one had 0 cached tokens: leaving
    it out would drop exactly the misses and inflate the rate."""
    done = [r for r in records if r.ok and r.prompt_tokens is not None]
    said = [r for r in done if r.cached_tokens is not None]
    if api in ("openai", "chat") and said:
        said = done  # the silent ones are counted below with 0 cached tokens
        cached = sum(r.cached_tokens or 0 for r in said)
        prompt = sum(r.prompt_tokens for r in said)
        return {
            "cached_tokens": cached,
            "cache_prompt_tokens": prompt,
            "cache_hit_rate": cached / prompt if prompt else None,
            "cache_reported": len(said),
        }
    prompt = sum(r.prompt_tokens for r in said)
    cached = sum(r.cached_tokens for r in said)
    return {
        "cached_tokens": cached if said else None,
        "cache_prompt_tokens": prompt if said else None,
        "cache_hit_rate": cached / prompt if said and prompt else None,
        "cache_reported": len(said),
    }


def hit_rate_text(level: dict[str, Any]) -> str | None:
    """One line for ``results show``: "cache hit 87.5% (14,336 of 16,384 prompt tokens)"."""
    rate = level.get("cache_hit_rate")
    if rate is None:
        return None
    return (
        f"cache hit {100 * rate:.1f}% ({level.get('cached_tokens', 0):,} of "
        f"{level.get('cache_prompt_tokens', 0):,} prompt tokens)"
    )
