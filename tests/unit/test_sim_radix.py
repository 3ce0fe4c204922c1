"""The simulator's prefix cache (simulator/radix.py): block matching, LRU leaves-first
eviction, the ``input_len - 1`` cap, flush and ``--disable-radix-cache``."""

from __future__ import annotations

from glmserve.simulator.radix import RadixCache, text_key


def test_shared_prefix_matches_whole_blocks_only():
    c = RadixCache(10_000, block=4)
    a = tuple(range(20))
    c.insert(a, 20, 10_000)
    b = a[:10] + (99,) * 10  # shares 10 tokens: two full blocks of 4
    assert c.match(b, len(b)) == 8
    assert c.match((7,) * 20, 20) == 0


def test_match_leaves_at_least_one_token_to_compute():
    c = RadixCache(10_000, block=4)
    a = tuple(range(16))
    c.insert(a, 16, 10_000)
    assert c.match(a, 16) == 12  # max_prefix_len = input_len - 1 (schedule_batch.py:897)


def test_text_keys_count_four_bytes_a_token():
    c = RadixCache(10_000, block=2)
    c.insert(text_key("x" * 64), 16, 10_000)
    assert c.match(text_key("x" * 32 + "y" * 32), 16) == 8


def test_lru_evicts_leaves_first_and_least_recent():
    c = RadixCache(10_000, block=1)
    old, new = (1, 2, 3), (9, 8, 7)
    c.insert(old, 3, 10_000)
    c.insert(new, 3, 10_000)
    assert c.evict(4) == 2  # two oldest blocks go: the leaves of `old`
    assert c.match((*old, 0), 4) == 1  # its root block survives
    assert c.match((*new, 0), 4) == 3


def test_flush_and_disabled():
    c = RadixCache(10_000, block=1)
    c.insert((1, 2, 3), 3, 10_000)
    c.flush()
    assert c.match((1, 2, 3, 4), 4) == 0
    d = RadixCache(10_000, block=1, enabled=False)
    d.insert((1, 2, 3), 3, 10_000)
    assert d.match((1, 2, 3, 4), 4) == 0
