"""Prefix cache: hits in tokens for repeated prompts, isolation by salt, vLLM's accounting."""

from servingctl_twin.simserver.prefix_cache import PrefixCache

PROMPT = list(range(100, 300))  # 200 tokens = 12 full blocks of 16 + 8


def test_repeated_prompt_hits_its_full_blocks():
    cache = PrefixCache()
    hashes = cache.block_hashes(PROMPT, None)
    assert len(hashes) == 12
    assert cache.lookup(hashes, len(PROMPT)) == 0
    cache.insert(hashes)
    assert cache.lookup(hashes, len(PROMPT)) == 192
    assert (cache.queries, cache.hits) == (400, 192)


def test_different_salts_never_share_blocks():
    cache = PrefixCache()
    cache.insert(cache.block_hashes(PROMPT, "a"))
    assert cache.lookup(cache.block_hashes(PROMPT, "b"), len(PROMPT)) == 0
    assert cache.lookup(cache.block_hashes(PROMPT, None), len(PROMPT)) == 0
    assert cache.lookup(cache.block_hashes(PROMPT, "a"), len(PROMPT)) == 192


def test_shared_prefix_hits_only_up_to_the_first_difference():
    cache = PrefixCache()
    cache.insert(cache.block_hashes(PROMPT, None))
    changed = [*PROMPT[:40], 7, *PROMPT[41:]]
    assert cache.lookup(cache.block_hashes(changed, None), len(changed)) == 32  # blocks 0 and 1


def test_last_token_is_always_recomputed():
    cache = PrefixCache()
    prompt = PROMPT[:64]  # exactly 4 blocks
    cache.insert(cache.block_hashes(prompt, None))
    assert cache.lookup(cache.block_hashes(prompt, None), 64) == 48


def test_lru_eviction_past_capacity():
    cache = PrefixCache(capacity_blocks=12)
    first = cache.block_hashes(PROMPT, "first")
    cache.insert(first)
    cache.insert(cache.block_hashes(PROMPT, "second"))
    assert cache.lookup(first, len(PROMPT)) == 0
