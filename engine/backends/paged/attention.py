"""Paged attention in plain torch: the reference path, which is also what runs on the CPU.

The KV cache of one layer is two tensors ``[num_blocks, block_size, num_kv_heads, head_dim]``.
A token's KV goes to ``slot = block_id * block_size + offset``; a sequence's block table
lists its blocks in order. A step's tokens are laid out decodes first (one token per
sequence), then the prefill chunks one after another.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(slots=True)
class AttentionMetadata:
    """Where one step's tokens sit in the batch and in the KV cache.

    Decode rows come first: ``num_decodes`` sequences with one query token each. Prefill
    sequence ``i`` has ``prefill_query_lens[i]`` query tokens starting at row
    ``prefill_query_starts[i]`` and, counting them, ``prefill_context_lens[i]`` tokens of KV.
    """

    slot_mapping: torch.Tensor  # [num_tokens] int64, -1 for padding rows (nothing stored)
    num_decodes: int = 0
    decode_block_tables: torch.Tensor | None = None  # [num_decodes, max_blocks] int32
    decode_context_lens: torch.Tensor | None = None  # [num_decodes] int32
    max_decode_context_len: int = 0
    prefill_query_starts: tuple[int, ...] = ()
    prefill_query_lens: tuple[int, ...] = ()
    prefill_context_lens: tuple[int, ...] = ()
    prefill_block_tables: torch.Tensor | None = None  # [num_prefills, max_blocks] int32
    prefill_cu_query_lens: torch.Tensor | None = None  # [num_prefills + 1] int32, for the kernels
    prefill_context_lens_t: torch.Tensor | None = None  # [num_prefills] int32, for the kernels
    has_padding: bool = False

    @property
    def num_prefills(self) -> int:
        return len(self.prefill_query_lens)

    @property
    def max_prefill_query_len(self) -> int:
        return max(self.prefill_query_lens, default=0)

    @property
    def decode_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The decode rows' block tables and context lengths, which a step with decodes carries."""
        if self.decode_block_tables is None or self.decode_context_lens is None:
            raise ValueError(f"a step of {self.num_decodes} decodes came without their block tables")
        return self.decode_block_tables, self.decode_context_lens

    @property
    def prefill_tables(self) -> torch.Tensor:
        """The prefill sequences' block tables, which a step with prefills carries."""
        if self.prefill_block_tables is None:
            raise ValueError(f"a step of {self.num_prefills} prefills came without their block tables")
        return self.prefill_block_tables


def store_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    has_padding: bool = False,
) -> None:
    """Write each token's key and value into its slot.

    k, v: [num_tokens, num_kv_heads, head_dim]; caches: [num_blocks, block_size, num_kv_heads, head_dim].
    """
    if has_padding:
        keep = slot_mapping >= 0
        k, v, slot_mapping = k[keep], v[keep], slot_mapping[keep]
    n_kv, dim = k_cache.shape[-2:]
    for x, cache in ((k, k_cache), (v, v_cache)):
        _bytes(cache).view(-1, n_kv, dim).index_copy_(0, slot_mapping, _bytes(x.to(cache.dtype)))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """float8 tensors as their bytes: CPU index kernels do not take float8, and a copy is a copy."""
    return t.view(torch.uint8) if t.element_size() == 1 and t.is_floating_point() else t


def _select(cache: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return _bytes(cache).index_select(0, index).view(cache.dtype)


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """The first ``length`` tokens of one sequence's KV: [length, num_kv_heads, head_dim]."""
    block_size = cache.shape[1]
    n_blocks = -(-length // block_size)
    # index_select, not advanced indexing: the latter is pathologically slow on few CPU threads
    return _select(cache, block_table[:n_blocks]).flatten(0, 1)[:length]


#: On the CPU, a decode batch of at least this many sequences is attended in ``DECODE_GROUPS`` groups of similar
#: context length, each padded to its own longest context instead of the batch's, when that gathers at least
#: ``GROUP_GAIN`` times fewer keys and values (contexts spread evenly: about 1.5 times fewer).
GROUP_MIN_BATCH = 32
DECODE_GROUPS = 4
GROUP_GAIN = 1.2


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    max_context_len: int | None = None,
) -> torch.Tensor:
    """One query token per sequence against its paged context.

    q: [batch, num_heads, head_dim]; block_tables: [batch, max_blocks]; context_lens: [batch]
    -> [batch, num_heads, head_dim]
    """
    if q.device.type == "cpu" and q.shape[0] >= GROUP_MIN_BATCH:  # the lengths are on the host: no sync
        order = torch.argsort(context_lens)
        groups = order.tensor_split(DECODE_GROUPS)
        longest = [int(context_lens[g[-1]]) for g in groups]
        grouped = sum(n * len(g) for n, g in zip(longest, groups, strict=True))
        if grouped * GROUP_GAIN <= longest[-1] * q.shape[0]:
            out = torch.empty_like(q)
            for g, n in zip(groups, longest, strict=True):
                out[g] = _decode_padded(q[g], k_cache, v_cache, block_tables[g], context_lens[g], scale, n)
            return out
    return _decode_padded(q, k_cache, v_cache, block_tables, context_lens, scale, max_context_len)


def _decode_padded(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    max_context_len: int | None,
) -> torch.Tensor:
    """``decode_attention`` with every sequence's context padded to ``max_context_len``."""
    batch, n_heads, dim = q.shape
    block_size = k_cache.shape[1]
    if max_context_len is None:
        max_context_len = int(context_lens.max())
    n_blocks = max(1, -(-max_context_len // block_size))
    table = block_tables[:, :n_blocks].reshape(-1)
    shape = (batch, n_blocks * block_size, *k_cache.shape[2:])
    k = _select(k_cache, table).view(shape).to(q.dtype)  # [batch, n_blocks * block_size, num_kv_heads, head_dim]
    v = _select(v_cache, table).view(shape).to(q.dtype)
    positions = torch.arange(k.shape[1], device=q.device)
    mask = positions[None, :] < context_lens[:, None].to(positions.dtype)  # [batch, ctx]
    out = F.scaled_dot_product_attention(
        q.unsqueeze(2),  # [batch, num_heads, 1, head_dim]
        k.transpose(1, 2),  # [batch, num_kv_heads, ctx, head_dim]
        v.transpose(1, 2),
        attn_mask=mask[:, None, None, :],
        scale=scale,
        enable_gqa=True,
    )
    return out.squeeze(2)


def prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Causal attention of each prefill chunk over its cached prefix and itself.

    q: [num_prefill_tokens, num_heads, head_dim]; k, v: the chunk's fresh keys and values
    [num_prefill_tokens, num_kv_heads, head_dim], row 0 being the first prefill token of the batch.
    -> [num_prefill_tokens, num_heads, head_dim]
    """
    out = torch.empty_like(q)
    base = meta.prefill_query_starts[0] if meta.num_prefills else 0
    for i, (start, n, ctx) in enumerate(
        zip(meta.prefill_query_starts, meta.prefill_query_lens, meta.prefill_context_lens, strict=True)
    ):
        s = start - base
        qi = q[s : s + n].transpose(0, 1)  # [num_heads, n, head_dim]
        if ctx == n:  # nothing cached before this chunk: attend to the fresh keys, causally
            ki, vi = k[s : s + n], v[s : s + n]
            oi = F.scaled_dot_product_attention(
                qi, ki.transpose(0, 1), vi.transpose(0, 1), is_causal=True, scale=scale, enable_gqa=True
            )
        else:
            table = meta.prefill_tables[i]
            ki = gather_kv(k_cache, table, ctx).to(q.dtype)  # [ctx, num_kv_heads, head_dim]
            vi = gather_kv(v_cache, table, ctx).to(q.dtype)
            rows = torch.arange(n, device=q.device)[:, None] + (ctx - n)
            mask = torch.arange(ctx, device=q.device)[None, :] <= rows  # [n, ctx]
            oi = F.scaled_dot_product_attention(
                qi, ki.transpose(0, 1), vi.transpose(0, 1), attn_mask=mask, scale=scale, enable_gqa=True
            )
        out[s : s + n] = oi.transpose(0, 1)
    return out


__all__ = ["AttentionMetadata", "store_kv", "gather_kv", "decode_attention", "prefill_attention"]
