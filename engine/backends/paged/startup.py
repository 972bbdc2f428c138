"""From a model path to a running engine: read, plan (engine.fit), build, quantize, allocate the
planned KV cache, capture graphs."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.backends.base import LoadOptions
from engine.backends.paged.capability import check_cuda_config, triton_serves
from engine.backends.paged.config import EngineConfig
from engine.backends.paged.heap import keep_step_buffers
from engine.backends.paged.llm_engine import LLMEngine
from engine.backends.paged.load_plan import paged_load_plan
from engine.backends.paged.loader import Checkpoint, read_checkpoint
from engine.backends.paged.memory import checked_kv_blocks
from engine.backends.paged.model_runner import ModelRunner
from engine.backends.paged.models import build_model, model_args
from engine.backends.paged.ops import ForwardOps, TorchOps
from engine.errors import BackendUnavailable, ModelLoadError
from engine.fit.plan import LoadPlan

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


@dataclass(frozen=True, slots=True)
class LoadedEngine:
    checkpoint: Checkpoint
    engine: LLMEngine
    config: EngineConfig
    device: torch.device
    dtype: torch.dtype
    num_parameters: int
    plan: LoadPlan | None = None  # the memory model's plan the pool was allocated from


def pick_device_dtype(config: EngineConfig) -> tuple[torch.device, torch.dtype]:
    """CUDA with bf16 (fp16 before Ampere) when there is a GPU; the CPU in float32 otherwise, or in
    bfloat16 with int4 weights (the dtype torch's int4 CPU matmul is fast in)."""
    device = torch.device(config.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailable("paged", "device 'cuda' was asked for but torch sees no CUDA GPU.")
    if config.dtype is not None:
        if config.dtype not in DTYPES:
            raise ModelLoadError(config.dtype, f"unknown dtype; choose one of {', '.join(DTYPES)}.")
        return device, DTYPES[config.dtype]
    if device.type == "cuda":
        return device, torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return device, torch.bfloat16 if config.quantization == "int4" else torch.float32


def pick_ops(
    config: EngineConfig, device: torch.device, dtype: torch.dtype | None = None, head_dim: int | None = None
) -> ForwardOps:
    """TorchOps (reference) or TritonOps: Triton on CUDA when it is installed and serves the model
    (bfloat16 or float16, head size up to 128), unless told otherwise.

    Raises:
        BackendUnavailable: ``attention_backend`` is ``triton`` and the kernels cannot run this model here.
    """
    if config.attention_backend == "torch" or (config.attention_backend == "auto" and device.type != "cuda"):
        return TorchOps
    why_not = None
    if device.type == "cuda" and dtype is not None and head_dim is not None:
        why_not = triton_serves(str(dtype).removeprefix("torch."), head_dim)
    if why_not is not None:
        if config.attention_backend == "triton":
            raise BackendUnavailable("paged", f"{why_not}; set attention_backend to auto or torch.")
        log.info("running on the torch ops: %s", why_not)
        return TorchOps
    try:
        from engine.backends.paged.kernels import TritonOps
    except ImportError as exc:
        if config.attention_backend == "triton":
            raise BackendUnavailable("paged", f"the Triton kernels need the triton package ({exc}).") from exc
        return TorchOps
    return TritonOps


def check_device(config: EngineConfig, device: torch.device) -> None:
    """Refuse at load what the CUDA path cannot run (block size, FP8 on GPUs before compute capability 8.9).

    Raises:
        InvalidRequest: the configuration cannot run on this GPU.
    """
    if device.type != "cuda":
        return
    check_cuda_config(
        block_size=config.block_size, quantization=config.quantization, kv_cache_dtype=config.kv_cache_dtype,
        capability=torch.cuda.get_device_capability(device), gpu_name=torch.cuda.get_device_name(device),
    )  # fmt: skip


def start_engine(path: Path, options: LoadOptions) -> LoadedEngine:
    """Load the model at ``path`` and build an engine around it.

    Raises:
        ModelLoadError: the model cannot be read or does not fit.
        InvalidRequest: an engine option is out of range.
    """
    config = EngineConfig.from_options(options)
    device, dtype = pick_device_dtype(config)
    check_device(config, device)
    if config.quantization == "int4" and device.type == "cpu" and dtype != torch.bfloat16:
        log.warning("int4 weights are fast with bfloat16 activations; in %s they take a slow path", config.dtype)
    if device.type == "cpu" and options.n_threads:
        torch.set_num_threads(options.n_threads)  # process-wide: torch has one intra-op pool
    ckpt = read_checkpoint(path)
    args = model_args(ckpt.config, path=str(path))
    # The block pool, the context and a refusal come from the memory model, before any weight is read.
    plan = paged_load_plan(path, options, config=config, model_args=args, device_type=device.type,
                           dtype_bytes=dtype.itemsize)  # fmt: skip
    if not plan.fits:
        raise ModelLoadError(str(path), plan.reason)
    # Quantization starts from float32 weights; otherwise the weights take their final dtype at once.
    build_dtype = torch.float32 if config.quantization is not None else dtype
    model = build_model(ckpt.config, ckpt.weights(), dtype=build_dtype, device=torch.device("cpu"), path=str(path))
    if config.quantization is not None:
        from engine.backends.paged.quant import quantize_model

        quantize_model(model, config.quantization, device=device)
    model = model.to(device=device, dtype=dtype) if config.quantization is None else _move(model, device, dtype)
    config = dataclasses.replace(config, max_model_len=plan.n_ctx)
    kv_dtype = torch.float8_e4m3fn if config.kv_cache_dtype == "fp8" else dtype
    runner = ModelRunner(model, config, device, ops=pick_ops(config, device, dtype, model.args.dim_head),
                         kv_dtype=kv_dtype, end_ids=sorted(ckpt.tokenizer.eog_ids))  # fmt: skip
    blocks = checked_kv_blocks(runner, config, plan.kv_blocks or 0)
    if blocks != plan.kv_blocks:  # the GPU had less room than planned: the pool that fits, re-planned
        planned = plan.kv_blocks
        plan = paged_load_plan(path, options, config=dataclasses.replace(config, num_kv_blocks=max(2, blocks)),
                               model_args=args, device_type=device.type, dtype_bytes=dtype.itemsize)  # fmt: skip
        if not plan.fits or blocks < 2:
            raise ModelLoadError(str(path), f"the GPU had room for {blocks} of the {planned} KV blocks planned; {plan.reason}")
        plan = dataclasses.replace(plan, reason=f"{plan.reason} (planned {planned} blocks; the GPU had room for {blocks})")
        config = dataclasses.replace(config, max_model_len=plan.n_ctx)
        runner.config = config
    log.info("paged engine for %s: %s", path.name, plan.reason)
    runner.allocate_kv_cache(blocks)
    runner.capture_cuda_graphs()
    try:
        runner.warm_up()  # every kernel variant compiled now, not during the first requests
    except (RuntimeError, ValueError) as exc:  # a failed warm-up costs compiles later, not the load
        log.warning("the engine's warm-up failed (kernels will compile on first use): %s", exc)
    if device.type == "cpu":
        keep_step_buffers()  # after loading: the loader's temporary copies are given back first
    n_params = sum(p.numel() for p in model.parameters())
    return LoadedEngine(ckpt, LLMEngine(runner, config, blocks), config, device, dtype, n_params, plan)


def _move(model, device: torch.device, dtype: torch.dtype):
    """Move a quantized model: float tensors to ``dtype``, quantized ones keep theirs."""
    for module in model.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            keep = p.dtype in (torch.int8, torch.uint8, torch.float8_e4m3fn) or name.endswith("scale")
            p.data = p.data.to(device=device, dtype=p.dtype if keep else dtype)
        for name, b in list(module.named_buffers(recurse=False)):
            module._buffers[name] = b.to(device=device, dtype=b.dtype if name.endswith("scale") else dtype)
    return model


__all__ = ["start_engine", "LoadedEngine", "pick_device_dtype", "pick_ops", "check_device", "DTYPES"]
