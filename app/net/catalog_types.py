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
