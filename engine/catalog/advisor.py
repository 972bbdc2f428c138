"""The quantization advisor: how much memory each variant needs here, and which one to take.

Every figure comes from the one memory model in :mod:`engine.fit`, the same one the loaders plan
with: weights (file sizes, split parts summed), the KV cache of each slot at the chosen context
and KV cache type, llama.cpp's compute and output buffers, and the worker's runtime (on NVIDIA
also each GPU's CUDA context). Each variant gets a :class:`FitEstimate` holding the
:class:`engine.fit.LoadPlan` the loader would make on this machine at rest: fits fully on GPU,
partial offload (N of M layers), CPU only, or will not fit. Apple Silicon's unified memory counts
as GPU memory up to 75% of RAM.

Typical use (the server and the CLI do this)::

    listing = HubClient().repo("TheOrg/Some-Model-GGUF")
    advice = advise(listing.variants, hub.model_shape(listing), detect_hardware())
    advice.recommended, advice.reason, [e.label for e in advice.estimates]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from engine.backend_choice import choose_backend
from engine.catalog.shape import ModelShape
from engine.catalog.variants import Variant
from engine.fit.budget import MemoryBudget
from engine.fit.facts import ModelFacts, facts_from_shape
from engine.fit.memory import KV_TYPE_WORDS, compute_buffer_bytes, llamacpp_model_bytes, output_buffer_bytes
from engine.fit.plan import DEFAULT_CTX, PREFILL_BLOCK, LoadPlan, plan_load
from engine.fit.projector import ProjectorFacts, projector_from_size
from engine.fit.speed import CHAT_DEPTH, DEFAULT_MIN_TOKENS_PER_S, MachineSpeed, SpeedEstimate, estimate_speed
from engine.hardware import HardwareInfo

DEFAULT_CONTEXT = DEFAULT_CTX  # what the llama.cpp backend loads with when not told otherwise
_KV_TYPE_BY_BYTES = {2.0: "f16", 1.0: "q8_0", 0.5: "q4_0"}


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
    plan: LoadPlan | None = None
    speed: SpeedEstimate | None = None  # decoding with a chat's first exchanges in the cache (None: not measured)
    min_speed: float = DEFAULT_MIN_TOKENS_PER_S

    @property
    def slow(self) -> bool:
        """Whether it would decode under the threshold here (a model that fits but that nobody would wait for)."""
        return self.speed is not None and self.fit is not Fit.NONE and self.speed.slow(self.min_speed)

    @property
    def speed_label(self) -> str:
        """``about 38 tok/s``, ``slow here: about 1 tok/s``, or empty (not measured, or it does not fit)."""
        if self.speed is None or self.fit is Fit.NONE:
            return ""
        return self.speed.label(self.min_speed)

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
            "plan": self.plan.to_dict() if self.plan is not None else None,
            "speed": self.speed.to_dict() if self.speed is not None else None,
            "speed_label": self.speed_label,
            "slow": self.slow,
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
    weights_bytes: int,
    shape: ModelShape,
    *,
    context_length: int,
    kv_dtype_bytes: float = 2.0,
    facts: ModelFacts | None = None,
) -> MemoryEstimate:
    """Memory one sequence of ``context_length`` tokens takes with a model of ``weights_bytes`` and ``shape``.

    The overhead is llama.cpp's: compute and output buffers and its bookkeeping (not the worker's
    own runtime, which :class:`engine.fit.LoadPlan` adds).
    """
    facts = facts or facts_from_shape(shape, weights_bytes)
    overhead = (
        compute_buffer_bytes(facts, n_ubatch=PREFILL_BLOCK, n_ctx=context_length)
        + output_buffer_bytes(facts, n_outputs=1)
        + llamacpp_model_bytes(facts)
    )
    return MemoryEstimate(
        weights=int(weights_bytes),
        kv_cache=shape.kv_bytes_per_token(kv_dtype_bytes) * int(context_length),
        overhead=int(overhead),
    )


def _gpu_plan_or_cpu(facts: ModelFacts, hardware: HardwareInfo, backend: str, gpu_offload: bool, **kw: Any) -> LoadPlan:
    """The loader's plan at rest; off the GPU when it does not fit there and RAM can hold it."""
    plan = plan_load(facts, MemoryBudget.from_hardware(hardware, live=False, gpu_offload=gpu_offload), backend=backend, **kw)
    gpu = hardware.best_gpu
    if plan.fits or not gpu_offload or gpu is None or gpu.unified_memory:
        return plan
    cpu = plan_load(facts, MemoryBudget.from_hardware(hardware, live=False, gpu_offload=False), backend=backend, **kw)
    return cpu if cpu.fits else plan


def estimate_fit(
    variant: Variant,
    shape: ModelShape,
    hardware: HardwareInfo,
    *,
    context_length: int,
    kv_dtype_bytes: float = 2.0,
    kv_type: str | None = None,
    parallel: int | None = None,
    gpu_offload_supported: bool | None = None,
    projector: ProjectorFacts | None = None,
    machine: MachineSpeed | None = None,
    min_speed: float = DEFAULT_MIN_TOKENS_PER_S,
) -> FitEstimate:
    """How ``variant`` fits ``hardware`` at ``context_length`` tokens (the loader's plan at rest), and with
    ``machine`` (its measured rates) how fast it would decode with a chat's first exchanges in the cache.

    Args:
        kv_type: The KV cache type (``f16``, ``q8_0``, ``q4_0``; ``fp8`` for the paged engine);
            None lets the plan choose, as the loader does.
        kv_dtype_bytes: The older way to say it (2: f16, 1: q8_0), used when ``kv_type`` is None
            and it is not 2.
        parallel: Slots to plan for (None: as the loader chooses).
        projector: The facts of the projector pulled with the variant (:meth:`HubClient.projector_facts`);
            guessed from its file size when the variant has one and this is None.
        min_speed: Tokens per second under which it is "slow here".
    """
    if kv_type is None and kv_dtype_bytes != 2.0:
        kv_type = _KV_TYPE_BY_BYTES.get(kv_dtype_bytes, "q8_0")
    choice = choose_backend(variant.format, hardware=hardware, gpu_offload_supported=gpu_offload_supported)
    facts = facts_from_shape(shape, variant.weights_bytes, format=variant.format, bits_per_weight=variant.bits_per_weight)
    if variant.projector is not None:  # it sees: the projector's weights and encoder load with it
        facts = replace(facts, projector=projector or projector_from_size(variant.projector.size))

    def planned(f: ModelFacts) -> LoadPlan:
        try:
            return _gpu_plan_or_cpu(
                f, hardware, choice.backend, choice.gpu_offload, n_ctx=context_length, n_seq=parallel, kv_type=kv_type
            )
        except ValueError:  # a KV type this backend does not have: plan with its own
            return _gpu_plan_or_cpu(f, hardware, choice.backend, choice.gpu_offload, n_ctx=context_length, n_seq=parallel)

    plan = planned(facts)
    text_only = planned(replace(facts, projector=None)) if facts.projector is not None and not plan.fits else None
    kv_bytes = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "fp8": 1.0}[plan.kv_type]
    mem = estimate_memory(variant.weights_bytes, shape, context_length=context_length, kv_dtype_bytes=kv_bytes, facts=facts)
    gpu = hardware.best_gpu
    layers = shape.layers
    total = plan.memory.total
    opened = plan.describe()
    sees = f", {_gb(plan.projector_bytes)} of it the projector that lets it see" if plan.projector_bytes else ""
    need = (
        f"needs about {_gb(total)} as loaded here ({opened}: {_gb(plan.memory.weights)} weights + "
        f"{_gb(plan.memory.kv_cache)} KV cache + {_gb(plan.memory.buffers + plan.memory.runtime)} buffers and runtime{sees})"
    )
    lever = ""
    if plan.kv_type in ("q8_0", "q4_0", "fp8") and kv_type is None:
        lever = f"It fits at {context_length:,} tokens with an {KV_TYPE_WORDS[plan.kv_type]} KV cache. "

    speed = None
    if machine is not None and plan.fits:
        speed = estimate_speed(facts, machine, plan=plan, label=variant.name, depth=min(CHAT_DEPTH, plan.n_ctx))

    def result(fit: Fit, label: str, reason: str) -> FitEstimate:
        if speed is not None and fit is not Fit.NONE:
            reason += f" It would decode {speed.describe()}; it {speed.describe_batching()}."
        return FitEstimate(
            variant=variant.name,
            format=variant.format,
            fit=fit,
            label=label,
            reason=lever + reason,
            memory=mem,
            backend=choice.backend,
            gpu_layers=plan.gpu_layers,
            total_layers=layers,
            quality=variant.quality,
            plan=plan,
            speed=speed,
            min_speed=min_speed,
        )

    if text_only is not None and text_only.fits:
        return result(
            Fit.NONE,
            "will not fit with its projector",
            f"It fits without its projector ({_gb(text_only.memory.total)}), but the projector's weights and image encoder "
            f"({_gb(plan.projector_bytes)}) take it over: {plan.reason} Pull it with --mmproj-variant none to use it for "
            "text only.",
        )
    if not plan.fits:
        return result(Fit.NONE, "will not fit", plan.reason)
    on_gpu = [d for d in plan.devices if d.device != "cpu"]
    usable = sum(d.usable for d in on_gpu)
    if gpu is not None and on_gpu and plan.gpu_layers >= plan.total_layers and plan.cpu_moe:
        names = " and ".join(d.name for d in on_gpu)
        which = "every layer's" if plan.cpu_moe >= layers else f"those of {plan.cpu_moe} of its {layers} layers"
        return result(
            Fit.PARTIAL,
            "fits with experts on the CPU",
            f"It {need}: every layer fits in the {names}'s {_gb(usable)} usable with its MoE experts ({which}) kept in RAM.",
        )
    if gpu is not None and on_gpu and plan.gpu_layers >= plan.total_layers:
        names = " and ".join(d.name for d in on_gpu)
        return result(Fit.GPU, "fits fully on GPU", f"It {need}, within the {names}'s {_gb(usable)} usable.")
    if gpu is not None and on_gpu and plan.gpu_layers > 0:
        n = plan.gpu_layers
        hint = plan.reason.split(" It needs ", 1)[-1].split(").", 1)[-1]
        return result(
            Fit.PARTIAL,
            f"partial offload ({n} of {layers} layers)",
            f"It {need}: {n} of {layers} layers fit in the {gpu.name}'s {_gb(usable)} usable and the rest runs from RAM.{hint}",
        )
    if gpu is not None and choice.gpu_offload:
        gpu_usable = MemoryBudget.from_hardware(hardware, live=False).gpus[0].usable if hardware.gpus else 0
        return result(
            Fit.CPU,
            "CPU only",
            f"It {need}, more than the {gpu.name}'s {_gb(gpu_usable)} usable, so it runs on the CPU from RAM, slowly.",
        )
    why = choice.reason if gpu is not None else "there is no GPU"
    return result(Fit.CPU, "CPU only", f"It {need} and runs on the CPU from RAM ({why}).")


# Formats of one quality class (legacy and non-linear 4- and 5-bit blocks, about the same perplexity at the same
# size): between these, at sizes within a tenth, the advisor takes the one whose kernels run faster here.
_QUALITY_CLASSES = (frozenset({"Q4_0", "Q4_1", "IQ4_NL", "IQ4_XS", "MXFP4"}), frozenset({"Q5_0", "Q5_1"}))
SAME_SIZE = 0.10
FASTER = 1.10  # decoding or reading prompts this much faster, and neither slower by more than a tenth


def _same_class(a: FitEstimate, b: FitEstimate) -> bool:
    return any(a.variant.upper() in c and b.variant.upper() in c for c in _QUALITY_CLASSES)


def _faster_twin(e: FitEstimate, items: Sequence[FitEstimate]) -> FitEstimate | None:
    """A variant of ``e``'s quality class and size whose kernels run clearly faster here, or None."""
    if e.speed is None:
        return None
    best: tuple[float, FitEstimate] | None = None
    for o in items:
        if o is e or o.speed is None or not _same_class(e, o) or abs(o.memory.weights - e.memory.weights) > SAME_SIZE * e.memory.weights:
            continue
        d, p = o.speed.decode_tok_s / e.speed.decode_tok_s, o.speed.prompt_tok_s / e.speed.prompt_tok_s
        if min(d, p) >= 0.9 and max(d, p) >= FASTER and (best is None or o.speed.prompt_tok_s > best[0]):
            best = (o.speed.prompt_tok_s, o)
    return best[1] if best is not None else None


def _recommend(
    estimates: Sequence[FitEstimate], hardware: HardwareInfo, ctx: int, min_speed: float = DEFAULT_MIN_TOKENS_PER_S
) -> tuple[str | None, str]:
    why_fast = ""

    def best(items: list[FitEstimate]) -> FitEstimate:
        nonlocal why_fast
        # A variant that fits only with a 4-bit KV cache ranks below those that fit with 8 or 16 bits:
        # the cache loses more than the next quantization step gains.
        top = max(items, key=lambda e: (e.plan is None or e.plan.kv_type != "q4_0", e.quality, -e.memory.total))
        twin = _faster_twin(top, items)
        if twin is None or twin.speed is None or top.speed is None:
            return top
        why_fast = (
            f" {twin.variant} rather than {top.variant}: about the same size and quality, and llama.cpp's {twin.variant} "
            f"kernels run faster on this {'GPU' if twin.gpu_layers else 'CPU'} (measured: about "
            f"{twin.speed.decode_tok_s:.0f} against {top.speed.decode_tok_s:.0f} tok/s decoding, "
            f"{twin.speed.prompt_tok_s:.0f} against {top.speed.prompt_tok_s:.0f} reading prompts)."
        )
        return twin

    def about(e: FitEstimate) -> str:
        fast = f", {e.speed.label(min_speed)}" if e.speed is not None else ""
        return f"about {_gb(e.plan.memory.total if e.plan else e.memory.total)} with {ctx:,} tokens of context{fast}"

    usable = [e for e in estimates if not e.slow]
    slow = [e for e in estimates if e.slow]
    variant, reason = _choose(usable, hardware, ctx, best, about)
    if variant is None and slow:
        e = max(slow, key=lambda e: e.speed.decode_tok_s if e.speed else 0.0)
        return None, (
            f"Every variant that fits would decode under {min_speed:g} tok/s here; the fastest, {e.variant}, "
            f"{e.speed.describe() if e.speed else 'too'}. Try a smaller model."
        )
    if variant is not None and slow:
        reason += f" Left out as slow here (under {min_speed:g} tok/s): {', '.join(e.variant for e in slow)}."
    return variant, reason + why_fast


def _choose(
    estimates: Sequence[FitEstimate],
    hardware: HardwareInfo,
    ctx: int,
    best: Callable[[list[FitEstimate]], FitEstimate],
    about: Callable[[FitEstimate], str],
) -> tuple[str | None, str]:
    """The variant to take among ``estimates`` (those fast enough here), by where it fits, and the reason."""
    gpu = hardware.best_gpu
    full = [e for e in estimates if e.fit is Fit.GPU]
    if full:
        e = best(full)
        return e.variant, (
            f"{e.variant} is the highest-quality variant that fits fully on the {gpu.name if gpu else 'GPU'} "
            f"({about(e)})."
        )
    partial = [e for e in estimates if e.fit is Fit.PARTIAL]
    cpu = [e for e in estimates if e.fit is Fit.CPU]
    if gpu is None and cpu:
        e = best(cpu)
        return e.variant, (
            f"{e.variant} is the highest-quality variant that fits in this machine's RAM "
            f"({about(e)}); it runs on the CPU."
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
            f"that runs on the CPU from RAM ({about(e)})."
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
    kv_type: str | None = None,
    parallel: int | None = None,
    gpu_offload_supported: bool | None = None,
    projector: ProjectorFacts | None = None,
    machine: MachineSpeed | None = None,
    min_speed: float = DEFAULT_MIN_TOKENS_PER_S,
) -> Advice:
    """Label every variant for ``hardware`` and recommend the highest-quality one that fits fully (with
    ``machine``, the measured rates: and decodes at ``min_speed`` tokens per second or more).

    Args:
        variants: The repo's variants (:attr:`engine.catalog.hub.RepoListing.variants`).
        shape: The model's shape (:meth:`engine.catalog.hub.HubClient.model_shape`).
        hardware: The machine (:func:`engine.hardware.detect_hardware`, or data from elsewhere).
        context_length: Tokens of context to plan for; the backend's default (4096, or the
            model's own length when shorter) when None.
        kv_dtype_bytes: Bytes per KV-cache element (2 for f16, 1 for q8_0); ``kv_type`` says it by name.
        kv_type: ``f16``, ``q8_0``, ``q4_0`` (llama.cpp) or ``fp8`` (paged); None: as the loader chooses.
        parallel: Slots to plan for; None: as the loader chooses.
        gpu_offload_supported: Whether llama.cpp can offload to the GPU (detected when None).
        projector: The facts of the projector pulled with the GGUF variants of a repo that sees
            (:meth:`engine.catalog.hub.HubClient.projector_facts`); guessed from its size when None.
        machine: This machine's measured rates (:func:`engine.fit.probe.speed_for`); None leaves speed out.
        min_speed: Tokens per second under which a variant is slow here and not recommended.
    """
    ctx = context_length or min(DEFAULT_CONTEXT, shape.context_length or DEFAULT_CONTEXT)
    estimates = tuple(
        estimate_fit(
            v,
            shape,
            hardware,
            context_length=ctx,
            kv_dtype_bytes=kv_dtype_bytes,
            kv_type=kv_type,
            parallel=parallel,
            gpu_offload_supported=gpu_offload_supported,
            projector=projector,
            machine=machine,
            min_speed=min_speed,
        )
        for v in variants
    )
    recommended, reason = _recommend(estimates, hardware, ctx, min_speed)
    return Advice(context_length=ctx, estimates=estimates, recommended=recommended, reason=reason, shape=shape)


__all__ = ["Fit", "MemoryEstimate", "FitEstimate", "Advice", "estimate_memory", "estimate_fit", "advise"]
