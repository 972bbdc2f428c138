"""Quantized weights (int8 weight-only; FP8 e4m3 emulated on the CPU; int4 groups) against full precision.

Stated bounds, over ~300 teacher-forced positions of the starter model (logits' std is ~7):
int8: greedy agreement >= 93%, mean |logit error| <= 0.4, max <= 3; FP8: >= 88%, <= 1.0, <= 8.
int4 keeps the starter's own Q4_1 values, so its only error is bfloat16 activations:
>= 98%, <= 0.25, <= 2.5.
"""

from __future__ import annotations

import copy

import pytest
import torch

from engine.backends.base import LoadOptions, PagedOptions
from engine.backends.paged.quant import (
    FP8Linear,
    Int4Linear,
    Int8Linear,
    quantize_int4,
    quantize_int8,
    quantize_model,
)

from .helpers import make_runner, paged_logits

BOUNDS = {"int8": (0.93, 0.4, 3.0), "fp8": (0.88, 1.0, 8.0), "int4": (0.98, 0.25, 2.5)}
TEXT = (
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg developed "
    "movable type in Mainz. Books became cheaper, literacy spread, and ideas travelled faster than ever. "
    "Question: why did the printing press matter? Answer: because it made knowledge easy to copy and share. "
) * 5


@pytest.fixture(scope="module")
def starter(paged_backend):
    model = paged_backend.loaded.engine.runner.model  # the starter's float32 weights, shared, never modified
    tokens = paged_backend.tokenize(TEXT)
    base = paged_logits(make_runner(model, num_blocks=32, block_size=16), tokens, [len(tokens)])
    return model, tokens, base


@pytest.mark.parametrize("method", ["int8", "fp8"])
def test_quantized_logits_stay_within_the_stated_bounds(starter, method):
    if method == "fp8" and not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    model, tokens, base = starter
    quant = copy.deepcopy(model)
    assert quantize_model(quant, method, device=torch.device("cpu")) == method
    kind = FP8Linear if method == "fp8" else Int8Linear
    assert isinstance(quant.layers[0].mlp.down_proj, kind)
    got = paged_logits(make_runner(quant, num_blocks=32, block_size=16), tokens, [len(tokens)])
    agree = (got.argmax(-1) == base.argmax(-1)).float().mean().item()
    err = (got - base).abs()
    min_agree, max_mean, max_err = BOUNDS[method]
    assert len(tokens) > 250
    assert agree >= min_agree and err.mean().item() <= max_mean and err.max().item() <= max_err, (
        agree, err.mean().item(), err.max().item())  # fmt: skip


def test_int8_round_trip_error_is_half_a_step_at_most():
    w = torch.randn(64, 32)
    q, scale = quantize_int8(w)
    assert q.dtype == torch.int8
    assert ((q.float() * scale[:, None] - w).abs() <= scale[:, None] / 2 + 1e-6).all()


def test_quantization_and_fp8_kv_cache_options_reach_the_engine(tmp_path):
    from engine.backends.paged.startup import start_engine

    from .test_models import make_checkpoint

    make_checkpoint(tmp_path, "LlamaConfig", {})
    plain = start_engine(tmp_path, LoadOptions(n_ctx=128, paged=PagedOptions(num_kv_blocks=16, device="cpu")))
    quant = start_engine(tmp_path, LoadOptions(n_ctx=128, kv_type="fp8", paged=PagedOptions(
        quantization="int8", num_kv_blocks=16, device="cpu")))  # fmt: skip
    runner = quant.engine.runner
    assert runner.kv_caches[0][0].dtype == torch.float8_e4m3fn
    assert isinstance(runner.model.layers[1].self_attn.qkv_proj, Int8Linear)
    assert runner.model.layers[1].self_attn.qkv_proj.weight.dtype == torch.int8
    tokens = torch.randint(0, 300, (60,), generator=torch.Generator().manual_seed(0)).tolist()
    # a prefill chunk, then decodes that read back the FP8 cache
    got = paged_logits(make_runner(runner.model, kv_dtype=torch.float8_e4m3fn), tokens, [40, 17, 1, 1, 1])
    want = paged_logits(make_runner(plain.engine.runner.model), tokens, [40, 17, 1, 1, 1])
    assert (got.argmax(-1) == want.argmax(-1)).float().mean().item() >= 0.9
    assert (got - want).abs().max().item() < 0.5


def test_int4_keeps_the_starter_models_q4_1_weights_exactly(starter):
    """Re-quantizing weights dequantized from Q4_1 finds the file's own codes: in float32 the int4
    layer computes what the dense one does, to rounding."""
    model = starter[0]
    for linear in (model.layers[0].self_attn.qkv_proj, model.layers[7].mlp.gate_up_proj, model.layers[29].mlp.down_proj):
        x = torch.randn(5, linear.weight.shape[1], generator=torch.Generator().manual_seed(0))
        want = torch.nn.functional.linear(x, linear.weight)
        got = Int4Linear(linear)(x)
        assert ((got - want).abs().max() / want.abs().max()).item() < 1e-5


def test_int4_logits_with_bfloat16_activations_stay_within_the_stated_bounds(starter):
    model, tokens, base = starter
    quant = copy.deepcopy(model)
    assert quantize_model(quant, "int4", device=torch.device("cpu")) == "int4"
    assert isinstance(quant.layers[0].mlp.down_proj, Int4Linear)
    quant = quant.to(torch.bfloat16)
    got = paged_logits(make_runner(quant, num_blocks=32, block_size=16), tokens, [len(tokens)]).float()
    agree = (got.argmax(-1) == base.argmax(-1)).float().mean().item()
    err = (got - base).abs()
    min_agree, max_mean, max_err = BOUNDS["int4"]
    assert agree >= min_agree and err.mean().item() <= max_mean and err.max().item() <= max_err, (
        agree, err.mean().item(), err.max().item())  # fmt: skip


def test_int4_round_trip_error_is_half_a_step_at_most():
    w = torch.randn(48, 96)
    codes, scale, offset = quantize_int4(w)
    assert codes.dtype == torch.uint8 and int(codes.max()) <= 15
    back = ((codes.float() - 8).view(48, 3, 32) * scale[..., None] + offset[..., None]).view(48, 96)
    assert ((back - w).abs().view(48, 3, 32) <= scale[..., None] / 2 + 1e-6).all()
    flat = torch.full((16, 32), 0.25)  # a constant group comes back as itself
    codes, scale, offset = quantize_int4(flat)
    assert torch.equal((codes.float() - 8) * scale + offset, flat)


def test_int4_leaves_layers_it_cannot_pack_in_full_precision():
    from engine.backends.paged.models.llama import Linear

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = torch.nn.Module()
            self.mlp = torch.nn.Module()
            self.self_attn.o_proj = Linear(64, 40)  # 40 outputs: not a multiple of 16
            self.mlp.down_proj = Linear(64, 48)
            for lin in (self.self_attn.o_proj, self.mlp.down_proj):
                lin.weight.data.normal_()

    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([Block()])
    assert quantize_model(model, "int4", device=torch.device("cpu")) == "int4"
    assert isinstance(model.layers[0].self_attn.o_proj, Linear)
    assert isinstance(model.layers[0].mlp.down_proj, Int4Linear)
    empty = torch.nn.Module()
    empty.layers = torch.nn.ModuleList()
    assert quantize_model(empty, "int4", device=torch.device("meta")) == "int8"  # off the CPU: int8


def test_int4_option_runs_the_engine_in_bfloat16_on_int4_layers(tmp_path):
    from engine.backends.paged.startup import start_engine

    from .test_models import make_checkpoint

    make_checkpoint(tmp_path, "LlamaConfig", {})
    plain = start_engine(tmp_path, LoadOptions(n_ctx=128, paged=PagedOptions(num_kv_blocks=16, device="cpu")))
    quant = start_engine(tmp_path, LoadOptions(n_ctx=128, paged=PagedOptions(quantization="int4", num_kv_blocks=16, device="cpu")))
    assert quant.dtype == torch.bfloat16
    runner = quant.engine.runner
    assert runner.kv_caches[0][0].dtype == torch.bfloat16
    layer = runner.model.layers[1].mlp.gate_up_proj
    assert isinstance(layer, Int4Linear) and layer.weight.dtype == torch.uint8
    assert layer.weight_scales_zeros.dtype == torch.bfloat16
    tokens = torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    got = paged_logits(make_runner(runner.model, kv_dtype=torch.bfloat16), tokens, [30, 1, 1]).float()
    want = paged_logits(make_runner(plain.engine.runner.model), tokens, [30, 1, 1])
    assert (got.argmax(-1) == want.argmax(-1)).float().mean().item() >= 0.8
