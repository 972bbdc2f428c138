"""A repo's files grouped into the variants a person chooses between, with quantization labels.

GGUF repos hold one file (or one set of split parts) per quantization: ``*.Q4_K_M.gguf``,
``*-Q4_K_M.gguf``, ``*-Q6_K-00001-of-00002.gguf``, ``IQ4_XS``, ``BF16``... MLX and safetensors repos
hold a single variant (all weights plus config and tokenizer), labelled ``4bit``, ``8bit``, ``BF16``.
Nothing here touches the network: :func:`group_variants` works on a file listing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from engine.errors import InvalidRequest

# Quality order, lowest first. Labels on one line share a rank.
_GGUF_ORDER: tuple[tuple[str, ...], ...] = (
    ("IQ1_S",), ("IQ1_M",), ("TQ1_0",), ("TQ2_0",), ("IQ2_XXS",), ("IQ2_XS",), ("IQ2_S",), ("IQ2_M",),
    ("Q2_K_S",), ("Q2_K",), ("Q2_K_L", "Q2_K_XL"), ("IQ3_XXS",), ("IQ3_XS",), ("Q3_K_S",), ("IQ3_S",),
    ("IQ3_M",), ("Q3_K_M",), ("Q3_K_L",), ("Q3_K_XL",), ("Q4_0", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8"),
    ("IQ4_NL",), ("IQ4_XS",), ("Q4_1",), ("MXFP4",), ("Q4_K_S",), ("Q4_K_M",), ("Q4_K_L", "Q4_K_XL"),
    ("Q5_0",), ("Q5_1",), ("Q5_K_S",), ("Q5_K_M",), ("Q5_K_L", "Q5_K_XL"), ("Q6_K",), ("Q6_K_L", "Q6_K_XL"),
    ("Q8_0",), ("Q8_K_XL",), ("F16", "BF16"), ("F32",),
)  # fmt: skip
_MLX_ORDER: tuple[tuple[str, ...], ...] = (
    ("2bit",), ("3bit",), ("4bit", "mxfp4"), ("5bit",), ("6bit",), ("8bit",), ("BF16", "F16"), ("F32",),
)
QUALITY_RANK: dict[str, int] = {label: i for i, group in enumerate(_GGUF_ORDER) for label in group}
MLX_QUALITY_RANK: dict[str, int] = {label: i for i, group in enumerate(_MLX_ORDER) for label in group}

# Average bits per weight of each label (llama.cpp's figures for 7-8B models): turns a file size
# into a parameter count when nothing better is known.
BITS_PER_WEIGHT: dict[str, float] = {
    "IQ1_S": 2.0, "IQ1_M": 2.2, "TQ1_0": 1.7, "TQ2_0": 2.1, "IQ2_XXS": 2.4, "IQ2_XS": 2.6, "IQ2_S": 2.75,
    "IQ2_M": 2.9, "Q2_K_S": 3.0, "Q2_K": 3.2, "Q2_K_L": 3.4, "Q2_K_XL": 3.4, "IQ3_XXS": 3.3, "IQ3_XS": 3.5,
    "Q3_K_S": 3.65, "IQ3_S": 3.7, "IQ3_M": 3.8, "Q3_K_M": 4.0, "Q3_K_L": 4.3, "Q3_K_XL": 4.4, "Q4_0": 4.65,
    "Q4_0_4_4": 4.65, "Q4_0_4_8": 4.65, "Q4_0_8_8": 4.65, "IQ4_NL": 4.7, "IQ4_XS": 4.45, "Q4_1": 5.1,
    "MXFP4": 4.25, "Q4_K_S": 4.67, "Q4_K_M": 4.9, "Q4_K_L": 5.1, "Q4_K_XL": 5.1, "Q5_0": 5.57, "Q5_1": 6.05,
    "Q5_K_S": 5.57, "Q5_K_M": 5.7, "Q5_K_L": 5.9, "Q5_K_XL": 5.9, "Q6_K": 6.56, "Q6_K_L": 6.8, "Q6_K_XL": 6.8,
    "Q8_0": 8.5, "Q8_K_XL": 9.0, "F16": 16.0, "BF16": 16.0, "F32": 32.0,
    "2bit": 2.5, "3bit": 3.5, "4bit": 4.5, "mxfp4": 4.25, "5bit": 5.5, "6bit": 6.5, "8bit": 8.5,
}  # fmt: skip

_LABEL = re.compile(
    r"(?:^|(?<=[.\-_/]))"
    r"(I?Q4_0_[48]_[48]|IQ[1-4]_(?:XXS|XS|NL|S|M)|TQ[12]_0|Q[2-8]_K(?:_(?:XL|S|M|L))?|Q[4-8]_[01]"
    r"|MXFP4|BF16|FP16|F16|FP32|F32)"
    r"(?=$|[.\-_])",
    re.IGNORECASE,
)
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_MLX_BITS = re.compile(r"(?:^|[-_.])(\d)[-_]?bits?(?:$|[-_.])", re.IGNORECASE)
_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "bf16": "BF16", "fp16": "F16"}
# Files of a folder-format variant besides its weights: configs, tokenizers, templates.
_SUPPORT_SUFFIXES = (".json", ".txt", ".model", ".jinja", ".tiktoken")
_SKIP_NAMES = {"README.md", ".gitattributes", "LICENSE", "LICENSE.md", "USE_POLICY.md", "NOTICE"}


@dataclass(frozen=True, slots=True)
class RemoteFile:
    """One file of a hub repo: its path, size, and the hashes to verify it by."""

    path: str
    size: int
    sha256: str | None = None  # LFS files
    blob_id: str | None = None  # the git blob sha1 (what non-LFS files are checked against)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "blob_id": self.blob_id}


@dataclass(frozen=True, slots=True)
class Variant:
    """One downloadable choice within a repo: ``Q4_K_M`` (maybe several split parts), ``4bit``...

    ``projector`` is the multimodal projector (``mmproj-*.gguf``) pulled with a GGUF variant of a repo that
    has one: the model then sees (and hears, where the projector has an audio encoder).
    """

    name: str
    format: str  # gguf | mlx | safetensors
    files: tuple[RemoteFile, ...]
    projector: RemoteFile | None = None

    @property
    def vision(self) -> bool:
        return self.projector is not None

    @property
    def download_files(self) -> tuple[RemoteFile, ...]:
        """What pulling the variant fetches: its files, then its projector."""
        return self.files + ((self.projector,) if self.projector is not None else ())

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def weights_bytes(self) -> int:
        """Bytes of weights (GGUF parts or safetensors shards), which is what memory holds."""
        return sum(f.size for f in self.files if f.path.endswith((".gguf", ".safetensors"))) or self.size_bytes

    @property
    def quality(self) -> int:
        """Rank in quality order (higher is better; -1 when the label is unknown)."""
        table = QUALITY_RANK if self.format == "gguf" else MLX_QUALITY_RANK
        return table.get(self.name, table.get(self.name.upper(), -1))

    @property
    def bits_per_weight(self) -> float | None:
        return BITS_PER_WEIGHT.get(self.name) or BITS_PER_WEIGHT.get(self.name.upper())

    @property
    def primary(self) -> RemoteFile:
        """The file a backend opens: the first (or only) GGUF part, else the config."""
        for f in self.files:
            if f.path.endswith(".gguf"):
                return f
        for f in self.files:
            if PurePosixPath(f.path).name == "config.json":
                return f
        return self.files[0]

    @property
    def parts(self) -> int:
        """How many weight files the variant has (split GGUF parts or safetensors shards)."""
        return sum(1 for f in self.files if f.path.endswith((".gguf", ".safetensors")))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "format": self.format,
            "size_bytes": self.size_bytes,
            "parts": self.parts,
            "quality": self.quality,
            "files": [f.to_dict() for f in self.files],
            "vision": self.vision,
            "projector": self.projector.to_dict() if self.projector is not None else None,
        }


def quant_label(filename: str) -> str | None:
    """The quantization label in a file name (``Q4_K_M``, ``IQ4_XS``, ``BF16``), upper-cased, or None."""
    stem = _SPLIT.sub("", PurePosixPath(filename).name)
    stem = re.sub(r"\.gguf$", "", stem, flags=re.IGNORECASE)
    matches = list(_LABEL.finditer(stem))
    if not matches:
        return None
    label = matches[-1].group(1).upper()
    return {"FP16": "F16", "FP32": "F32"}.get(label, label)


def split_part(filename: str) -> tuple[int, int] | None:
    """``(part, of)`` for a split GGUF part like ``x-00001-of-00003.gguf``, else None."""
    m = _SPLIT.search(filename)
    return (int(m.group(1)), int(m.group(2))) if m else None


def quality_rank(label: str, fmt: str = "gguf") -> int:
    table = QUALITY_RANK if fmt == "gguf" else MLX_QUALITY_RANK
    return table.get(label, table.get(label.upper(), -1))


def _gguf_base(path: str) -> str:
    name = _SPLIT.sub("", PurePosixPath(path).name)
    name = re.sub(r"\.gguf$", "", name, flags=re.IGNORECASE)
    label = quant_label(path)
    if label:
        m = list(_LABEL.finditer(name))[-1]
        name = name[: m.start()]
    return name.rstrip(".-_") or "model"


def _is_auxiliary_gguf(path: str) -> bool:
    # Vision projectors and importance matrices sit beside the models but are not models.
    name = PurePosixPath(path).name.lower()
    return name.startswith("mmproj") or "imatrix" in name


def is_projector(path: str) -> bool:
    """Whether ``path`` is a multimodal projector GGUF (``mmproj-*.gguf``, the name llama.cpp's converter gives)."""
    name = PurePosixPath(path).name.lower()
    return name.startswith("mmproj") and name.endswith(".gguf")


def projector_label(path: str) -> str:
    """A projector's precision as a person picks it: ``F16``, ``BF16``, ``Q8_0``... (its file name when none)."""
    return quant_label(path) or PurePosixPath(path).name


# The projector pulled unless another is picked: full precision first (llama.cpp's own advice for mmproj,
# whose quantization costs much more than a text model's), then by quality.
_PROJECTOR_PREFERENCE = ("F16", "BF16", "F32")


def default_projector(projectors: tuple[RemoteFile, ...] | list[RemoteFile]) -> RemoteFile | None:
    """The projector pulled with a variant: the F16 one, else BF16, F32, else the highest-quality one."""
    if not projectors:
        return None

    def rank(f: RemoteFile) -> tuple[int, int, str]:
        label = projector_label(f.path)
        pref = _PROJECTOR_PREFERENCE.index(label) if label in _PROJECTOR_PREFERENCE else len(_PROJECTOR_PREFERENCE)
        return pref, -quality_rank(label), f.path

    return min(projectors, key=rank)


def choose_projector(repo_id: str, projectors: tuple[RemoteFile, ...], wanted: str | None) -> RemoteFile | None:
    """The projector called ``wanted`` (its precision, like ``Q8_0``, or its file name), the default when None,
    and none for ``"none"``.

    Raises:
        InvalidRequest: no projector has that name (or the repo has none).
    """
    if wanted is None:
        return default_projector(projectors)
    if wanted.lower() == "none":
        return None
    for f in projectors:
        if wanted.lower() in (projector_label(f.path).lower(), f.path.lower(), PurePosixPath(f.path).name.lower()):
            return f
    if not projectors:
        raise InvalidRequest(f"'{repo_id}' has no mmproj projector files; leave out the projector choice.", param="mmproj_variant")
    names = ", ".join(projector_label(f.path) for f in projectors)
    raise InvalidRequest(f"'{repo_id}' has no projector '{wanted}'; choose one of: {names} (or none).", param="mmproj_variant")


def _gguf_variants(files: list[RemoteFile]) -> list[Variant]:
    groups: dict[tuple[str, str], list[RemoteFile]] = {}
    for f in files:
        label = quant_label(f.path) or _gguf_base(f.path)
        groups.setdefault((_gguf_base(f.path), label), []).append(f)
    labels = [label for _, label in groups]
    out = []
    for (base, label), group in groups.items():
        name = label if labels.count(label) == 1 else f"{base}-{label}"
        group.sort(key=lambda f: (split_part(f.path) or (1, 1), f.path))
        out.append(Variant(name=name, format="gguf", files=tuple(group)))
    return out


def _folder_variant(
    repo_id: str, files: list[RemoteFile], tags: tuple[str, ...], library: str | None, config: dict[str, Any] | None
) -> Variant | None:
    root = [f for f in files if "/" not in f.path]
    weights = [f for f in root if f.path.endswith(".safetensors")]
    if not weights:
        return None
    if len(weights) > 1:  # Mistral-style repos ship the same weights twice
        weights = [f for f in weights if not f.path.startswith("consolidated")] or weights
    support = [f for f in root if f.path.endswith(_SUPPORT_SUFFIXES) and f.path not in _SKIP_NAMES]
    quant = (config or {}).get("quantization") or (config or {}).get("quantization_config")
    mlx_quant = isinstance(quant, dict) and "group_size" in quant and "bits" in quant
    is_mlx = mlx_quant or library == "mlx" or "mlx" in tags
    m = _MLX_BITS.search(repo_id.rsplit("/", 1)[-1])
    dtype = _DTYPES.get(str((config or {}).get("torch_dtype") or (config or {}).get("dtype") or "").lower())
    if is_mlx:
        if mlx_quant and isinstance(quant, dict):
            label = f"{quant['bits']}bit"
        elif m:
            label = f"{m.group(1)}bit"
        else:
            label = dtype or "BF16"
    else:
        label = dtype or "BF16"
    return Variant(
        name=label, format="mlx" if is_mlx else "safetensors", files=tuple(sorted(weights + support, key=lambda f: f.path))
    )


def group_variants(
    repo_id: str,
    files: list[RemoteFile] | tuple[RemoteFile, ...],
    *,
    tags: tuple[str, ...] | list[str] = (),
    library: str | None = None,
    config: dict[str, Any] | None = None,
) -> tuple[Variant, ...]:
    """The variants in a repo's file listing, lowest quality first.

    Args:
        repo_id: ``owner/name`` (MLX repos carry their bit width in the name: ``-4bit``).
        files: Every file of the repo.
        tags: The repo's hub tags (``mlx``, ``gguf``...).
        library: The repo's ``library_name``.
        config: The repo's config.json, when read (decides MLX quantization and dtype).
    """
    files = list(files)
    gguf = [f for f in files if f.path.lower().endswith(".gguf") and not _is_auxiliary_gguf(f.path)]
    projector = default_projector([f for f in files if is_projector(f.path)])
    variants = [replace(v, projector=projector) for v in _gguf_variants(gguf)]
    folder = _folder_variant(repo_id, files, tuple(tags), library, config)
    if folder is not None:
        variants.append(folder)
    variants.sort(key=lambda v: (v.format != "gguf", v.quality, v.size_bytes, v.name))
    return tuple(variants)


__all__ = [
    "RemoteFile",
    "Variant",
    "quant_label",
    "split_part",
    "quality_rank",
    "group_variants",
    "is_projector",
    "projector_label",
    "default_projector",
    "choose_projector",
    "QUALITY_RANK",
    "BITS_PER_WEIGHT",
]
