"""The memory of a model's multimodal projector (``mmproj``): its weights, and the image (or audio) encoder's
compute buffer, read from the projector's header.

libmtmd's clip loads every tensor of the projector into a buffer of its own (no mmap), keeps a graph arena of
8,192 nodes per encoder, and reserves the encoder's compute buffer at the first picture, for that picture's
batch, trying flash attention first (clip.cpp ``warmup``; on the CPU and CUDA it is taken). With flash attention
no token-by-token score matrix is held; ggml's allocator reuses memory between nodes, so the peak is the
feed-forward step of one layer: its up-projection and activation (``2 x feed_forward``) beside the residual
stream (``embedding``), in f32, for every patch of the largest tile, plus the f32 picture itself. The
preprocessed tiles of a picture (f32) live while its request does.

Measured with benchmarks/fit_vision.py (docs/fit.md): a worker serving the tiny vision model with and without a
projector (its own, and random-weight Idefics3 ones of 224 and 448 pixels, 384 and 768 wide), one picture
answered; the difference in its resident memory against the plan's ``projector_bytes``.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB = 1024**2
# Per encoder (vision, audio): clip's graph arena (8,192 nodes x ggml's tensor overhead, 3 MiB), its contexts, and
# what libmtmd's code and a picture's bitmaps add to a worker (measured with benchmarks/fit_vision.py).
ENCODER_CONTEXT_BYTES = 6 * MIB
# Whisper-style audio encoders see 30 s of sound at a time: 3,000 mel frames, 1,500 after their convolutions.
AUDIO_FRAMES = 3000
AUDIO_TOKENS = 1500
# Where the header is not read (a guess from the file size): the encoder's buffer as a share of its weights,
# within these bounds (SmolVLM's 93M-parameter SigLIP: about 30 MB; Gemma 3's 400M one: about 150 MB).
GUESS_SHARE = 0.35
GUESS_MIN_BYTES = 32 * MIB


@dataclass(frozen=True, slots=True)
class ProjectorFacts:
    """What a model's projector takes, by what takes it.

    Attributes:
        weights_bytes: Its tensors' bytes (the file less its header).
        compute_bytes: The encoders' compute buffers and one picture's preprocessed tiles, at the largest tile.
        context_bytes: Each encoder's graph arena.
        vision: It has an image encoder. audio: It has an audio encoder.
        source: Where the figures came from, in words.
    """

    weights_bytes: int
    compute_bytes: int
    context_bytes: int = ENCODER_CONTEXT_BYTES
    vision: bool = True
    audio: bool = False
    source: str = "the projector's header"

    @property
    def total(self) -> int:
        return self.weights_bytes + self.compute_bytes + self.context_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "weights_bytes": self.weights_bytes,
            "compute_bytes": self.compute_bytes,
            "context_bytes": self.context_bytes,
            "total_bytes": self.total,
            "vision": self.vision,
            "audio": self.audio,
            "source": self.source,
        }


def _int(kv: dict[str, Any], key: str, default: int) -> int:
    value = kv.get(key)
    return int(value) if isinstance(value, (int, float)) and value > 0 else default


def vision_compute_bytes(kv: dict[str, Any]) -> int:
    """The image encoder's compute buffer for its largest tile, with that tile's preprocessed f32 copy."""
    size = _int(kv, "clip.vision.image_size", 224)
    max_pixels = kv.get("clip.vision.image_max_pixels")
    if isinstance(max_pixels, (int, float)) and max_pixels > size * size:  # dynamic resolution (Qwen2-VL...)
        size = int(math.sqrt(max_pixels))
    patch = _int(kv, "clip.vision.patch_size", 14)
    embd = _int(kv, "clip.vision.embedding_length", 768)
    ff = _int(kv, "clip.vision.feed_forward_length", 4 * embd)
    patches = (size // patch) ** 2
    picture = 4 * 3 * size * size
    return 4 * patches * (2 * ff + embd) + 2 * picture


def audio_compute_bytes(kv: dict[str, Any]) -> int:
    """The audio encoder's compute buffer for 30 s of sound, with its mel spectrogram."""
    embd = _int(kv, "clip.audio.embedding_length", 1280)
    ff = _int(kv, "clip.audio.feed_forward_length", 4 * embd)
    mels = _int(kv, "clip.audio.num_mel_bins", 128)
    return 4 * AUDIO_TOKENS * (2 * ff + embd) + 2 * 4 * mels * AUDIO_FRAMES


def projector_from_kv(kv: dict[str, Any], weights_bytes: int, *, source: str = "the projector's header") -> ProjectorFacts:
    """Facts from a projector's header key/values and its weights' bytes (a local file's, or a Hub file's size)."""
    audio = bool(kv.get("clip.has_audio_encoder", False))
    vision = bool(kv.get("clip.has_vision_encoder", not audio))
    compute = (vision_compute_bytes(kv) if vision else 0) + (audio_compute_bytes(kv) if audio else 0)
    return ProjectorFacts(
        weights_bytes=int(weights_bytes),
        compute_bytes=compute,
        context_bytes=ENCODER_CONTEXT_BYTES * (int(vision) + int(audio)),
        vision=vision,
        audio=audio,
        source=source,
    )


def projector_from_file(path: Path) -> ProjectorFacts:
    """Facts from a local projector GGUF: its header and tensor table.

    Raises:
        ValueError: the file is not a GGUF file Hearth can read.
    """
    from engine.catalog.gguf_header import read_gguf_tensors

    try:
        kv, tensors = read_gguf_tensors(path)
    except (OSError, struct.error) as exc:
        raise ValueError(f"the projector {path} cannot be read ({exc})") from exc
    return projector_from_kv(kv, sum(size for _, _, size, _ in tensors))


def projector_from_size(size_bytes: int) -> ProjectorFacts:
    """A guess for a projector known only by its file size (its header could not be read)."""
    return ProjectorFacts(
        weights_bytes=int(size_bytes),
        compute_bytes=max(GUESS_MIN_BYTES, int(size_bytes * GUESS_SHARE)),
        source="a guess from the projector's file size",
    )


__all__ = [
    "ProjectorFacts", "projector_from_kv", "projector_from_file", "projector_from_size", "vision_compute_bytes",
    "audio_compute_bytes", "ENCODER_CONTEXT_BYTES",
]  # fmt: skip
