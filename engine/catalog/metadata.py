"""Facts about a model read from its files: GGUF headers or a Hugging Face config.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ModelLoadError

# GGUF general.file_type values -> the quantization label people know.
_FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    format: str
    size_bytes: int
    quantization: str | None = None
    architecture: str | None = None
    parameters: int | None = None
    context_length: int | None = None
    has_chat_template: bool = False
    layers: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None


def _field(reader, key: str):
    f = reader.fields.get(key)
    if f is None or not f.data:
        return None
    value = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(value).decode("utf-8", errors="replace")
    try:
        return value.tolist()[0] if hasattr(value, "tolist") else value
    except (IndexError, TypeError):
        return None


def read_gguf_metadata(path: Path) -> ModelMetadata:
    """Metadata from a GGUF header.

    Raises:
        ModelLoadError: the file is not a readable GGUF file.
    """
    from gguf import GGUFReader

    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ModelLoadError(str(path), "it is not a GGUF file.")
    try:
        reader = GGUFReader(str(path), "r")
    except Exception as exc:  # gguf raises ValueError/IndexError/struct errors on damaged headers
        raise ModelLoadError(str(path), f"its GGUF header is damaged ({exc}).") from exc
    arch = _field(reader, "general.architecture")
    ft = _field(reader, "general.file_type")
    params = sum(int(t.n_elements) for t in reader.tensors) or None
    n_head = _field(reader, f"{arch}.attention.head_count") if arch else None
    n_head_kv = _field(reader, f"{arch}.attention.head_count_kv") if arch else None
    n_embd = _field(reader, f"{arch}.embedding_length") if arch else None
    head_dim = _field(reader, f"{arch}.attention.key_length") if arch else None
    if head_dim is None and n_embd and n_head:
        head_dim = int(n_embd) // int(n_head)
    return ModelMetadata(
        format="gguf",
        size_bytes=path.stat().st_size,
        quantization=_FILE_TYPES.get(int(ft)) if ft is not None else None,
        architecture=arch,
        parameters=params,
        context_length=_field(reader, f"{arch}.context_length") if arch else None,
        has_chat_template="tokenizer.chat_template" in reader.fields,
        layers=_field(reader, f"{arch}.block_count") if arch else None,
        kv_heads=n_head_kv or n_head,
        head_dim=head_dim,
    )


def read_config_metadata(folder: Path) -> ModelMetadata:
    """Metadata from a Hugging Face or MLX model folder (config.json + safetensors).

    Raises:
        ModelLoadError: there is no readable config.json.
    """
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(str(folder), f"it has no readable config.json ({exc}).") from exc
    quant = config.get("quantization") or config.get("quantization_config")
    fmt = "mlx" if isinstance(quant, dict) and "group_size" in quant and "bits" in quant else "safetensors"
    label = f"{quant['bits']}bit" if fmt == "mlx" else (str(config.get("torch_dtype") or config.get("dtype") or "") or None)
    size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    tok_cfg = folder / "tokenizer_config.json"
    has_template = (folder / "chat_template.jinja").exists()
    if tok_cfg.exists():
        try:
            has_template = has_template or bool(json.loads(tok_cfg.read_text()).get("chat_template"))
        except (OSError, json.JSONDecodeError):
            pass
    n_head = config.get("num_attention_heads")
    return ModelMetadata(
        format=fmt,
        size_bytes=size,
        quantization=label,
        architecture=config.get("model_type"),
        context_length=config.get("max_position_embeddings"),
        has_chat_template=has_template,
        layers=config.get("num_hidden_layers"),
        kv_heads=config.get("num_key_value_heads") or n_head,
        head_dim=config.get("head_dim") or (config["hidden_size"] // n_head if n_head and config.get("hidden_size") else None),
    )


def read_model_metadata(path: Path) -> ModelMetadata:
    """Metadata of a GGUF file or a model folder.

    Raises:
        ModelLoadError: the path is missing or holds no model Hearth can read.
    """
    if not path.exists():
        raise ModelLoadError(str(path), "the path does not exist.")
    if path.is_dir():
        return read_config_metadata(path)
    return read_gguf_metadata(path)
