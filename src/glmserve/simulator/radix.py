"""The simulator's prefix (radix) cache: block-chained prefix matching with LRU eviction.

SGLang 0.5.9 matches a request's prompt against its radix tree when it schedules it
(``schedule_batch.py`` ``Req.init_next_round_input``: at most ``input_len - 1`` tokens,
line 897, so at least one token is always computed), counts the reused tokens into
``req.cached_tokens`` (``schedule_batch.py`` line 1536) and reports them per request in
``meta_info["cached_tokens"]`` (``tokenizer_manager.py`` line 1530). Cached tokens are not
recomputed, so they cost no prefill. Unlocked tree nodes are evicted leaves-first, least
recently used, when the KV pool needs room (``mem_cache/radix_cache.py`` ``evict``).

Here a prompt is a *key*: its token ids when the client sent ``input_ids``, else its UTF-8
bytes read as one token per ``BYTES_PER_TOKEN`` bytes (the counting rule of
``prompts.approx_tokens``). Keys are cut into blocks of ``block`` tokens and each block is
named by a hash chained to its parent's, so a dict of block names is the tree: a prefix
matches block by block. Matching touches a path leaf-first so a parent is always more
recently used than its children and LRU eviction removes leaves first, as SGLang does.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

BYTES_PER_TOKEN = 4
DEFAULT_BLOCK = 16


def text_key(text: str) -> bytes:
    """A text prompt's key: its bytes (one token per ``BYTES_PER_TOKEN`` bytes)."""
    return text.encode()


def key_digest(key: Sequence | bytes) -> str:
    """sha256 of a prompt key as the server received it: of the UTF-8 text, or of the token
    ids written ``1,2,3`` (what ``/sim/trace`` reports as ``prompt_sha256``)."""
    raw = bytes(key) if isinstance(key, bytes | bytearray) else ",".join(map(str, key)).encode()
    return hashlib.sha256(raw).hexdigest()


class RadixCache:
    """Prefix cache of at most ``capacity`` tokens; ``enabled=False`` matches nothing
    (``--disable-radix-cache``)."""

    def __init__(self, capacity: int, block: int = DEFAULT_BLOCK, enabled: bool = True) -> None:
        self.capacity = max(0, int(capacity))
        self.block = max(1, int(block))
        self.enabled = enabled
        self.blocks: OrderedDict[int, None] = OrderedDict()
        self.hit_tokens = 0  # ground truth: cached tokens handed out
        self.query_tokens = 0  # ground truth: prompt tokens matched against

    def _unit(self, key: Sequence | bytes) -> int:
        """Key items per block: bytes keys carry ``BYTES_PER_TOKEN`` items a token."""
        return self.block * (BYTES_PER_TOKEN if isinstance(key, bytes | bytearray) else 1)

    def _chain(self, key: Sequence | bytes, ntokens: int) -> list[int]:
        """Names of the full blocks within the first ``ntokens`` tokens of ``key``."""
        unit = self._unit(key)
        nblocks = min(len(key) // unit, ntokens // self.block)
        out: list[int] = []
        h = 0
        for i in range(nblocks):
            piece = key[i * unit : (i + 1) * unit]
            h = hash((h, bytes(piece) if isinstance(piece, bytes | bytearray) else tuple(piece)))
            out.append(h)
        return out

    @property
    def size_tokens(self) -> int:
        return len(self.blocks) * self.block

    def match(self, key: Sequence | bytes | None, prompt_tokens: int) -> int:
        """Cached tokens for a prompt of ``prompt_tokens`` tokens (at most ``prompt_tokens -
        1``, as SGLang's ``max_prefix_len``); refreshes the matched path's recency."""
        if not self.enabled or key is None or prompt_tokens <= 1:
            return 0
        self.query_tokens += prompt_tokens
        hit: list[int] = []
        for h in self._chain(key, prompt_tokens - 1):
            if h not in self.blocks:
                break
            hit.append(h)
        for h in reversed(hit):  # leaf first: parents end up the most recent
            self.blocks.move_to_end(h)
        cached = len(hit) * self.block
        self.hit_tokens += cached
        return cached

    def insert(self, key: Sequence | bytes | None, ntokens: int, room: int) -> None:
        """Cache the full blocks of ``key``'s first ``ntokens`` tokens, then evict LRU
        blocks until the cache fits in ``room`` tokens (what the pool has free)."""
        if not self.enabled or key is None:
            return
        chain = self._chain(key, ntokens)
        for h in reversed(chain):
            self.blocks[h] = None
            self.blocks.move_to_end(h)
        self.evict(room)

    def evict(self, room: int) -> int:
        """Drop least recently used blocks until the cache holds at most ``room`` tokens
        (and its capacity); returns the tokens evicted."""
        limit = max(0, min(room, self.capacity)) // self.block
        n = 0
        while len(self.blocks) > limit:
            self.blocks.popitem(last=False)
            n += 1
        return n * self.block

    def flush(self) -> None:
        """``/flush_cache``: empty the tree (SGLang resets it when nothing runs or waits)."""
        self.blocks.clear()

    def describe(self) -> dict[str, object]:
        q = self.query_tokens
        return {
            "enabled": self.enabled,
            "block_tokens": self.block,
            "cached_blocks": len(self.blocks),
            "hit_tokens": self.hit_tokens,
            "query_tokens": q,
            "hit_rate": self.hit_tokens / q if q else 0.0,
        }
