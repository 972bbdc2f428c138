"""KV-cache blocks: allocation, reference counts and automatic prefix caching. No torch.

A full block is known by a hash chained from the hash of the block before it, so one hash
names a whole prefix. Blocks whose KV is computed are registered under their hash; a new
sequence whose prompt starts with the same tokens takes those blocks (reference count + 1)
instead of computing them again. Hash equality is never trusted alone: the block's own
token ids and its parent's hash are compared too.

A block nobody references any more keeps its KV and its hash ("evictable") and is reused
for a new prefix hit until memory is needed: fresh blocks are handed out first, then the
least recently freed evictable block loses its hash and is reused.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from engine.backends.paged.sequence import Sequence

NO_HASH = -1


def block_hash(parent: int, tokens: tuple[int, ...]) -> int:
    """The chained hash of a full block: its tokens and everything before them."""
    return hash((parent, tokens))


@dataclass(slots=True)
class Block:
    """One KV block's bookkeeping: who uses it and which prefix it holds."""

    block_id: int
    ref_count: int = 0
    hash: int = NO_HASH
    parent_hash: int = NO_HASH
    token_ids: tuple[int, ...] = field(default=())

    def forget(self) -> None:
        self.hash = NO_HASH
        self.parent_hash = NO_HASH
        self.token_ids = ()


class BlockManager:
    """Hands out KV blocks to sequences and shares computed prefixes between them.

    Args:
        num_blocks: Blocks in the cache.
        block_size: Tokens per block.
        enable_prefix_caching: Register computed blocks and reuse them for new prompts.
    """

    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = True) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._fresh: deque[int] = deque(range(num_blocks))
        self._evictable: OrderedDict[int, None] = OrderedDict()  # ref 0, hashed, least recent first
        self._by_hash: dict[int, int] = {}
        self.num_queried_tokens = 0
        self.num_hit_tokens = 0

    # -- accounting ---------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self._fresh) + len(self._evictable)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        return len(self._by_hash)

    @property
    def hit_rate(self) -> float:
        return self.num_hit_tokens / self.num_queried_tokens if self.num_queried_tokens else 0.0

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # -- prefix matching ----------------------------------------------------------------------
    def match_prefix(self, seq: Sequence) -> list[int]:
        """Cached blocks holding the start of ``seq``'s tokens, longest run first to last.

        The last token is never matched: its logits must be computed to sample from.
        """
        if not self.enable_prefix_caching:
            return []
        hits: list[int] = []
        parent = NO_HASH
        for i in range((seq.num_tokens - 1) // self.block_size):
            tokens = seq.block_tokens(i)
            h = block_hash(parent, tokens)
            block_id = self._by_hash.get(h)
            if block_id is None:
                break
            block = self.blocks[block_id]
            if block.token_ids != tokens or block.parent_hash != parent:
                break  # a hash collision: not the same prefix after all
            hits.append(block_id)
            parent = h
        return hits

    # -- allocation ---------------------------------------------------------------------------
    def can_allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Whether ``seq`` (not yet holding blocks) can get its cached prefix plus ``num_new_tokens``."""
        hits = self.match_prefix(seq)
        cached = len(hits) * self.block_size
        need = self.blocks_needed(cached + num_new_tokens) - len(hits)
        revived = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        return need <= self.num_free_blocks - revived

    def allocate(self, seq: Sequence) -> None:
        """Give ``seq`` its cached prefix blocks; it then computes from the first uncached token."""
        if seq.block_table:
            raise RuntimeError(f"sequence {seq.seq_id} already holds blocks")
        hits = self.match_prefix(seq)
        for block_id in hits:
            self._take(block_id)
        seq.block_table = list(hits)
        seq.num_hashed_blocks = len(hits)
        seq.last_block_hash = self.blocks[hits[-1]].hash if hits else NO_HASH
        seq.num_computed_tokens = seq.num_cached_tokens = len(hits) * self.block_size
        self.num_queried_tokens += seq.num_tokens
        self.num_hit_tokens += seq.num_cached_tokens

    def new_blocks(self, seq: Sequence, num_new_tokens: int) -> int:
        """How many blocks ``seq`` must get to hold ``num_new_tokens`` more computed tokens."""
        return max(0, self.blocks_needed(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table))

    def can_append(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Whether blocks for ``num_new_tokens`` more computed tokens of ``seq`` are available."""
        return self.new_blocks(seq, num_new_tokens) <= self.num_free_blocks

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> None:
        """Grow ``seq``'s block table to hold ``num_new_tokens`` more computed tokens."""
        need = self.blocks_needed(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        if need > self.num_free_blocks:
            raise RuntimeError(f"out of KV blocks: need {need}, have {self.num_free_blocks}")
        for _ in range(need):
            seq.block_table.append(self._fresh_block())

    def commit(self, seq: Sequence) -> None:
        """Register ``seq``'s newly computed full blocks under their chained hashes."""
        if not self.enable_prefix_caching:
            return
        parent = seq.last_block_hash
        for i in range(seq.num_hashed_blocks, seq.num_full_blocks_computed):
            block = self.blocks[seq.block_table[i]]
            if block.hash != NO_HASH:  # a prefix hit: already registered
                parent = block.hash
            else:
                tokens = seq.block_tokens(i)
                parent_of_block, parent = parent, block_hash(parent, tokens)
                if parent not in self._by_hash:  # another sequence may have computed it first
                    block.hash, block.parent_hash, block.token_ids = parent, parent_of_block, tokens
                    self._by_hash[parent] = block.block_id
            seq.num_hashed_blocks = i + 1
            seq.last_block_hash = parent

    def trim(self, seq: Sequence) -> None:
        """Give back the blocks past ``seq``'s computed tokens: those that held only the KV of drafted tokens
        that were not kept (speculative decoding). They were never committed, so no hash names them."""
        keep = self.blocks_needed(seq.num_computed_tokens)
        tail, seq.block_table = seq.block_table[keep:], seq.block_table[:keep]
        for block_id in reversed(tail):
            self._release(self.blocks[block_id])

    def free(self, seq: Sequence) -> None:
        """Release ``seq``'s blocks; hashed ones stay cached until their memory is needed."""
        for block_id in reversed(seq.block_table):
            self._release(self.blocks[block_id])
        seq.block_table = []

    def reset_prefix_cache(self) -> None:
        """Drop every unreferenced cached block's hash (after a weight change, say)."""
        for block_id in list(self._evictable):
            self._forget(self.blocks[block_id])
            self._fresh.append(block_id)
        self._evictable.clear()

    # -- internals ----------------------------------------------------------------------------
    def _release(self, block: Block) -> None:
        block.ref_count -= 1
        if block.ref_count == 0 and block.block_id not in self._evictable:
            if block.hash != NO_HASH:
                self._evictable[block.block_id] = None
            else:
                self._fresh.append(block.block_id)

    def _take(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            self._evictable.pop(block_id, None)
        block.ref_count += 1

    def _fresh_block(self) -> int:
        if self._fresh:
            block_id = self._fresh.popleft()
        else:
            block_id, _ = self._evictable.popitem(last=False)  # evict the least recently freed
            self._forget(self.blocks[block_id])
        self.blocks[block_id].ref_count = 1
        return block_id

    def _forget(self, block: Block) -> None:
        if block.hash != NO_HASH and self._by_hash.get(block.hash) == block.block_id:
            del self._by_hash[block.hash]
        block.forget()


__all__ = ["BlockManager", "Block", "block_hash", "NO_HASH"]
