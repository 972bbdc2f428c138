"""The paged loader's side of the memory model: its KV block pool, its context and its refusal come
from :func:`engine.fit.plan.plan_paged`, the plan `hearth fit` and ``/api/fit`` show for this engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.backends.options import LoadOptions
from engine.backends.paged.config import EngineConfig
from engine.errors import InvalidRequest, ModelLoadError
from engine.fit.budget import MemoryBudget
from engine.fit.facts import facts_from_files
from engine.fit.plan import LoadPlan, plan_paged


def machine_budget(device_type: str) -> MemoryBudget:
    """This machine's budget now: available RAM, and each GPU's free memory when the engine runs on CUDA."""
    from engine.hardware import detect_hardware

    return MemoryBudget.from_hardware(detect_hardware(), live=True, gpu_offload=device_type == "cuda")


def context_limit(args: Any) -> int:
    """The longest context the model's own arguments allow: its positions, and its sliding window (the
    engine's attention is full, so it stays within the window where the two agree)."""
    limit = int(args.max_position_embeddings)
    return min(limit, int(args.sliding_window)) if args.sliding_window else limit


def paged_load_plan(
    path: Path,
    options: LoadOptions,
    *,
    config: EngineConfig | None = None,
    model_args: Any = None,
    device_type: str | None = None,
    dtype_bytes: int | None = None,
    budget: MemoryBudget | None = None,
) -> LoadPlan:
    """The plan the paged loader makes for ``path`` with ``options`` (``plan.fits`` says whether it loads).

    Args:
        config: The engine config ``options`` give (made from them when None).
        model_args: The model's ``ModelArgs`` (its positions and sliding window cap the context); None:
            the context length the model's header or config.json gives.
        device_type, dtype_bytes: Where the engine runs and its dtype's size (None: as it would pick them).
        budget: The memory to plan within (None: this machine's now).

    Raises:
        ModelLoadError: the model's files cannot be read.
        InvalidRequest: an option is out of range.
    """
    config = config or EngineConfig.from_options(options)
    if device_type is None or dtype_bytes is None:
        from engine.backends.paged.startup import pick_device_dtype

        device, dtype = pick_device_dtype(config)
        device_type, dtype_bytes = device.type, dtype.itemsize
    try:
        facts = facts_from_files(path)
    except ValueError as exc:
        raise ModelLoadError(str(path), f"{exc}.") from exc
    limit = context_limit(model_args) if model_args is not None else facts.shape.context_length
    n_ctx = options.n_ctx or config.max_model_len
    if limit:
        n_ctx = min(n_ctx, int(limit))
    try:
        return plan_paged(
            facts, budget or machine_budget(device_type), n_ctx=n_ctx, n_seq=config.max_num_seqs,
            kv_type="fp8" if config.kv_cache_dtype == "fp8" else "f16", block_tokens=config.block_size,
            batch_tokens=config.max_num_batched_tokens, kv_blocks=config.num_kv_blocks,
            kv_share=config.kv_cache_fraction, dtype_bytes=dtype_bytes, quantization=config.quantization,
            ctx_asked=options.n_ctx is not None,
        )  # fmt: skip
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="kv_type") from exc


__all__ = ["paged_load_plan", "machine_budget", "context_limit"]
