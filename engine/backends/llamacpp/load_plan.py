"""The llama.cpp loader's side of the memory model: read the GGUF file (and the projector's and draft model's
loaded beside it), take the machine's budget now, and plan context, slots, KV cache type and GPU layers with
:func:`engine.fit.plan_load`."""

from __future__ import annotations

import logging
from pathlib import Path

from engine.backends.base import LoadOptions
from engine.backends.speculative import DRAFT
from engine.errors import InvalidRequest, ModelLoadError
from engine.fit.budget import MemoryBudget
from engine.fit.draft import draft_vocabulary_mismatch
from engine.fit.facts import facts_from_gguf, with_draft, with_projector
from engine.fit.memory import LLAMACPP_KV_TYPES
from engine.fit.plan import LoadPlan, plan_gguf

log = logging.getLogger(__name__)

# ggml type ids of llama.cpp's KV cache types
GGML_KV_TYPES = {"f16": 1, "q4_0": 2, "q8_0": 8}


def draft_path(name: str) -> Path:
    """The file of a draft model named by path or, where no file is there, by its registered name (a model's
    saved ``draft:MODEL`` setting; `hearth serve` looks names up itself)."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    from engine.catalog.registry import ModelRegistry, resolve_model
    from engine.errors import HearthError

    registry = ModelRegistry()
    try:
        return resolve_model(name, registry).path
    except HearthError:
        return path  # the load says the file does not exist
    finally:
        registry.close()


def draft_for(options: LoadOptions) -> Path | None:
    """The draft model's file ``options`` load beside the model (``--speculative draft:MODEL``), or None."""
    speculative = options.speculative
    return draft_path(speculative.draft_model or "") if speculative.mode == DRAFT else None


def machine_budget() -> MemoryBudget:
    """This machine's budget now: available RAM and each GPU's free memory, if llama.cpp can use GPUs."""
    import llama_cpp

    from engine.hardware import detect_hardware

    return MemoryBudget.from_hardware(detect_hardware(), live=True, gpu_offload=bool(llama_cpp.llama_supports_gpu_offload()))


def budget_for(options: LoadOptions) -> MemoryBudget:
    """``options.llamacpp.memory_budget`` bytes of RAM when given (tests, small machines), else the machine's."""
    given = options.llamacpp.memory_budget
    if given is not None:
        return MemoryBudget.ram_only(given)
    return machine_budget()


def plan_llamacpp_load(
    path: Path, options: LoadOptions, *, budget: MemoryBudget | None = None, mmproj: Path | None = None,
    draft: Path | None = None,
) -> LoadPlan:
    """The plan for loading ``path`` with ``options``; settings left None are chosen to fit, with the projector
    ``mmproj`` and the draft model ``draft`` (its KV cache has the model's slots and context) counted.

    Raises:
        InvalidRequest: an unknown KV cache type, or a quantized one without flash attention.
        ModelLoadError: the file cannot be read, or what was asked for does not fit (the message
            names what would).
    """
    plan = llamacpp_load_plan(path, options, budget=budget, mmproj=mmproj, draft=draft)
    if not plan.fits:
        raise ModelLoadError(str(path), plan.reason)
    return plan


def llamacpp_load_plan(
    path: Path, options: LoadOptions, *, budget: MemoryBudget | None = None, mmproj: Path | None = None,
    draft: Path | None = None,
) -> LoadPlan:
    """The plan :func:`plan_llamacpp_load` makes, whether or not it fits (``plan.fits`` says; the model
    pool sizes a model by it before making room).

    Raises:
        InvalidRequest: an unknown KV cache type, or a quantized one without flash attention.
        ModelLoadError: the file cannot be read.
    """
    kv_type = options.kv_type
    if kv_type is not None and kv_type not in LLAMACPP_KV_TYPES:
        raise InvalidRequest(f"The KV cache type must be one of {', '.join(LLAMACPP_KV_TYPES)}.", param="kv_type")
    try:
        facts = facts_from_gguf(path)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(str(path), f"its GGUF header cannot be read ({exc}).") from exc
    try:  # the projector's weights and encoder buffers load with the model
        facts = with_projector(facts, mmproj)
    except ValueError as exc:
        raise ModelLoadError(str(mmproj), f"the projector cannot be read ({exc}).") from exc
    try:  # the draft model's weights, KV cache and buffers load with it too, unless the backend refuses it
        why = draft_vocabulary_mismatch(path, draft) if draft is not None else None
        if why is None:
            facts = with_draft(facts, draft)
        else:
            log.info("the plan leaves out the draft model %s: its vocabulary differs (%s)", draft, why)
    except (OSError, ValueError) as exc:  # the backend refuses the draft with the reason, and the model loads without it
        log.info("the plan leaves out the draft model: %s", exc)
    try:
        plan = plan_gguf(
            facts,
            budget or budget_for(options),
            n_ctx=options.n_ctx,
            n_seq=options.n_seq_max,
            kv_type=kv_type,
            gpu_layers=options.n_gpu_layers,
            flash_attn=options.llamacpp.flash_attn,
            cpu_moe=options.llamacpp.cpu_moe,
        )
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="kv_type") from exc
    return plan


def llama_gpu_layers(plan: LoadPlan) -> int:
    """llama.cpp's n_gpu_layers for a plan: one more than the blocks when the output head goes too."""
    return plan.total_layers + 1 if plan.gpu_layers >= plan.total_layers else plan.gpu_layers


__all__ = [
    "plan_llamacpp_load", "llamacpp_load_plan", "budget_for", "machine_budget", "llama_gpu_layers", "draft_path",
    "draft_for", "GGML_KV_TYPES",
]  # fmt: skip
