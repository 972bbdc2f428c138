"""Typed views of the worker's answers: what the pages show and what signals carry.

The worker's JSON is parsed by the models it answers with (:mod:`engine.server.api_models`, shared by both
ends); :class:`ModelInfo` is that module's. The classes here are the app's own views built from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.server.api_models import ModelInfo, ServerStats


@dataclass(frozen=True, slots=True)
class ApiError:
    """A failed call, with a sentence a person can act on."""

    message: str
    status: int = 0  # HTTP status; 0 when the worker could not be reached
    code: str | None = None
    endpoint: str = ""

    @property
    def missing_endpoint(self) -> bool:
        return self.status == 404 and self.code in (None, "not_found")


@dataclass(frozen=True, slots=True)
class LoadedModelStats:
    name: str
    backend: str = ""
    running: int = 0
    waiting: int = 0
    slots: int = 0
    n_ctx: int | None = None
    generated_tokens: int = 0
    prefix_cache_hit_rate: float = 0.0


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    requests_in_flight: int = 0
    models: tuple[LoadedModelStats, ...] = ()
    # loaded names whose engine figures are another listed name's: they answer from its weights (a model made from
    # it with its own defaults, or a copy), so its counters are shown under each and counted once
    sharing: frozenset[str] = frozenset()

    @property
    def generated_tokens(self) -> int:
        return sum(m.generated_tokens for m in self.models if m.name not in self.sharing)

    def model(self, name: str) -> LoadedModelStats | None:
        return next((m for m in self.models if m.name == name), None)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StatsSnapshot:
        """``GET /api/stats``.

        Raises:
            pydantic.ValidationError: the answer is not the worker's stats.
        """
        stats = ServerStats.model_validate(d)
        models = tuple(
            LoadedModelStats(
                name=name,
                backend=s.backend,
                running=s.running,
                waiting=s.waiting,
                slots=s.slots,
                n_ctx=s.n_ctx_per_sequence,
                generated_tokens=s.generated_tokens,
                prefix_cache_hit_rate=s.prefix_cache_hit_rate,
            )
            for name, s in stats.models.items()
        )
        sharing: set[str] = set()
        for entry in stats.loaded:  # the first name of each load is counted, the others it lists are not
            if entry.name not in sharing:
                sharing.update(entry.shares_weights_with)
        return cls(requests_in_flight=stats.requests_in_flight, models=models, sharing=frozenset(sharing))


@dataclass(frozen=True, slots=True)
class StreamResult:
    """How a streamed answer ended, as the worker reported it."""

    finish_reason: str  # stop | length | cancelled
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    accepted_draft_tokens: int = 0  # speculative decoding's drafted tokens the model kept


@dataclass(frozen=True, slots=True)
class Metrics:
    """A few totals from /metrics (Prometheus text)."""

    requests_total: float = 0.0
    generated_tokens_total: float = 0.0
    ttft_sum: float = 0.0
    ttft_count: float = 0.0
    values: dict[str, float] = field(default_factory=dict)

    @property
    def mean_ttft(self) -> float | None:
        return self.ttft_sum / self.ttft_count if self.ttft_count else None

    @classmethod
    def parse(cls, text: str) -> Metrics:
        values: dict[str, float] = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name, _, value = line.rpartition(" ")
            try:
                number = float(value)
            except ValueError:
                continue
            base = name.split("{", 1)[0]
            values[base] = values.get(base, 0.0) + number
        return cls(
            requests_total=values.get("hearth_requests_total", 0.0),
            generated_tokens_total=values.get("hearth_generation_tokens_total", 0.0),
            ttft_sum=values.get("hearth_time_to_first_token_seconds_sum", 0.0),
            ttft_count=values.get("hearth_time_to_first_token_seconds_count", 0.0),
            values=values,
        )


__all__ = ["ApiError", "LoadedModelStats", "Metrics", "ModelInfo", "StatsSnapshot", "StreamResult"]
