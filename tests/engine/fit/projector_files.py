"""Idefics3 (SmolVLM) vision projectors of chosen sizes with random weights, written with the `gguf` library, for
the memory model's projector checks (tests/engine/fit/test_projector.py, benchmarks/fit_accuracy.py --vision).

The keys and tensor names are those llama.cpp's converter wrote for the tiny vision model's projector
(tests/data/tiny-vision), with the sizes changed; the output fits that tiny text model (64-wide embeddings), so
the pair loads and encodes pictures.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.engine.server import tiny_vision


@dataclass(frozen=True)
class VisionShape:
    image: int  # pixels a side
    patch: int
    embd: int
    ff: int
    layers: int
    heads: int
    scale_factor: int = 2
    text_embd: int = 64  # the tiny text model's


def write_random_mmproj(path: Path, shape: VisionShape, *, seed: int = 0) -> Path:
    """Write a loadable vision projector of ``shape`` (F16 matrices, F32 norms and biases) to ``path``."""
    import gguf

    from engine.catalog.gguf_header import read_gguf_file

    rng = np.random.default_rng(seed)
    kv, _ = read_gguf_file(tiny_vision.MMPROJ_PATH)
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_type("mmproj")
    w.add_file_type(1)
    sizes = {
        "clip.vision.image_size": shape.image, "clip.vision.preproc_image_size": shape.image,
        "clip.vision.patch_size": shape.patch, "clip.vision.embedding_length": shape.embd,
        "clip.vision.feed_forward_length": shape.ff, "clip.vision.block_count": shape.layers,
        "clip.vision.attention.head_count": shape.heads, "clip.vision.projector.scale_factor": shape.scale_factor,
        "clip.vision.projection_dim": shape.text_embd,
    }  # fmt: skip
    for key in ("clip.has_vision_encoder", "clip.use_gelu"):
        w.add_bool(key, True)
    for key, value in sizes.items():
        w.add_uint32(key, value)
    w.add_string("clip.projector_type", kv["clip.projector_type"])
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    def add(name: str, *dims: int, f16: bool = False) -> None:
        data = (rng.standard_normal(dims, dtype=np.float32) * 0.02).astype(np.float16 if f16 else np.float32)
        w.add_tensor(name, data)

    d, f, n = shape.embd, shape.ff, (shape.image // shape.patch) ** 2
    add("mm.model.fc.weight", shape.text_embd, d * shape.scale_factor**2, f16=True)
    add("v.patch_embd.bias", d)
    add("v.patch_embd.weight", d, 3, shape.patch, shape.patch)
    add("v.position_embd.weight", n, d)
    for i in range(shape.layers):
        for norm in ("ln1", "ln2"):
            add(f"v.blk.{i}.{norm}.bias", d)
            add(f"v.blk.{i}.{norm}.weight", d)
        add(f"v.blk.{i}.ffn_up.bias", f)
        add(f"v.blk.{i}.ffn_up.weight", f, d, f16=True)
        add(f"v.blk.{i}.ffn_down.bias", d)
        add(f"v.blk.{i}.ffn_down.weight", d, f, f16=True)
        for proj in ("attn_k", "attn_out", "attn_q", "attn_v"):
            add(f"v.blk.{i}.{proj}.bias", d)
            add(f"v.blk.{i}.{proj}.weight", d, d, f16=True)
    add("v.post_ln.bias", d)
    add("v.post_ln.weight", d)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


__all__ = ["VisionShape", "write_random_mmproj"]
