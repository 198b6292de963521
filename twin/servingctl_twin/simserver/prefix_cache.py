"""Block-hashed prefix cache of the simulator: which leading prompt tokens a request can reuse.

Like vLLM: full blocks of ``block_size`` tokens are hashed as a chain (each hash covers the whole
prefix), the first block's hash includes the request's ``cache_salt`` (so different salts never
share), hits are counted in tokens, and at least the last prompt token is always recomputed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """LRU set of block hashes with vLLM's query/hit accounting (in tokens)."""

    def __init__(self, block_size: int = 16, capacity_blocks: int = 3136) -> None:
        """``capacity_blocks`` defaults to the reference's 50,182-token KV cache / 16."""
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.queries = 0
        self.hits = 0

    def block_hashes(self, tokens: Sequence[int], salt: str | None) -> list[int]:
        """Chained hashes of the full blocks of ``tokens`` (the salt seeds the chain)."""
        size = self.block_size
        parent = hash(("salt", salt))
        hashes = []
        for start in range(0, len(tokens) - size + 1, size):
            parent = hash((parent, tuple(tokens[start : start + size])))
            hashes.append(parent)
        return hashes

    def lookup(self, hashes: list[int], prompt_len: int) -> int:
        """Count a query of ``prompt_len`` tokens; return the cached prefix length in tokens."""
        hit_blocks = 0
        for block in hashes:
            if block not in self._blocks:
                break
            self._blocks.move_to_end(block)
            hit_blocks += 1
        # The last prompt token is always computed (it yields the first output token).
        hit_tokens = min(hit_blocks * self.block_size, ((prompt_len - 1) // self.block_size) * self.block_size)
        self.queries += prompt_len
        self.hits += hit_tokens
        return hit_tokens

    def insert(self, hashes: list[int]) -> None:
        """Remember computed blocks, evicting the least recently used past capacity."""
        for block in hashes:
            self._blocks[block] = None
            self._blocks.move_to_end(block)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
