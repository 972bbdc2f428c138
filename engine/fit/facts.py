"""What the memory model needs to know about a model: its weights (by tensor type and by layer)
and its shape (layers, KV heads, head size; embedding, vocabulary and feed-forward sizes).

For a local GGUF file everything is read from its header and tensor table; for a Hub variant the
weights are the listed file sizes and the shape comes from the repo's config.json or GGUF header
(:meth:`engine.catalog.hub.HubClient.model_shape`).
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # engine.catalog imports the advisor, which imports this module
    from engine.catalog.shape import ModelShape
    from engine.fit.projector import ProjectorFacts

_BLOCK = re.compile(r"^blk\.(\d+)\.")
# Output head names: offloaded with the last layer ("output" is absent when tied to the embeddings).
_OUTPUT = ("output.weight", "output_norm.weight", "output_norm.bias", "output.bias")
_INPUT = ("token_embd.weight", "token_embd_norm.weight", "token_embd_norm.bias", "rope_freqs.weight")
# An MoE layer's expert tensors (llama-server's --cpu-moe pattern): what can stay on the CPU while the rest offloads.
_EXPERTS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")
# Vocabulary sizes by architecture when a remote header stops before the vocabulary.
_TYPICAL_VOCAB = {"llama": 128_256, "qwen2": 152_064, "qwen3": 151_936, "gemma2": 256_000, "gemma3": 262_144}


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """A model as far as memory goes.

    Attributes:
        format: ``gguf``, ``safetensors`` or ``mlx``.
        weights_bytes: Bytes of every weight file.
        shape: Layers, KV heads, head size and the sizes compute buffers grow with.
        by_type: Weight bytes per tensor type (``Q4_K``, ``Q6_K``, ``F32``...), largest first.
        layer_bytes: Weight bytes of each repeating block (``blk.N``), in order.
        expert_bytes: Of those, the bytes of each block's MoE experts (empty for a dense model).
        input_bytes: Token embeddings (llama.cpp keeps them in RAM).
        output_bytes: The output head and final norm (offloaded with the last layer).
        source: Where the numbers came from, in words.
        parameters: Weights counted one by one (0 when unknown): the paged engine holds each in its own
            dtype, whatever the file's quantization.
        projector: The multimodal projector loaded beside it (its weights and encoder buffers), if any.
        draft: The draft model loaded beside it for speculative decoding (``--speculative draft:MODEL``), if any.
        layer_types: The blocks' bytes per tensor type, largest first (the speed model's kernels).
        head_type: The output head's tensor type (the token embeddings' when the head is tied to them).
    """

    format: str
    weights_bytes: int
    shape: ModelShape
    by_type: tuple[tuple[str, int], ...] = ()
    layer_bytes: tuple[int, ...] = ()
    expert_bytes: tuple[int, ...] = ()
    input_bytes: int = 0
    output_bytes: int = 0
    source: str = "estimated"
    parameters: int = 0
    projector: ProjectorFacts | None = None
    draft: ModelFacts | None = None
    layer_types: tuple[tuple[str, int], ...] = ()  # of the blocks' bytes, per tensor type (the kernels they run on)
    head_type: str | None = None  # the output head's tensor type (the embeddings' when tied to them)

    @property
    def layers(self) -> int:
        return self.shape.layers

    @property
    def vocab(self) -> int:
        return int(self.shape.vocab or _TYPICAL_VOCAB.get(self.shape.architecture or "", 128_256))

    @property
    def embedding(self) -> int:
        return int(self.shape.embedding or self.shape.kv_heads * self.shape.head_dim * 4)

    @property
    def heads(self) -> int:
        return int(self.shape.heads or max(1, self.embedding // self.shape.head_dim))

    @property
    def feed_forward(self) -> int:
        return int(self.shape.feed_forward or self.embedding * 4)

    def layer_weights(self) -> tuple[int, ...]:
        """Bytes of each block: read from the file, else the weights less embeddings and head, shared out."""
        if self.layer_bytes:
            return self.layer_bytes
        rest = max(0, self.weights_bytes - self.input_bytes - self.output_bytes)
        return (rest // max(1, self.layers),) * self.layers

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "weights_bytes": self.weights_bytes,
            "weights_by_type": dict(self.by_type),
            "input_bytes": self.input_bytes,
            "output_bytes": self.output_bytes,
            "parameters": self.parameters,
            "shape": self.shape.to_dict(),
            "source": self.source,
            "projector": self.projector.to_dict() if self.projector is not None else None,
            **({"draft": self.draft.to_dict()} if self.draft is not None else {}),
        }


def _split_parts(path: Path) -> list[Path]:
    m = re.search(r"-(\d{5})-of-(\d{5})\.gguf$", path.name, re.IGNORECASE)
    if not m:
        return [path]
    prefix = path.name[: m.start()]
    parts = sorted(path.parent.glob(f"{prefix}-*-of-{m.group(2)}.gguf"))
    return parts or [path]


def facts_from_gguf(path: Path) -> ModelFacts:
    """Facts from a local GGUF file (every part of a split model), tensor by tensor.

    Raises:
        ValueError: the file is not a GGUF file Hearth can read.
    """
    from engine.catalog.gguf_header import read_gguf_tensors
    from engine.catalog.shape import shape_from_gguf_kv

    kv: dict[str, Any] = {}
    tensors: list[tuple[str, str, int, tuple[int, ...]]] = []
    vocab = None
    for part in _split_parts(path):
        try:
            part_kv, part_tensors = read_gguf_tensors(part)
        except struct.error as exc:
            raise ValueError(f"the GGUF header is damaged ({exc})") from exc
        kv = kv or part_kv
        tensors += part_tensors
    shape = shape_from_gguf_kv(kv, source="the model's own header")
    if shape is None:
        raise ValueError("the GGUF header does not give the model's layers and attention heads")
    by_type: dict[str, int] = {}
    layers = [0] * shape.layers
    experts = [0] * shape.layers
    input_bytes = output_bytes = parameters = 0
    in_layers: dict[str, int] = {}
    types_of: dict[str, str] = {}
    for name, type_name, size, dims in tensors:
        types_of[name] = type_name
        parameters += math.prod(dims)
        if name == "token_embd.weight" and len(dims) > 1:
            vocab = int(dims[1])
        by_type[type_name] = by_type.get(type_name, 0) + size
        m = _BLOCK.match(name)
        if m and int(m.group(1)) < len(layers):
            layers[int(m.group(1))] += size
            in_layers[type_name] = in_layers.get(type_name, 0) + size
            if _EXPERTS.search(name):
                experts[int(m.group(1))] += size
        elif name in _INPUT:
            input_bytes += size
        else:
            output_bytes += size
    if shape.vocab is None and vocab:
        shape = replace(shape, vocab=vocab)
    return ModelFacts(
        format="gguf",
        weights_bytes=sum(p.stat().st_size for p in _split_parts(path)),
        shape=shape,
        by_type=tuple(sorted(by_type.items(), key=lambda kv_: -kv_[1])),
        layer_bytes=tuple(layers),
        expert_bytes=tuple(experts) if any(experts) else (),
        input_bytes=input_bytes,
        output_bytes=output_bytes,
        source="the model's own header",
        parameters=parameters,
        layer_types=tuple(sorted(in_layers.items(), key=lambda kv_: -kv_[1])),
        head_type=types_of.get("output.weight") or types_of.get("token_embd.weight"),
    )


def facts_from_shape(
    shape: ModelShape, weights_bytes: int, *, format: str = "gguf", bits_per_weight: float | None = None
) -> ModelFacts:
    """Facts for a model known by its shape and file sizes only (a Hub variant).

    The embeddings are the vocabulary times the embedding size at the variant's bits per weight;
    the rest is shared out over the layers.
    """
    facts = ModelFacts(format=format, weights_bytes=int(weights_bytes), shape=shape, source=shape.source)
    bpw = bits_per_weight or 16.0
    embed = int(facts.vocab * facts.embedding * bpw / 8)
    embed = min(embed, int(weights_bytes) // 4)  # a guessed shape never leaves the layers with nothing
    facts = replace(facts, input_bytes=embed, output_bytes=embed // 8)
    if shape.experts and shape.expert_feed_forward and shape.embedding:  # up, gate and down of every expert
        layer = facts.layer_weights()[0] if shape.layers else 0
        experts = min(int(3 * shape.experts * shape.embedding * shape.expert_feed_forward * bpw / 8), layer * 9 // 10)
        facts = replace(facts, expert_bytes=(experts,) * shape.layers)
    return facts


# Bytes per weight of a checkpoint's torch_dtype (config.json), for counting its parameters.
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def facts_from_files(path: Path, *, format: str | None = None, size_bytes: int | None = None) -> ModelFacts:
    """Facts from a model on disk: a GGUF file's tensors, or a folder's config.json and weight files.

    Args:
        path: A ``.gguf`` file, a model folder, or a file inside one.
        format: ``gguf``, ``safetensors`` or ``mlx`` (None: ``gguf`` for a ``.gguf`` file, else ``safetensors``).
        size_bytes: Bytes of the weight files (None: the ``*.safetensors`` files in the folder).

    Raises:
        ValueError: the files cannot be read, or do not give the layers and attention heads.
    """
    from engine.catalog.shape import shape_from_config

    fmt = format or ("gguf" if path.suffix.lower() == ".gguf" else "safetensors")
    if fmt == "gguf":
        try:
            return facts_from_gguf(path)
        except (OSError, ValueError) as exc:
            raise ValueError(f"its GGUF header cannot be read ({exc})") from exc
    folder = path if path.is_dir() else path.parent
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"its config.json cannot be read ({exc})") from exc
    shape = shape_from_config(config, source="the model's config.json")
    if shape is None:
        raise ValueError("its config.json does not give the layers and attention heads")
    if size_bytes is None:
        size_bytes = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    quant = config.get("quantization") or {}
    bits = float(quant.get("bits", 16)) if isinstance(quant, dict) else 16.0
    facts = facts_from_shape(shape, size_bytes, format=fmt, bits_per_weight=bits)
    dtype = (config.get("text_config") or config).get("torch_dtype") or config.get("dtype")
    if not quant and fmt == "safetensors" and dtype in _DTYPE_BYTES:  # unquantized: the file is the weights
        facts = replace(facts, parameters=int(size_bytes) // _DTYPE_BYTES[dtype])
    return facts


def with_projector(facts: ModelFacts, mmproj: Path | None) -> ModelFacts:
    """``facts`` with the projector at ``mmproj`` loaded beside the model (unchanged when None).

    Raises:
        ValueError: the projector cannot be read.
    """
    if mmproj is None:
        return facts
    from engine.fit.projector import projector_from_file

    return replace(facts, projector=projector_from_file(mmproj))


def with_draft(facts: ModelFacts, draft: Path | None) -> ModelFacts:
    """``facts`` with the draft model at ``draft`` loaded beside the model (unchanged when None).

    Raises:
        ValueError: the draft's GGUF header cannot be read.
    """
    if draft is None:
        return facts
    try:
        return replace(facts, draft=facts_from_gguf(draft))
    except OSError as exc:
        raise ValueError(f"the draft model {draft} cannot be read ({exc})") from exc


__all__ = ["ModelFacts", "facts_from_gguf", "facts_from_shape", "facts_from_files", "with_projector", "with_draft"]
