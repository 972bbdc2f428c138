"""Typed views of the worker's JSON: what the pages show and what signals carry.

Parsing is forgiving (missing keys get defaults) so an older or newer worker degrades to
blank fields rather than an exception in the GUI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
class ModelInfo:
    name: str
    path: str = ""
    format: str = ""
    source: str = ""
    repo: str | None = None
    quantization: str | None = None
    size_bytes: int = 0
    architecture: str | None = None
    parameters: int | None = None
    context_length: int | None = None
    state: str = "not-loaded"
    kv_bytes_per_token: int | None = None
    origin: str | None = None  # another app's model, read in place: ollama | lmstudio | jan | gpt4all | hf-cache
    origin_label: str | None = None  # "Ollama", "LM Studio"...

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ModelInfo:
        return cls(
            name=str(d.get("name", "")),
            path=str(d.get("path") or ""),
            format=str(d.get("format") or ""),
            source=str(d.get("source") or ""),
            repo=d.get("repo"),
            quantization=d.get("quantization"),
            size_bytes=int(d.get("size_bytes") or 0),
            architecture=d.get("architecture"),
            parameters=d.get("parameters"),
            context_length=d.get("context_length"),
            state=str(d.get("state") or "not-loaded"),
            kv_bytes_per_token=d.get("kv_bytes_per_token"),
            origin=d.get("origin") or None,
            origin_label=d.get("origin_label") or d.get("origin") or None,
        )


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

    @property
    def generated_tokens(self) -> int:
        return sum(m.generated_tokens for m in self.models)

    def model(self, name: str) -> LoadedModelStats | None:
        return next((m for m in self.models if m.name == name), None)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StatsSnapshot:
        models = []
        for name, s in (d.get("models") or {}).items():
            models.append(
                LoadedModelStats(
                    name=name,
                    backend=str(s.get("backend", "")),
                    running=int(s.get("running", 0)),
                    waiting=int(s.get("waiting", 0)),
                    slots=int(s.get("slots", 0)),
                    n_ctx=s.get("n_ctx_per_sequence"),
                    generated_tokens=int(s.get("generated_tokens", 0)),
                    prefix_cache_hit_rate=float(s.get("prefix_cache_hit_rate", 0.0)),
                )
            )
        return cls(requests_in_flight=int(d.get("requests_in_flight", 0)), models=tuple(models))


@dataclass(frozen=True, slots=True)
class StreamResult:
    """How a streamed answer ended, as the worker reported it."""

    finish_reason: str  # stop | length | cancelled
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    drafted_tokens: int = 0  # speculative decoding's drafted tokens the model kept


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
