"""What the CUDA path cannot serve is refused at load with one clear sentence, decided without a GPU."""

from __future__ import annotations

import logging

import pytest
import torch

from engine.backends.paged.capability import check_cuda_config, triton_serves
from engine.backends.paged.config import EngineConfig
from engine.backends.paged.ops import TorchOps
from engine.backends.paged.startup import check_device, pick_ops
from engine.errors import BackendUnavailable, InvalidRequest

H200, A100 = ((9, 0), "NVIDIA H200"), ((8, 0), "NVIDIA A100")


def check(gpu=H200, *, block_size=16, quantization=None, kv_cache_dtype="auto"):
    check_cuda_config(block_size=block_size, quantization=quantization, kv_cache_dtype=kv_cache_dtype,
                      capability=gpu[0], gpu_name=gpu[1])  # fmt: skip


@pytest.mark.parametrize("block_size", [8, 24, 1, 48])
def test_a_block_size_below_16_or_not_a_power_of_two_is_refused_on_cuda(block_size):
    with pytest.raises(InvalidRequest, match="power of two of at least 16") as info:
        check(block_size=block_size)
    assert info.value.param == "block_size" and str(block_size) in str(info.value)


@pytest.mark.parametrize("block_size", [16, 32, 64, 256])
def test_powers_of_two_from_16_are_served(block_size):
    check(block_size=block_size)
    check(A100, block_size=block_size)


def test_fp8_weights_before_sm89_are_refused_naming_the_gpu_and_int8():
    with pytest.raises(InvalidRequest, match="choose quantization int8") as info:
        check(A100, quantization="fp8")
    assert "A100" in str(info.value) and "8.0" in str(info.value) and info.value.param == "quantization"
    check(H200, quantization="fp8")
    check(((8, 9), "NVIDIA L4"), quantization="fp8")
    check(A100, quantization="int8")


def test_the_fp8_kv_cache_before_sm89_is_refused():
    with pytest.raises(InvalidRequest, match="f16 KV cache type"):
        check(((8, 6), "NVIDIA RTX 3090"), kv_cache_dtype="fp8")
    check(H200, kv_cache_dtype="fp8")


def test_the_cpu_keeps_its_small_blocks():
    check_device(EngineConfig(block_size=4, quantization="fp8", kv_cache_dtype="fp8"), torch.device("cpu"))


def test_the_kernels_serve_16_bit_models_up_to_head_size_128():
    assert triton_serves("bfloat16", 128) is None and triton_serves("float16", 64) is None
    assert "float32" in triton_serves("float32", 64)
    assert "256" in triton_serves("bfloat16", 256)


def test_a_model_the_kernels_do_not_serve_runs_on_the_torch_ops(caplog):
    cuda = torch.device("cuda")  # a device object only: nothing runs on it
    with caplog.at_level(logging.INFO, logger="engine.backends.paged.startup"):
        assert pick_ops(EngineConfig(), cuda, torch.float32, 64) is TorchOps
    assert "float32" in caplog.text
    with pytest.raises(BackendUnavailable, match="attention_backend to auto or torch"):
        pick_ops(EngineConfig(attention_backend="triton"), cuda, torch.bfloat16, 256)
    pytest.importorskip("triton")
    assert pick_ops(EngineConfig(), cuda, torch.bfloat16, 128).name == "triton"


def test_layers_scaled_mm_cannot_take_get_int8_weights_with_one_log_line(caplog):
    from engine.backends.paged.models.llama import Model, ModelArgs
    from engine.backends.paged.quant import FP8Linear, Int8Linear, quantize_model

    args = ModelArgs(model_type="llama", hidden_size=64, num_hidden_layers=2, intermediate_size=40,
                     num_attention_heads=4, vocab_size=32, rope={"rope_theta": 10000.0, "rope_type": "default"})  # fmt: skip
    with torch.device("meta"):
        model = Model(args)
    with caplog.at_level(logging.INFO, logger="engine.backends.paged.quant"):
        assert quantize_model(model, "fp8", device=torch.device("meta")) == "fp8"
    for layer in model.layers:
        assert isinstance(layer.self_attn.qkv_proj, FP8Linear) and isinstance(layer.mlp.gate_up_proj, FP8Linear)
        assert isinstance(layer.mlp.down_proj, Int8Linear)  # 40 inputs: not a multiple of 16
    records = [r for r in caplog.records if "FP8 matmuls cannot take" in r.getMessage()]
    assert len(records) == 1 and "2 layers" in records[0].getMessage()
