"""Other apps' model stores, laid out as those apps lay them out, with the starter GGUF linked in (never copied)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

CHATML_GO = (
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"
)
PARAMS = {"temperature": 0.2, "top_k": 20, "stop": ["<|im_end|>"], "num_ctx": 2048}
SYSTEM = "You are a pirate."


def link(src: Path, dst: Path) -> Path:
    """``dst`` as a hard link to ``src`` (a symlink across file systems): the same bytes, nothing copied."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        dst.symlink_to(src)
    return dst


def _blob(root: Path, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    path = root / "blobs" / f"sha256-{digest}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def write_manifest(root: Path, parts: tuple[str, str, str, str], layers: list[dict]) -> Path:
    manifest = root / "manifests" / Path(*parts)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    config = _blob(root, b'{"model_format":"gguf"}')
    body = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **config},
        "layers": layers,
    }
    manifest.write_text(json.dumps(body))
    return manifest


def ollama_store(
    root: Path,
    gguf: Path,
    *,
    parts: tuple[str, str, str, str] = ("registry.ollama.ai", "library", "smollm2", "135m"),
    template: str | None = CHATML_GO,
    params: dict | None = None,
    system: str | None = SYSTEM,
    projector: Path | None = None,
) -> Path:
    """A store as Ollama lays it out; the model layer's blob is ``gguf`` hard-linked in. Returns the manifest."""
    digest = "0" * 48 + hashlib.sha256(str(gguf).encode()).hexdigest()[:16]  # the real hash takes a second to compute
    blob = root / "blobs" / f"sha256-{digest}"
    if not blob.exists():
        link(gguf, blob)
    layers = [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": gguf.stat().st_size}]
    if projector is not None:
        pdigest = hashlib.sha256(projector.read_bytes()).hexdigest()
        link(projector, root / "blobs" / f"sha256-{pdigest}")
        layers.append({"mediaType": "application/vnd.ollama.image.projector", "digest": f"sha256:{pdigest}", "size": 1})
    if template is not None:
        layers.append({"mediaType": "application/vnd.ollama.image.template", **_blob(root, template.encode())})
    layers.append({"mediaType": "application/vnd.ollama.image.params", **_blob(root, json.dumps(params or PARAMS).encode())})
    if system is not None:
        layers.append({"mediaType": "application/vnd.ollama.image.system", **_blob(root, system.encode())})
    layers.append({"mediaType": "application/vnd.ollama.image.license", **_blob(root, b"Apache-2.0")})
    return write_manifest(root, parts, layers)


def lmstudio_folder(root: Path, gguf: Path, projector: Path) -> Path:
    """``publisher/repo/file.gguf`` with an ``mmproj`` beside it, as LM Studio downloads them."""
    folder = root / "lmstudio-community" / "SmolLM2-135M-Instruct-GGUF"
    link(gguf, folder / "SmolLM2-135M-Instruct-Q4_1.gguf")
    link(projector, folder / "mmproj-SmolLM2-135M-F16.gguf")
    return folder


def hf_cache_repo(root: Path, repo: str, files: dict[str, Path | bytes], *, revision: str = "a" * 40) -> Path:
    """``models--org--name`` as huggingface_hub leaves it: blobs, a snapshot of links to them, refs/main."""
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / revision
    for name, content in files.items():
        blob = repo_dir / "blobs" / hashlib.sha256(f"{repo}/{name}".encode()).hexdigest()
        if isinstance(content, Path):
            link(content, blob)
        else:
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(content)
        target = snapshot / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(os.path.relpath(blob, target.parent))
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / "main").write_text(revision)
    return snapshot
