"""The quantization advisor: how much memory each variant needs here, and which one to take.

Memory = weights (file sizes, split parts summed) + KV cache at the chosen context length
(layers x KV heads x head dim x 2 x bytes per element) + runtime overhead (compute buffers, the
tokenizer, tensor bookkeeping; on NVIDIA also the CUDA context). Each variant gets a :class:`Fit`:
fits fully on GPU, partial offload (N of M layers), CPU only, or will not fit. Apple Silicon's
unified memory counts as GPU memory up to :data:`UNIFIED_GPU_SHARE` of RAM.

Typical use (the server and the CLI do this)::

    listing = HubClient().repo("TheOrg/Some-Model-GGUF")
    advice = advise(listing.variants, hub.model_shape(listing), detect_hardware())
    advice.recommended, advice.reason, [e.label for e in advice.estimates]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from engine.backends.choice import choose_backend
from engine.catalog.shape import ModelShape
from engine.catalog.variants import Variant
from engine.hardware import HardwareInfo

DEFAULT_CONTEXT = 4096  # what the llama.cpp backend loads with when not told otherwise
RUNTIME_BASE_BYTES = 32 * 1024**2  # graph, tokenizer, tensor metadata
RUNTIME_WEIGHT_SHARE = 0.04  # compute buffers grow with the model
GPU_CONTEXT_BYTES = 400 * 1024**2  # the CUDA context and cuBLAS workspace on an NVIDIA GPU
GPU_USABLE_SHARE = 0.90  # of a discrete GPU's memory (the desktop and drivers keep the rest)
UNIFIED_GPU_SHARE = 0.75  # of an Apple Silicon Mac's RAM that Metal lets the GPU wire
RAM_USABLE_SHARE = 0.80  # of RAM (the OS and other apps keep the rest)


class Fit(StrEnum):
    GPU = "gpu"
    PARTIAL = "partial"
    CPU = "cpu"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Bytes a loaded model takes: weights, KV cache and runtime overhead."""

    weights: int
    kv_cache: int
    overhead: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.overhead


@dataclass(frozen=True, slots=True)
class FitEstimate:
    """How one variant fits this machine, with its label and the reason in one sentence."""

    variant: str
    format: str
    fit: Fit
    label: str
    reason: str
    memory: MemoryEstimate
    backend: str
    gpu_layers: int
    total_layers: int
    quality: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "format": self.format,
            "fit": self.fit.value,
            "label": self.label,
            "reason": self.reason,
            "memory_bytes": self.memory.total,
            "weights_bytes": self.memory.weights,
            "kv_cache_bytes": self.memory.kv_cache,
            "overhead_bytes": self.memory.overhead,
            "backend": self.backend,
            "gpu_layers": self.gpu_layers,
            "total_layers": self.total_layers,
        }


@dataclass(frozen=True, slots=True)
class Advice:
    """Every variant's fit, and the one to take (None when nothing fits) with the reason."""

    context_length: int
    estimates: tuple[FitEstimate, ...]
    recommended: str | None
    reason: str
    shape: ModelShape

    def get(self, variant: str) -> FitEstimate | None:
        return next((e for e in self.estimates if e.variant == variant), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "context_length": self.context_length,
            "recommended": self.recommended,
            "reason": self.reason,
            "shape": self.shape.to_dict(),
            "variants": [e.to_dict() for e in self.estimates],
        }


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def estimate_memory(
    weights_bytes: int, shape: ModelShape, *, context_length: int, kv_dtype_bytes: float = 2.0
) -> MemoryEstimate:
    """Memory a model of ``weights_bytes`` and ``shape`` takes at ``context_length`` tokens (one sequence)."""
    return MemoryEstimate(
        weights=int(weights_bytes),
        kv_cache=shape.kv_bytes_per_token(kv_dtype_bytes) * int(context_length),
        overhead=int(RUNTIME_BASE_BYTES + RUNTIME_WEIGHT_SHARE * weights_bytes),
    )


def _budgets(hardware: HardwareInfo) -> tuple[int, int, int]:
    """(usable GPU bytes, bytes the GPU context takes, usable RAM bytes)."""
    ram = int(hardware.ram_total * RAM_USABLE_SHARE)
    gpu = hardware.best_gpu
    if gpu is None:
        return 0, 0, ram
    if gpu.unified_memory:
        return int(hardware.ram_total * UNIFIED_GPU_SHARE), 0, ram
    return int(gpu.memory_total * GPU_USABLE_SHARE), GPU_CONTEXT_BYTES, ram


def estimate_fit(
    variant: Variant,
    shape: ModelShape,
    hardware: HardwareInfo,
    *,
    context_length: int,
    kv_dtype_bytes: float = 2.0,
    gpu_offload_supported: bool | None = None,
) -> FitEstimate:
    """How ``variant`` fits ``hardware`` at ``context_length`` tokens."""
    mem = estimate_memory(variant.weights_bytes, shape, context_length=context_length, kv_dtype_bytes=kv_dtype_bytes)
    choice = choose_backend(variant.format, hardware=hardware, gpu_offload_supported=gpu_offload_supported)
    gpu_budget, gpu_ctx, ram_budget = _budgets(hardware)
    gpu = hardware.best_gpu
    layers = shape.layers
    need = f"needs about {_gb(mem.total)} ({_gb(mem.weights)} weights + {_gb(mem.kv_cache)} KV cache for {context_length:,} tokens + {_gb(mem.overhead)} runtime)"

    def result(fit: Fit, label: str, reason: str, gpu_layers: int) -> FitEstimate:
        return FitEstimate(
            variant=variant.name,
            format=variant.format,
            fit=fit,
            label=label,
            reason=reason,
            memory=mem,
            backend=choice.backend,
            gpu_layers=gpu_layers,
            total_layers=layers,
            quality=variant.quality,
        )

    if gpu is not None and choice.gpu_offload:
        if mem.total + gpu_ctx <= gpu_budget:
            return result(Fit.GPU, "fits fully on GPU", f"It {need}, within the {gpu.name}'s {_gb(gpu_budget)} usable.", layers)
        if choice.backend == "llamacpp":
            layer_bytes = (mem.weights + mem.kv_cache) / max(1, layers)
            n = min(layers - 1, max(0, math.floor((gpu_budget - gpu_ctx - mem.overhead) / layer_bytes)))
            in_ram = mem.total if gpu.unified_memory else (layers - n) * layer_bytes + mem.overhead
            if n > 0 and in_ram <= ram_budget:
                return result(
                    Fit.PARTIAL,
                    f"partial offload ({n} of {layers} layers)",
                    f"It {need}: {n} of {layers} layers fit in the {gpu.name}'s {_gb(gpu_budget)} usable and the rest runs from RAM.",
                    n,
                )
        if not gpu.unified_memory and mem.total <= ram_budget:
            return result(
                Fit.CPU,
                "CPU only",
                f"It {need}, more than the {gpu.name}'s {_gb(gpu_budget)} usable, so it runs on the CPU from RAM, slowly.",
                0,
            )
        where = f"the {gpu.name}'s {_gb(gpu_budget)} usable" if gpu.unified_memory else f"{_gb(ram_budget)} of usable RAM"
        return result(Fit.NONE, "will not fit", f"It {need}, more than {where}.", 0)
    if mem.total <= ram_budget:
        why = choice.reason if gpu is not None else "there is no GPU"
        return result(Fit.CPU, "CPU only", f"It {need} and runs on the CPU from RAM ({why}).", 0)
    return result(Fit.NONE, "will not fit", f"It {need}, more than this machine's {_gb(ram_budget)} of usable RAM.", 0)


def _recommend(estimates: Sequence[FitEstimate], hardware: HardwareInfo, ctx: int) -> tuple[str | None, str]:
    def best(items: list[FitEstimate]) -> FitEstimate:
        return max(items, key=lambda e: (e.quality, -e.memory.total))

    gpu = hardware.best_gpu
    full = [e for e in estimates if e.fit is Fit.GPU]
    if full:
        e = best(full)
        return e.variant, (
            f"{e.variant} is the highest-quality variant that fits fully on the {gpu.name if gpu else 'GPU'} "
            f"(about {_gb(e.memory.total)} with {ctx:,} tokens of context)."
        )
    partial = [e for e in estimates if e.fit is Fit.PARTIAL]
    cpu = [e for e in estimates if e.fit is Fit.CPU]
    if gpu is None and cpu:
        e = best(cpu)
        return e.variant, (
            f"{e.variant} is the highest-quality variant that fits in this machine's RAM "
            f"(about {_gb(e.memory.total)} with {ctx:,} tokens of context); it runs on the CPU."
        )
    if partial:
        mostly = [e for e in partial if e.gpu_layers * 2 >= e.total_layers]
        e = best(mostly) if mostly else max(partial, key=lambda e: (e.gpu_layers, e.quality))
        return e.variant, (
            f"No variant fits fully on the {gpu.name if gpu else 'GPU'}; {e.variant} keeps {e.gpu_layers} of "
            f"{e.total_layers} layers on it and the rest in RAM."
        )
    if cpu:
        e = best(cpu)
        return e.variant, (
            f"No variant fits on the {gpu.name if gpu else 'GPU'}; {e.variant} is the highest-quality one "
            f"that runs on the CPU from RAM (about {_gb(e.memory.total)})."
        )
    return None, (
        f"None of these variants fits in this machine's memory with {ctx:,} tokens of context; "
        "try a smaller model or a shorter context."
    )


def advise(
    variants: Sequence[Variant],
    shape: ModelShape,
    hardware: HardwareInfo,
    *,
    context_length: int | None = None,
    kv_dtype_bytes: float = 2.0,
    gpu_offload_supported: bool | None = None,
) -> Advice:
    """Label every variant for ``hardware`` and recommend the highest-quality one that fits fully.

    Args:
        variants: The repo's variants (:attr:`engine.catalog.hub.RepoListing.variants`).
        shape: The model's shape (:meth:`engine.catalog.hub.HubClient.model_shape`).
        hardware: The machine (:func:`engine.hardware.detect_hardware`, or data from elsewhere).
        context_length: Tokens of context to plan for; the backend's default (4096, or the
            model's own length when shorter) when None.
        kv_dtype_bytes: Bytes per KV-cache element (2 for f16, 1 for q8_0).
        gpu_offload_supported: Whether llama.cpp can offload to the GPU (detected when None).
    """
    ctx = context_length or min(DEFAULT_CONTEXT, shape.context_length or DEFAULT_CONTEXT)
    estimates = tuple(
        estimate_fit(
            v, shape, hardware, context_length=ctx, kv_dtype_bytes=kv_dtype_bytes, gpu_offload_supported=gpu_offload_supported
        )
        for v in variants
    )
    recommended, reason = _recommend(estimates, hardware, ctx)
    return Advice(context_length=ctx, estimates=estimates, recommended=recommended, reason=reason, shape=shape)


__all__ = ["Fit", "MemoryEstimate", "FitEstimate", "Advice", "estimate_memory", "estimate_fit", "advise"]
