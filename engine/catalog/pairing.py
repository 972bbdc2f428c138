"""Pairing a model file with its multimodal projector (``mmproj``) at import.

LM Studio (and the Hub's GGUF repos) keep a model's projector beside it as ``mmproj-*.gguf``; ``hearth import
FILE.gguf`` pairs one found there, and ``--mmproj PATH`` (``mmproj`` on ``POST /api/models/import``) names
one. The pair is recorded in the registry entry (``LocalModel.mmproj``), so every load of the model sees.
"""

from __future__ import annotations

import struct
from pathlib import Path

from engine.catalog.gguf_header import read_gguf_file
from engine.catalog.registry import LocalModel, ModelRegistry
from engine.catalog.variants import RemoteFile, default_projector, is_projector
from engine.errors import InvalidRequest


def projector_beside(model: Path) -> Path | None:
    """The ``mmproj*.gguf`` in the model file's folder (the F16 one when there are several), or None."""
    if not model.is_file():
        return None
    try:
        found = [p for p in model.parent.iterdir() if p.is_file() and is_projector(p.name) and p != model]
    except OSError:
        return None
    best = default_projector([RemoteFile(str(p), 0) for p in sorted(found)])
    return Path(best.path) if best is not None else None


def check_projector(path: Path) -> Path:
    """``path``, resolved, when it is a multimodal projector GGUF (``general.type`` ``mmproj``, a clip header).

    Raises:
        InvalidRequest: it is missing, or not a projector (naming the path and what to give instead).
    """
    path = path.expanduser()
    if not path.is_file():
        raise InvalidRequest(f"There is no projector file at {path}; give the path of an mmproj*.gguf file.", param="mmproj")
    try:
        kv, _ = read_gguf_file(path)
    except (OSError, ValueError, struct.error) as exc:
        raise InvalidRequest(f"{path} is not a GGUF file Hearth can read ({exc}); give an mmproj*.gguf file.", param="mmproj") from exc
    if kv.get("general.type") != "mmproj" and kv.get("general.architecture") != "clip":
        raise InvalidRequest(
            f"{path} is a model, not a multimodal projector; give the mmproj*.gguf file that belongs to it.", param="mmproj"
        )
    return path.resolve()


def projector_senses(path: Path) -> list[str]:
    """What a model paired with the projector at ``path`` takes in besides text: ``vision``, ``audio`` (read from
    the projector's header, as libmtmd reads it: a file from before the audio encoders is a vision one); none
    for a file that cannot be read."""
    try:
        kv, _ = read_gguf_file(path)
    except (OSError, ValueError, struct.error):
        return []
    audio = bool(kv.get("clip.has_audio_encoder", False))
    vision = bool(kv.get("clip.has_vision_encoder", not audio))
    return [name for name, has in (("vision", vision), ("audio", audio)) if has]


def import_model(
    registry: ModelRegistry, path: Path, *, name: str | None = None, mmproj: Path | None = None, pair: bool = True
) -> LocalModel:
    """Register the model at ``path`` (its files stay where they are), paired with ``mmproj``, else with the
    projector beside it when ``pair`` is true.

    Raises:
        ModelLoadError: the model file cannot be read.
        InvalidRequest: ``mmproj`` is not a projector, or the name is taken or cannot name a model.
    """
    if name is not None:
        from engine.validation import model_name

        model_name(name)
    path = Path(path).expanduser()
    if is_projector(path.name) and mmproj is None:
        raise InvalidRequest(
            f"{path.name} is a multimodal projector, not a model; import the model file beside it (it is paired "
            "with it), or name it with --mmproj.",
            param="path",
        )
    projector = check_projector(mmproj) if mmproj is not None else (projector_beside(path) if pair else None)
    if projector is not None and mmproj is None:
        try:
            projector = check_projector(projector)
        except InvalidRequest:  # a file named mmproj* that is not one: import the model alone
            projector = None
    return registry.register(
        path, name=name, source="import", origin_info={"mmproj": str(projector)} if projector is not None else None
    )


__all__ = ["import_model", "projector_beside", "check_projector", "projector_senses"]
