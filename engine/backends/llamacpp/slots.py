"""The decode loop's sequence slots: where a prompt goes, and what of it the slot's KV holds already.

Slots are llama.cpp sequence ids, each with a KV stream of its own. A finished sequence leaves its tokens in
its slot as a cached prefix. A new prompt that holds all of an idle slot's last prompt (that chat's next turn,
or the same prompt again) takes the slot over in place. One that shares only a beginning with it (a system
prompt) leaves that conversation where it is, for its own next turn: the prompt goes to the least recently
used free slot, and the shared beginning is copied there (only the sequence's own cells move, not the whole
stream) instead of computed again. A prompt admitted beside another that is still prefilling the same
beginning (requests that arrive together with one system prompt) waits for that prefix and then copies it.

A sliding-window model (Gemma) keeps only a window of each sequence's cells: a cached prefix is used only
where its slot still holds the window before the prefix's end.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass, field

import llama_cpp

from engine.backends.base import common_prefix
from engine.backends.llamacpp.sequence import SeqStatus, Sequence

log = logging.getLogger(__name__)

# A shared beginning shorter than this is computed again rather than copied from another slot: a copy
# moves the source's cells through host memory (3 ms for a 250-token chat of the starter model on two
# cores, where computing a token of prompt takes about 6), and costs more from a GPU.
MIN_COPY_TOKENS = 8
# Prompt tokens computed even where the cache holds them: the last, for its logits, and the one before it (see place).
UNCACHED_TAIL = 2


@dataclass(eq=False)
class Slot:
    """A llama.cpp sequence id and the tokens whose KV it holds."""

    seq_id: int
    tokens: list[int] = field(default_factory=list)
    n_prompt: int = 0  # how many of ``tokens`` were its last request's prompt
    seq: Sequence | None = None
    last_used: float = 0.0


class SlotTable:
    """The slots of one llama.cpp context, and the prefix cache's figures.

    Args:
        ctx: The context.
        mem: Its KV cache (None for an encoder, which keeps none).
        n_slots: Sequence slots.
        n_swa: A sliding window's tokens (0: none).
        kv_unified: One KV buffer for every slot (cells are shared, a copy moves no data).
    """

    def __init__(
        self, ctx: llama_cpp.llama_context_p, mem, n_slots: int, *, n_swa: int = 0, kv_unified: bool = False
    ) -> None:
        self.ctx = ctx
        self.mem = mem
        self.n_swa = n_swa
        self.kv_unified = kv_unified
        self.slots = [Slot(seq_id=i) for i in range(n_slots)]
        self.cached_tokens = 0  # prompt tokens found in a slot's KV instead of computed
        self.prefix_hits = 0  # requests that found some

    def free(self) -> list[Slot]:
        """The slots no sequence holds."""
        return [s for s in self.slots if s.seq is None]

    def place(self, seq: Sequence, free: list[Slot]) -> None:
        """Give ``seq`` a slot (one of ``free``, or an idle slot whose last prompt it continues) with the longest
        prefix of its prompt cached there or copied from another slot, and set it prefilling from there."""
        # The last two prompt tokens are always computed, the last for its logits. A prompt computed cold ends in a
        # block of two tokens or more (unless a block's start leaves the last alone, as it then does here too), and
        # on some CPUs (AVX2) a token computed alone sums differently in the last bits from one computed beside
        # others, enough to flip a greedy near-tie: so the same prompt again gets the same answer as the first time.
        limit = seq.cut(max(0, len(seq.prompt) - UNCACHED_TAIL))
        if seq.stream.prompt_logprobs is not None:  # each prompt token's logits are wanted: none is read from a cache
            limit = 0
        best, best_key = None, (0, False)
        ahead, ahead_n = None, 0
        for slot in self.slots:
            n = seq.cut(min(common_prefix(slot.tokens, seq.prompt), limit))
            key = (n, slot.seq is None)  # the longest prefix; an idle slot on a tie
            if n > 0 and key > best_key:
                best, best_key = slot, key
            if slot.seq is not None and slot.seq.status is SeqStatus.PREFILL and slot.seq.copy_from is None:
                planned = seq.cut(min(common_prefix(slot.seq.prompt, seq.prompt), limit))
                if planned > ahead_n:
                    ahead, ahead_n = slot, planned
        best_n = best_key[0]
        if best is not None and best.seq is None and best_n + UNCACHED_TAIL >= min(best.n_prompt, len(best.tokens)):
            dst, n = best, best_n  # it continues that slot's last prompt: take it over in place
            self.rm(dst.seq_id, seq.pos(n), -1)
        else:
            # Keep every idle slot's conversation for its next turn: take the least recently used free
            # slot (an empty one first), keep what it shares itself, and copy a longer shared beginning.
            dst = min(free, key=lambda s: (len(s.tokens) > 0, s.last_used))
            n = seq.cut(min(common_prefix(dst.tokens, seq.prompt), limit))
            if best is not None and best is not dst and best_n >= n + MIN_COPY_TOKENS:
                self.rm(dst.seq_id, -1, -1)
                n = self.copy_prefix(best, dst, best_n, seq.pos(best_n))
            else:
                self.rm(dst.seq_id, seq.pos(n), -1)
        if not self.window_kept(dst.seq_id, seq.pos(n)):
            self.rm(dst.seq_id, -1, -1)
            n = 0
        dst.tokens = seq.prompt[:n]
        dst.n_prompt = len(seq.prompt)
        dst.seq = seq
        seq.slot = dst
        seq.n_past = n
        seq.status = SeqStatus.PREFILL
        if seq.paused:  # going on: its usage already counts what it found cached
            seq.paused = False
            return
        if ahead is not None and ahead_n >= n + MIN_COPY_TOKENS:
            seq.copy_from, seq.copy_len = ahead, ahead_n
        self._count_cached(seq, n)

    def prefix_ready(self, seq: Sequence, src: Slot) -> bool:
        """Settle ``seq``'s wait for the prefix ``src`` is prefilling: True once ``seq`` may prefill (with what
        ``src`` holds of its prompt copied, where that saves computing enough), False to wait."""
        have = seq.cut(min(common_prefix(src.tokens, seq.prompt), seq.copy_len))
        coming = (
            src.seq is not None
            and src.seq.status is SeqStatus.PREFILL
            and min(common_prefix(src.seq.prompt, seq.prompt), seq.copy_len) > have
        )
        if coming and have < seq.copy_len:
            return False
        seq.copy_from, seq.copy_len = None, 0
        if have >= seq.n_past + MIN_COPY_TOKENS:
            slot = seq.placed
            self.rm(slot.seq_id, -1, -1)
            have = self.copy_prefix(src, slot, have, seq.pos(have))
            slot.tokens = seq.prompt[:have]
            seq.n_past = have
            self.cached_tokens -= seq.stream.cached_tokens
            if seq.stream.cached_tokens:
                self.prefix_hits -= 1
            self._count_cached(seq, have)
        return True

    def _count_cached(self, seq: Sequence, n: int) -> None:
        seq.stream.cached_tokens = n
        self.cached_tokens += n
        if n:
            self.prefix_hits += 1

    def rm(self, seq_id: int, p0: int, p1: int) -> None:
        """Remove slot ``seq_id``'s cells at positions ``p0`` to ``p1`` (-1: open-ended)."""
        if self.mem is not None:  # llama.cpp does nothing without a KV cache either
            llama_cpp.llama_memory_seq_rm(self.mem, seq_id, p0, p1)

    def window_kept(self, seq_id: int, pos: int) -> bool:
        """Whether a sliding-window model's KV of ``seq_id`` still holds the window before ``pos``, where a cached
        prefix that ends there goes on. llama.cpp's SWA cache drops a sequence's cells that have left its window
        (as it grows, and in a copy of it to another slot), so a prefix that ends further back has lost them."""
        if self.n_swa <= 0 or pos <= 0 or self.mem is None:
            return True
        first = llama_cpp.llama_memory_seq_pos_min(self.mem, seq_id)
        return 0 <= first <= max(0, pos - self.n_swa)

    def copy_prefix(self, src: Slot, dst: Slot, n: int, pos: int) -> int:
        """Give ``dst`` (emptied) the KV of ``src``'s first ``n`` tokens (positions below ``pos``); return how many
        it got (0 or ``n``)."""
        if self.mem is None or self.kv_unified:  # cells are shared: no data moves
            if self.mem is not None:
                llama_cpp.llama_memory_seq_cp(self.mem, src.seq_id, dst.seq_id, 0, pos)
            return self._window_copied(dst, n, pos)
        # Separate streams: llama.cpp's own cross-stream copy moves the whole stream buffer (every cell of
        # the context, used or not), so move only the source sequence's cells, then drop what is not shared.
        # Of a sliding window's cells that takes only the source's last window: none of use to a prefix that ends
        # before it (checked after the copy too), so it is not made.
        if self.n_swa > 0:
            if llama_cpp.llama_memory_seq_pos_max(self.mem, src.seq_id) >= max(self.n_swa, pos):
                return 0
        src_id, dst_id = llama_cpp.llama_seq_id(src.seq_id), llama_cpp.llama_seq_id(dst.seq_id)
        size = llama_cpp.llama_state_seq_get_size(self.ctx, src_id)
        try:
            cells = (ctypes.c_uint8 * size)()  # held only for the copy: a long chat's cells can be gigabytes
            got = llama_cpp.llama_state_seq_get_data(self.ctx, cells, size, src_id)
            copied = bool(got) and bool(llama_cpp.llama_state_seq_set_data(self.ctx, cells, got, dst_id))
        except MemoryError:
            copied = False
        if not copied:
            log.warning("could not copy a cached prefix between slots; computing it again")
            self.rm(dst.seq_id, -1, -1)
            return 0
        self.rm(dst.seq_id, pos, -1)
        return self._window_copied(dst, n, pos)

    def _window_copied(self, dst: Slot, n: int, pos: int) -> int:
        """``n``, or 0 (``dst`` emptied) where the copy lacks a sliding window's cells before ``pos`` (its source
        had gone a window past them)."""
        if self.window_kept(dst.seq_id, pos):
            return n
        self.rm(dst.seq_id, -1, -1)
        return 0


__all__ = ["MIN_COPY_TOKENS", "Slot", "SlotTable"]
