"""Typed views of the catalog endpoints: hardware, Hub search and variants, downloads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class GpuFacts:
    name: str
    vram_total: int = 0
    vram_free: int | None = None
    unified: bool = False


@dataclass(frozen=True, slots=True)
class BackendChoice:
    format: str
    backend: str
    reason: str


@dataclass(frozen=True, slots=True)
class HardwareFacts:
    cpu: str = ""
    cores: int | None = None
    ram_total: int = 0
    ram_available: int = 0
    gpus: tuple[GpuFacts, ...] = ()
    apple_silicon: bool = False
    disk_free: int | None = None
    os: str = ""
    notes: tuple[str, ...] = ()
    backends: tuple[BackendChoice, ...] = ()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HardwareFacts:
        hw = d.get("hardware") or {}
        cpu = hw.get("cpu")
        cores = None
        if isinstance(cpu, dict):  # the engine's HardwareInfo.to_dict() shape
            cores = cpu.get("cores_logical")
            cpu = f"{cpu.get('model', '')} ({cpu.get('arch', '')})".strip()
        gpus = tuple(
            GpuFacts(
                name=str(g.get("name", "GPU")),
                vram_total=int(g.get("vram_total", g.get("memory_total")) or 0),
                vram_free=g.get("vram_free", g.get("memory_free")),
                unified=bool(g.get("unified_memory", False)),
            )
            for g in hw.get("gpus") or ()
        )
        backends = tuple(
            BackendChoice(format=str(b.get("format", "")), backend=str(b.get("backend", "")), reason=str(b.get("reason", "")))
            for b in d.get("backends") or ()
        )
        return cls(
            cpu=str(cpu or ""),
            cores=cores,
            ram_total=int(hw.get("ram_total") or 0),
            ram_available=int(hw.get("ram_available") or 0),
            gpus=gpus,
            apple_silicon=bool(hw.get("apple_silicon", False)),
            disk_free=hw.get("disk_free"),
            os=str(hw.get("os") or ""),
            notes=tuple(hw.get("notes") or ()),
            backends=backends,
        )

    def backend_for(self, fmt: str) -> BackendChoice | None:
        return next((b for b in self.backends if b.format == fmt), None)


@dataclass(frozen=True, slots=True)
class HubRepo:
    repo: str
    downloads: int = 0
    likes: int = 0
    updated: str = ""
    formats: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HubRepo:
        return cls(
            repo=str(d.get("repo", "")),
            downloads=int(d.get("downloads") or 0),
            likes=int(d.get("likes") or 0),
            updated=str(d.get("updated") or ""),
            formats=tuple(d.get("formats") or ()),
        )


@dataclass(frozen=True, slots=True)
class HubVariant:
    name: str
    quantization: str | None = None
    format: str = ""
    size_bytes: int = 0
    fit: str = ""  # gpu | partial | cpu | none
    label: str = ""
    detail: str = ""
    recommended: bool = False
    files: tuple[str, ...] = ()
    memory_bytes: int | None = None  # what the engine's loader would allocate here (GET /api/fit's plan)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HubVariant:
        return cls(
            name=str(d.get("name", "")),
            quantization=d.get("quantization"),
            format=str(d.get("format") or ""),
            size_bytes=int(d.get("size_bytes") or 0),
            fit=str(d.get("fit") or ""),
            label=str(d.get("label") or ""),
            detail=str(d.get("detail") or ""),
            recommended=bool(d.get("recommended", False)),
            files=tuple(str(f.get("path", "")) if isinstance(f, dict) else str(f) for f in d.get("files") or ()),
            memory_bytes=d.get("memory_bytes"),
        )


@dataclass(frozen=True, slots=True)
class VariantList:
    repo: str
    variants: tuple[HubVariant, ...]
    recommended: str | None = None
    reason: str = ""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> VariantList:
        rec = d.get("recommendation") or {}
        return cls(
            repo=str(d.get("repo", "")),
            variants=tuple(HubVariant.from_json(v) for v in d.get("variants") or ()),
            recommended=rec.get("variant"),
            reason=str(rec.get("reason") or ""),
        )


@dataclass(frozen=True, slots=True)
class Download:
    id: str
    repo: str
    variant: str
    state: str  # queued | running | paused | done | failed | cancelled
    bytes_done: int = 0
    bytes_total: int = 0
    speed: float = 0.0
    eta: float | None = None
    error: str | None = None
    model: str | None = None

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running", "paused")

    @property
    def fraction(self) -> float:
        return min(1.0, self.bytes_done / self.bytes_total) if self.bytes_total else 0.0

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Download:
        return cls(
            id=str(d.get("id", "")),
            repo=str(d.get("repo", "")),
            variant=str(d.get("variant", "")),
            state=str(d.get("state", "queued")),
            bytes_done=int(d.get("bytes_done") or 0),
            bytes_total=int(d.get("bytes_total") or 0),
            speed=float(d.get("speed") or 0.0),
            eta=d.get("eta"),
            error=d.get("error"),
            model=d.get("model"),
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

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FitFacts:
        plan = d.get("plan") or {}
        mem = plan.get("memory") or {}
        slots = int(plan.get("parallel") or 1)
        kv_words = {"f16": "16-bit", "q8_0": "8-bit", "q4_0": "4-bit", "fp8": "8-bit (FP8)"}
        summary = (
            f"{'1 slot' if slots == 1 else f'{slots} slots'} of {int(plan.get('n_ctx') or 0):,} tokens, "
            f"{kv_words.get(str(plan.get('kv_type')), plan.get('kv_type'))} KV cache, on {plan.get('where', 'CPU')}"
        )
        devices = tuple(
            DeviceFit(
                device=str(x.get("device", "")),
                name=str(x.get("name", "")),
                layers=int(x.get("layers") or 0),
                weights=int(x.get("weights_bytes") or 0),
                kv_cache=int(x.get("kv_cache_bytes") or 0),
                overhead=int(x.get("buffers_bytes") or 0) + int(x.get("runtime_bytes") or 0),
                usable=int(x.get("usable_bytes") or 0),
            )
            for x in plan.get("devices") or ()
        )
        return cls(
            model=str(d.get("model", "")),
            fits=bool(d.get("fits", plan.get("fits", False))),
            summary=summary,
            reason=str(plan.get("reason", "")),
            n_ctx=int(plan.get("n_ctx") or 0),
            parallel=slots,
            kv_type=str(plan.get("kv_type", "f16")),
            weights=int(mem.get("weights_bytes") or 0),
            kv_cache=int(mem.get("kv_cache_bytes") or 0),
            overhead=int(mem.get("buffers_bytes") or 0) + int(mem.get("runtime_bytes") or 0),
            devices=devices,
        )


@dataclass(frozen=True, slots=True)
class FoundModel:
    """A model another app keeps, as ``GET /api/other-apps`` lists it."""

    name: str
    origin: str
    origin_label: str
    size_bytes: int = 0


@dataclass(frozen=True, slots=True)
class OtherAppsFound:
    """The other apps' models Hearth does not list yet, and the sentence that sums them up."""

    models: tuple[FoundModel, ...] = ()
    total_bytes: int = 0
    summary: str = ""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OtherAppsFound:
        models = tuple(
            FoundModel(str(m["name"]), str(m["origin"]), str(m.get("origin_label") or m["origin"]), int(m.get("size_bytes") or 0))
            for m in d.get("models", [])
        )
        return cls(models, int(d.get("total_bytes") or 0), str(d.get("summary") or ""))


@dataclass(frozen=True, slots=True)
class RecommendedModel:
    """One of Hearth's recommended models, as ``GET /api/hub/recommended`` labels it for this machine."""

    repo: str
    name: str
    category: str
    description: str = ""
    variant: str = ""  # the suggested variant, else the smallest
    suggested: str | None = None  # None: no variant fits here
    size_bytes: int = 0
    fit: str = ""  # gpu | partial | cpu | none
    label: str = ""
    reason: str = ""
    memory_bytes: int | None = None
    live: bool = False  # the hub's details below came with it
    downloads: int | None = None
    likes: int | None = None
    updated: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RecommendedModel:
        return cls(
            repo=str(d.get("repo", "")),
            name=str(d.get("name") or d.get("repo", "")),
            category=str(d.get("category") or ""),
            description=str(d.get("description") or ""),
            variant=str(d.get("variant") or ""),
            suggested=d.get("suggested"),
            size_bytes=int(d.get("size_bytes") or 0),
            fit=str(d.get("fit") or ""),
            label=str(d.get("label") or ""),
            reason=str(d.get("reason") or ""),
            memory_bytes=d.get("memory_bytes"),
            live=bool(d.get("live", False)),
            downloads=d.get("downloads"),
            likes=d.get("likes"),
            updated=d.get("updated"),
        )


@dataclass(frozen=True, slots=True)
class RecommendedList:
    """``GET /api/hub/recommended``: the curated models in order, their groups, and the hub's state."""

    as_of: str
    models: tuple[RecommendedModel, ...]
    categories: tuple[tuple[str, str], ...] = ()  # (id, title) in display order
    asked_hub: bool = False
    hub_error: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RecommendedList:
        return cls(
            as_of=str(d.get("as_of") or ""),
            models=tuple(RecommendedModel.from_json(m) for m in d.get("models") or ()),
            categories=tuple((str(c.get("id", "")), str(c.get("title", ""))) for c in d.get("categories") or ()),
            asked_hub=bool(d.get("asked_hub", False)),
            hub_error=d.get("hub_error"),
        )
