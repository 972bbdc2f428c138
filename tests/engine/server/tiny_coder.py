"""A tiny random-weight code model for the fill-in-the-middle tests: a Llama over SmolLM2's vocabulary with
Qwen2.5-Coder's markers added (``<|fim_prefix|>``, ``<|fim_suffix|>``, ``<|fim_middle|>``, ``<|fim_pad|>``,
``<|file_sep|>``; SmolLM2's own ``<reponame>`` is its repository marker), and its GGUF made by llama.cpp's own
converter (``convert_hf_to_gguf.py`` from the llama-cpp-python sdist at Hearth's pin).

The GGUF is kept in tests/data/tiny-coder (a clone passes without building anything); run this module to build
it again::

    .venv/bin/python -m tests.engine.server.tiny_coder [--sources LLAMA_CPP_DIR]
"""

from __future__ import annotations

from pathlib import Path

from tests.engine.server.tiny_vision import build_text_gguf, run_build

DATA = Path(__file__).resolve().parents[2] / "data" / "tiny-coder"
MODEL_PATH = DATA / "tiny-coder-q8_0.gguf"
SEED = 4321
FIM_TOKENS = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|file_sep|>"]


def build_hf(folder: Path, starter: Path) -> None:
    """Write the seeded random-weight model and its tokenizer to ``folder``."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(starter.parent), gguf_file=starter.name)
    tokenizer.add_special_tokens({"additional_special_tokens": FIM_TOKENS})
    tokenizer.save_pretrained(str(folder))
    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # larger than the init's 0.02: the prompt then steers the answer
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.3)
    model.save_pretrained(str(folder), safe_serialization=True)


def build(starter: Path, sources: Path | None = None) -> Path:
    """Build the model and its GGUF into tests/data/tiny-coder; returns the GGUF's path."""
    return build_text_gguf(build_hf, MODEL_PATH, starter, sources)


if __name__ == "__main__":
    run_build(build, __doc__)
