"""What the paged engine's CUDA path can serve, decided at load, before any kernel runs.

Plain rules over plain facts (a compute capability, a dtype, a head size), so they are unit-tested
without a GPU and shared with ``kernels.compile_check``, which compiles exactly what these allow.

- The Triton kernels serve bfloat16 and float16 models with head sizes up to 128; other models run
  on the torch ops (the reference), with one log line saying so.
- The KV cache's block size must be a power of two and at least 16 on CUDA.
- FP8 (e4m3) weights and the FP8 KV cache need compute capability 8.9 (Ada, Hopper) or newer.
"""

from __future__ import annotations

from engine.errors import InvalidRequest

MIN_FP8_CAPABILITY = (8, 9)
MIN_CUDA_BLOCK_SIZE = 16
TRITON_DTYPES = ("bfloat16", "float16")
TRITON_MAX_HEAD_DIM = 128


def fp8_capable(capability: tuple[int, int]) -> bool:
    """Whether a GPU of this compute capability has FP8 (e4m3) arithmetic and conversions."""
    return tuple(capability) >= MIN_FP8_CAPABILITY


def _cc(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


def check_cuda_config(
    *, block_size: int, quantization: str | None, kv_cache_dtype: str, capability: tuple[int, int], gpu_name: str
) -> None:
    """Refuse, in one sentence saying what to do, a configuration the CUDA path cannot run.

    Raises:
        InvalidRequest: the block size, FP8 weights or the FP8 KV cache cannot run on this GPU.
    """
    if block_size < MIN_CUDA_BLOCK_SIZE or block_size & (block_size - 1):
        raise InvalidRequest(
            f"'block_size' must be a power of two of at least {MIN_CUDA_BLOCK_SIZE} on a GPU (16, 32, 64 ...), "
            f"got {block_size}.",
            param="block_size",
        )
    if not fp8_capable(capability):
        if quantization == "fp8":
            raise InvalidRequest(
                f"FP8 weights need an NVIDIA GPU of compute capability 8.9 or newer (Ada, Hopper); the {gpu_name} "
                f"is {_cc(capability)}, so choose quantization int8 instead.",
                param="quantization",
            )
        if kv_cache_dtype == "fp8":
            raise InvalidRequest(
                f"The FP8 KV cache needs an NVIDIA GPU of compute capability 8.9 or newer (Ada, Hopper); the "
                f"{gpu_name} is {_cc(capability)}, so choose the f16 KV cache type instead.",
                param="kv_type",
            )


def triton_serves(dtype_name: str, head_dim: int) -> str | None:
    """None when the Triton kernels serve a model of this dtype and head size, else the reason they do not."""
    if dtype_name not in TRITON_DTYPES:
        return f"the Triton kernels serve bfloat16 and float16 models, and this one runs in {dtype_name}"
    if head_dim > TRITON_MAX_HEAD_DIM:
        return f"the Triton kernels serve head sizes up to {TRITON_MAX_HEAD_DIM}, and this model's is {head_dim}"
    return None


__all__ = [
    "check_cuda_config", "fp8_capable", "triton_serves", "MIN_FP8_CAPABILITY", "MIN_CUDA_BLOCK_SIZE",
    "TRITON_DTYPES", "TRITON_MAX_HEAD_DIM",
]  # fmt: skip
