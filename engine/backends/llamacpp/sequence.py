"""One request's runtime state inside the llama.cpp decode loop."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.backends.llamacpp.media import MediaChunk, MediaPrompt
from engine.backends.llamacpp.sampler import SequenceSampler
from engine.backends.runtime import RequestStream

if TYPE_CHECKING:
    from engine.backends.llamacpp.slots import Slot


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    PREFILL = "prefill"
    DECODE = "decode"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """Runtime state of one request inside the loop."""

    stream: RequestStream
    prompt: list[int]
    sampler: SequenceSampler
    n_ctx: int
    status: SeqStatus = SeqStatus.WAITING
    slot: Slot | None = None
    n_past: int = 0
    pending: int | None = None
    copy_from: Slot | None = None  # a slot still prefilling this prompt's beginning
    copy_len: int = 0
    cancelled: bool = False
    # Seconds its sampling (a grammar's masks) took beyond the decode time of the steps it ran in: while
    # others decode, it sits steps out until they are repaid, so one costly grammar never slows every stream.
    sample_debt: float = 0.0
    # It gave its slot to another request and waits to go on (its prompt holds its answer so far).
    paused: bool = False
    last_step: int = 0  # the loop's step in which it last decoded (its request's choices take turns by it)
    admitted_step: int = 0  # the loop's step when it took its slot (how long its prompt has waited to be read)

    @property
    def group(self) -> str:
        """The client request it belongs to: the choices of one request share their slots (engine.backends.fair_share)."""
        return self.stream.request.group or self.stream.request_id

    @property
    def media(self) -> dict[int, MediaChunk]:
        """The prompt's pictures and sounds by their first position (none for a text prompt)."""
        return self.prompt.media if isinstance(self.prompt, MediaPrompt) else {}

    def cut(self, n: int) -> int:
        """``n`` prompt tokens, fewer where that would end inside a picture (whose KV is computed whole)."""
        return self.prompt.cut(n) if isinstance(self.prompt, MediaPrompt) else n

    def pos(self, i: int) -> int:
        """The position of the sequence's ``i``-th token: its index, less where pictures before it take fewer
        positions than tokens (M-RoPE models lay a picture out in two dimensions)."""
        return self.prompt.pos(i) if isinstance(self.prompt, MediaPrompt) else i

    @property
    def request_id(self) -> str:
        return self.stream.request_id

    @property
    def params(self):
        return self.stream.params

    @property
    def placed(self) -> Slot:
        """The slot of a sequence that is prefilling or decoding."""
        if self.slot is None:
            raise RuntimeError(f"request {self.request_id} is {self.status.value}, without a slot")
        return self.slot

    @property
    def next_token(self) -> int:
        """The sampled token a decoding sequence feeds in next."""
        if self.pending is None:
            raise RuntimeError(f"request {self.request_id} is {self.status.value}, without a sampled token")
        return self.pending


__all__ = ["SeqStatus", "Sequence"]
