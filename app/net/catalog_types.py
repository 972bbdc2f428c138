"""The catalog endpoints' answers: hardware, Hub search and variants, recommendations, downloads, other apps.

Each is parsed by the worker's own response model (:mod:`engine.server.api_models`); the fit plan also
gets a view of its own (:class:`FitFacts`), the few sums and the sentence the Hardware page shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.server.api_models import (
    BackendChoice,
    Download,
    DownloadList,
    FitAnswer,
    FoundModel,
    GpuInfo,
    HardwareReport,
    HubRepo,
    HubSearch,
    HubVariant,
    OtherAppsFound,
    RecommendedList,
    RecommendedModel,
    VariantList,
)


@dataclass(frozen=True, slots=True)
class DeviceFit:
    """One device under a fit plan: what it would hold, and what it may hold."""

    device: str  # "cpu", "gpu0"...
    name: str
    layers: int
    weights: int
    kv_cache: int
    overhead: int  # compute buffers and runtime
    usable: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.overhead


@dataclass(frozen=True, slots=True)
class FitFacts:
    """``GET /api/fit``: the engine's memory plan for a model (what its loader would allocate)."""

    model: str
    fits: bool
    summary: str  # "16 slots of 4,096 tokens, 16-bit KV cache, on CPU"
    reason: str
    n_ctx: int
    parallel: int
    kv_type: str
    weights: int
    kv_cache: int
    overhead: int
    devices: tuple[DeviceFit, ...] = ()
    speed: str = ""  # "about 38 tok/s (reads 0.10 GB a token at 4.1 GB/s measured) with 1,024 tokens in context"
    speed_full: str = ""  # the same with the whole context in the cache

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FitFacts:
        """The view of ``GET /api/fit``'s answer.

        Raises:
            pydantic.ValidationError: the answer is not a fit plan.
        """
        answer = FitAnswer.model_validate(d)
        plan, mem = answer.plan, answer.plan.memory
        devices = tuple(
            DeviceFit(
                device=x.device,
                name=x.name,
                layers=x.layers,
                weights=x.weights_bytes,
                kv_cache=x.kv_cache_bytes,
                overhead=x.buffers_bytes + x.runtime_bytes,
                usable=x.usable_bytes,
            )
            for x in plan.devices
        )
        return cls(
            model=answer.model,
            fits=answer.fits,
            summary=plan.summary,
            reason=plan.reason,
            n_ctx=plan.n_ctx,
            parallel=plan.parallel,
            kv_type=plan.kv_type,
            weights=mem.weights_bytes,
            kv_cache=mem.kv_cache_bytes,
            overhead=mem.buffers_bytes + mem.runtime_bytes,
            devices=devices,
            speed=f"{answer.speed_chat.summary} with {answer.speed_chat.depth:,} tokens in context" if answer.speed_chat else "",
            speed_full=f"{answer.speed.summary} with all {answer.speed.depth:,}" if answer.speed else "",
        )


__all__ = [
    "BackendChoice", "DeviceFit", "Download", "DownloadList", "FitFacts", "FoundModel", "GpuInfo", "HardwareReport",
    "HubRepo", "HubSearch", "HubVariant", "OtherAppsFound", "RecommendedList", "RecommendedModel", "VariantList",
]  # fmt: skip
