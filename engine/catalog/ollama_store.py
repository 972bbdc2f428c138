"""Ollama's model store, read in place: ``manifests/<host>/<namespace>/<model>/<tag>`` JSON manifests
whose layers point at ``blobs/sha256-<hex>`` files. The ``model`` layer is the GGUF, ``projector`` its
mmproj, and ``params``, ``system`` and ``template`` the defaults Ollama runs it with."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from engine.catalog.other_apps import FoundModel

log = logging.getLogger(__name__)

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
_MEDIA = "application/vnd.ollama.image."
_DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
_MAX_MANIFEST = 1 << 20
_MAX_TEXT_LAYER = 256 * 1024  # params, system and template layers are a few KB
_MAX_MANIFESTS = 5000


def ollama_name(host: str, namespace: str, model: str, tag: str) -> str:
    """The name ``ollama list`` shows: ``llama3.2:3b``, ``user/model:tag``, ``hf.co/org/repo:Q4_K_M``."""
    if host == DEFAULT_HOST:
        return f"{model}:{tag}" if namespace == DEFAULT_NAMESPACE else f"{namespace}/{model}:{tag}"
    return f"{host}/{namespace}/{model}:{tag}"


def blob_path(root: Path, digest: str) -> Path | None:
    """``blobs/sha256-<hex>`` for a ``sha256:<hex>`` digest; None for anything else."""
    m = _DIGEST.match(digest or "")
    return root / "blobs" / f"sha256-{m.group(1)}" if m else None


def _manifests(root: Path) -> list[tuple[Path, tuple[str, str, str, str]]]:
    out = []
    base = root / "manifests"
    for dirpath, dirnames, filenames in os.walk(base):
        rel = Path(dirpath).relative_to(base).parts
        if len(rel) >= 3:
            dirnames[:] = []
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        if len(rel) == 3:
            for tag in filenames:
                if not tag.startswith("."):
                    out.append((Path(dirpath) / tag, (*rel, tag)))  # type: ignore[arg-type]
        if len(out) > _MAX_MANIFESTS:
            log.warning("stopped reading Ollama's manifests in %s after %d", base, _MAX_MANIFESTS)
            break
    return sorted(out)


def _text(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        if path.stat().st_size > _MAX_TEXT_LAYER:
            log.info("skipped %s: larger than a template or parameters layer can be", path)
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _broken(manifest: Path, name: str, problem: str) -> FoundModel:
    """A model Ollama lists that cannot be used: found, so that the scan says why it was left out."""
    return FoundModel(origin="ollama", name=name, path=manifest, manifest=manifest, problem=problem)


def read_manifest(root: Path, manifest: Path, name: str) -> FoundModel | None:
    """The model a manifest describes; one with a ``problem`` when the manifest cannot be read or its model
    file is missing; None when it has no GGUF model layer (a safetensors import)."""
    try:
        if manifest.stat().st_size > _MAX_MANIFEST:
            return _broken(manifest, name, f"Its manifest {manifest} is larger than a manifest can be.")
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except OSError as exc:
        return _broken(manifest, name, f"Its manifest {manifest} cannot be read ({exc.strerror}).")
    except ValueError:
        return _broken(manifest, name, f"Its manifest {manifest} is not valid JSON; `ollama pull {name}` repairs it.")
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        return None
    by_kind: dict[str, tuple[Path, int]] = {}
    for layer in layers:
        if not isinstance(layer, dict) or not str(layer.get("mediaType", "")).startswith(_MEDIA):
            continue
        kind = str(layer["mediaType"])[len(_MEDIA) :]
        path = blob_path(root, str(layer.get("digest", "")))
        if path is not None and kind not in by_kind:
            size = layer.get("size")
            by_kind[kind] = (path, size if isinstance(size, int) else 0)
    if "model" not in by_kind:
        return None
    model, size = by_kind["model"]
    try:
        with model.open("rb") as f:
            if f.read(4) != b"GGUF":
                return None  # a safetensors import, or a blob still downloading
        size = model.stat().st_size
    except FileNotFoundError:
        return _broken(manifest, name, f"Its model file {model} is missing from Ollama's store; "
                                       f"`ollama pull {name}` fetches it again.")  # fmt: skip
    except OSError:
        return None
    params: dict[str, Any] = {}
    raw = _text(by_kind.get("params", (None, 0))[0])
    if raw:
        try:
            loaded = json.loads(raw)
            params = loaded if isinstance(loaded, dict) else {}
        except ValueError:
            pass
    projector = by_kind.get("projector", (None, 0))[0]
    return FoundModel(
        origin="ollama",
        name=name,
        path=model,
        format="gguf",
        size_bytes=size,
        mmproj=projector if projector is not None and projector.is_file() else None,
        manifest=manifest,
        params=params,
        system=_text(by_kind.get("system", (None, 0))[0]),
        template=_text(by_kind.get("template", (None, 0))[0]),
    )


def scan_ollama(roots: tuple[Path, ...]) -> list[FoundModel]:
    """Every model with a GGUF layer in Ollama's stores ``roots``, by the names Ollama shows."""
    found: dict[str, FoundModel] = {}
    for root in roots:
        for manifest, parts in _manifests(root):
            name = ollama_name(*parts)
            if name in found:
                continue
            model = read_manifest(root, manifest, name)
            if model is not None:
                found[name] = model
    return list(found.values())


__all__ = ["ollama_name", "blob_path", "read_manifest", "scan_ollama"]
