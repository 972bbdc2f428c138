"""Facts about a model read from its files: GGUF headers or a Hugging Face config.json."""

from __future__ import annotations

import json
import re
import struct
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


_SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def gguf_files_size(path: Path) -> int:
    """Bytes of a GGUF model: the file, or every part of a split model beside it."""
    m = _SPLIT_PART.search(path.name)
    if not m:
        return path.stat().st_size
    prefix = path.name[: m.start()]
    parts = list(path.parent.glob(f"{prefix}-*-of-{m.group(2)}.gguf"))
    return sum(p.stat().st_size for p in parts) or path.stat().st_size


def read_gguf_metadata(path: Path) -> ModelMetadata:
    """Metadata from a GGUF header (read without the vocabulary; see engine.catalog.gguf_header).

    Raises:
        ModelLoadError: the file is not a readable GGUF file.
    """
    from engine.catalog.gguf_header import read_gguf_file

    try:
        with path.open("rb") as f:
            if f.read(4) != b"GGUF":
                raise ModelLoadError(str(path), "it is not a GGUF file.")
        kv, params = read_gguf_file(path)
    except (ValueError, struct.error) as exc:
        raise ModelLoadError(str(path), f"its GGUF file is damaged ({exc}); download or copy it again.") from exc
    except OSError as exc:
        raise ModelLoadError(str(path), f"it cannot be read ({exc.strerror or exc}); check the file.") from exc
    arch = kv.get("general.architecture")
    arch = arch if isinstance(arch, str) else None

    def field(name: str) -> int | None:
        value = kv.get(f"{arch}.{name}") if arch else None
        if isinstance(value, list):  # per-layer values: the largest
            value = max((v for v in value if isinstance(v, int)), default=None)
        return int(value) if isinstance(value, int | float) else None

    ft = kv.get("general.file_type")
    n_head, n_head_kv, n_embd = field("attention.head_count"), field("attention.head_count_kv"), field("embedding_length")
    head_dim = field("attention.key_length")
    if head_dim is None and n_embd and n_head:
        head_dim = int(n_embd) // int(n_head)
    return ModelMetadata(
        format="gguf",
        size_bytes=gguf_files_size(path),
        quantization=_FILE_TYPES.get(int(ft)) if isinstance(ft, int) else None,
        architecture=arch,
        parameters=params or None,
        context_length=field("context_length"),
        has_chat_template=bool(kv.get("tokenizer.chat_template")),
        layers=field("block_count"),
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


def verify_gguf(path: Path) -> None:
    """Refuse a GGUF file whose header lies or whose tensor data is cut off, before a backend reads it
    (llama.cpp trusts much of a header; a hostile one must never reach it).

    Raises:
        ModelLoadError: the file is missing, not GGUF, truncated or damaged.
    """
    from engine.catalog.gguf_header import check_gguf_layout

    if not path.is_file():
        raise ModelLoadError(str(path), "the file does not exist; check the path or pull the model again.")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelLoadError(str(path), f"it cannot be read ({exc.strerror or exc}); check the file.") from exc
    if magic != b"GGUF":
        raise ModelLoadError(str(path), "it is not a GGUF file; Hearth loads only GGUF files from .gguf paths.")
    try:
        check_gguf_layout(path)
    except (ValueError, struct.error) as exc:
        raise ModelLoadError(str(path), f"its GGUF file is damaged ({exc}); download or copy it again.") from exc


def read_model_metadata(path: Path) -> ModelMetadata:
    """Metadata of a GGUF file or a model folder.

    Raises:
        ModelLoadError: the path is missing or holds no model Hearth can read.
    """
    if not path.exists():
        raise ModelLoadError(str(path), "the path does not exist.")
    if path.is_dir():
        return read_config_metadata(path)
    if not path.is_file():  # a pipe or a device: opening one can wait forever, or read without end
        raise ModelLoadError(str(path), "it is not a regular file (a pipe or a device); give a .gguf file or a model folder.")
    return read_gguf_metadata(path)
