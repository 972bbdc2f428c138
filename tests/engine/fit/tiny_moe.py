"""A tiny random-weight Qwen3-MoE model for the MoE fit plan and for keeping experts on the CPU, with SmolLM2's
vocabulary, and its GGUF made by llama.cpp's own converter (``convert_hf_to_gguf.py`` from the llama-cpp-python
sdist at Hearth's pin).

Its 16 experts of 4 layers are most of its weights (the embeddings, tied, are the rest), as in the MoE models
people run: that is what the plan moves to the CPU. The GGUF is kept in tests/data/tiny-moe (a clone passes
without building anything); run this module to build it again::

    .venv/bin/python -m tests.engine.fit.tiny_moe [--sources LLAMA_CPP_DIR]
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "data" / "tiny-moe"
GGUF_PATH = DATA / "tiny-qwen3moe-q8_0.gguf"
SEED = 4321
LAYERS, EXPERTS = 4, 16
HIDDEN, EXPERT_FF = 64, 256


def build_hf(folder: Path, starter: Path) -> None:
    """Write the seeded random-weight model and the starter's tokenizer to ``folder``."""
    import torch
    from transformers import AutoTokenizer, Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(SEED)
    tokenizer = AutoTokenizer.from_pretrained(str(starter.parent), gguf_file=starter.name)
    tokenizer.save_pretrained(str(folder))
    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer), hidden_size=HIDDEN, intermediate_size=EXPERT_FF, moe_intermediate_size=EXPERT_FF,
        num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        num_experts=EXPERTS, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[],
        max_position_embeddings=4096, tie_word_embeddings=True, norm_topk_prob=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    model = Qwen3MoeForCausalLM(config).eval()
    with torch.no_grad():  # larger weights than the initializer's, so greedy text is not all one token
        for p in model.parameters():
            p.mul_(4.0)
    model.save_pretrained(str(folder), safe_serialization=True)


def build(starter: Path, sources: Path | None = None) -> Path:
    """Build the model and its q8_0 GGUF into tests/data/tiny-moe; returns the GGUF's path."""
    from tests.engine.server.tiny_vision import build_text_gguf

    return build_text_gguf(build_hf, GGUF_PATH, starter, sources)


if __name__ == "__main__":
    from tests.engine.server.tiny_vision import run_build

    run_build(build, __doc__)
