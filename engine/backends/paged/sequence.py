"""One request's scheduling state: its tokens, how many have KV computed, and its block table.

No torch here. A sequence's tokens are its prompt followed by what it generated; each step
computes KV for the next slice of them. When the slice reaches the last known token, that
step's logits give the next token. A decode step is the case of a one-token slice, and a
preempted sequence simply starts again from ``num_computed_tokens = 0``.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence as Seq
from typing import Any

from engine.types import SamplingParams

_ids = itertools.count()


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    """Runtime state of one request inside the scheduler.

    Args:
        prompt: Prompt token ids (at least one).
        params: Sampling parameters (read for ``max_tokens``).
        block_size: Tokens per KV block.
        request_id: The request's id (cancellation finds the sequence by it).
        owner: Whatever the caller attaches (the backend's per-request stream state).
    """

    __slots__ = (
        "seq_id", "token_ids", "num_prompt_tokens", "num_computed_tokens", "num_cached_tokens",
        "block_table", "status", "params", "block_size", "num_preemptions", "owner", "cancelled",
        "num_hashed_blocks", "last_block_hash", "request_id", "arrival_step",
    )  # fmt: skip

    def __init__(
        self, prompt: Seq[int], params: SamplingParams, *, block_size: int, request_id: str = "", owner: Any = None
    ) -> None:
        self.seq_id = next(_ids)
        self.request_id = request_id
        self.token_ids: list[int] = list(prompt)
        self.num_prompt_tokens = len(self.token_ids)
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0
        self.block_table: list[int] = []
        self.status = SequenceStatus.WAITING
        self.params = params
        self.block_size = block_size
        self.num_preemptions = 0
        self.owner = owner
        self.cancelled = False
        self.num_hashed_blocks = 0  # leading blocks whose chained hash is known
        self.last_block_hash = -1
        self.arrival_step = 0  # the scheduler's step count when it was added

    def __repr__(self) -> str:
        return (
            f"Sequence({self.seq_id}, {self.status.value}, tokens={self.num_tokens}, "
            f"computed={self.num_computed_tokens}, blocks={self.block_table})"
        )

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_completion_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def num_full_blocks_computed(self) -> int:
        return self.num_computed_tokens // self.block_size

    def block_tokens(self, index: int) -> tuple[int, ...]:
        """The token ids of block ``index`` (a full block unless it is the last)."""
        start = index * self.block_size
        return tuple(self.token_ids[start : start + self.block_size])

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)

    def reset_for_recompute(self) -> None:
        """Forget all computed KV (after preemption): the whole sequence is prefilled again."""
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0
        self.block_table = []
        self.num_hashed_blocks = 0
        self.last_block_hash = -1
        self.status = SequenceStatus.WAITING
        self.num_preemptions += 1


__all__ = ["Sequence", "SequenceStatus"]
