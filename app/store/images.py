"""Pictures attached to messages, kept in the data folder by content hash (``images/<sha256>.<ext>``).

A picture attached twice is stored once. A message refers to its pictures by :class:`ImageRef` (kept in
its row); a file no message refers to any more (its chat was deleted) is removed by :meth:`ImageStore.collect`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

FOLDER_NAME = "images"
MAX_IMAGE_BYTES = 20 * 1024 * 1024  # what the worker takes per picture
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif", "image/bmp": "bmp"}


class ImageTooLarge(ValueError):
    """A picture over :data:`MAX_IMAGE_BYTES`."""


@dataclass(frozen=True, slots=True)
class ImageRef:
    """One picture of a message: its content hash (the file's name), type, size in pixels and given name."""

    sha256: str
    mime: str
    width: int = 0
    height: int = 0
    name: str = ""

    @classmethod
    def from_json(cls, d: dict) -> ImageRef:
        """Raises KeyError, TypeError or ValueError for an object that is not a picture's reference."""
        mime = str(d["mime"])
        if mime not in EXTENSIONS:
            raise ValueError(f"not a picture type: {mime}")
        return cls(str(d["sha256"]), mime, int(d.get("width") or 0), int(d.get("height") or 0), str(d.get("name") or ""))


def images_json(images: Iterable[ImageRef]) -> str | None:
    items = [asdict(i) for i in images]
    return json.dumps(items) if items else None


def images_from(text: str | None) -> tuple[ImageRef, ...]:
    """A message's pictures from its row (none for a missing or unreadable value)."""
    if not text:
        return ()
    try:
        return tuple(ImageRef.from_json(d) for d in json.loads(text))
    except (KeyError, TypeError, ValueError):
        log.warning("a message's pictures cannot be read; it is shown without them")
        return ()


class ImageStore:
    """The pictures folder of a data folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder / FOLDER_NAME

    def path(self, ref: ImageRef) -> Path:
        return self.folder / f"{ref.sha256}.{EXTENSIONS.get(ref.mime, 'bin')}"

    def put(self, data: bytes, mime: str, *, width: int = 0, height: int = 0, name: str = "") -> ImageRef:
        """Keep ``data`` (a picture of type ``mime``) once, by its hash.

        Raises:
            ImageTooLarge: over :data:`MAX_IMAGE_BYTES`.
            ValueError: ``mime`` is not a picture type the models take.
            OSError: the folder cannot be written.
        """
        if mime not in EXTENSIONS:
            raise ValueError(f"{mime} is not a picture type Hearth keeps; use PNG, JPEG, WebP, GIF or BMP.")
        if len(data) > MAX_IMAGE_BYTES:
            raise ImageTooLarge(f"The picture is {len(data) / 1e6:.0f} MB; attach one under {MAX_IMAGE_BYTES // 2**20} MB.")
        ref = ImageRef(hashlib.sha256(data).hexdigest(), mime, width, height, name)
        target = self.path(ref)
        if not target.exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".part")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        return ref

    def read(self, ref: ImageRef) -> bytes | None:
        """The picture's bytes; None when its file is gone."""
        try:
            return self.path(ref).read_bytes()
        except OSError:
            return None

    def data_url(self, ref: ImageRef) -> str | None:
        data = self.read(ref)
        return None if data is None else f"data:{ref.mime};base64,{base64.b64encode(data).decode()}"

    def collect(self, referenced: set[str]) -> int:
        """Remove the pictures no message refers to (``referenced``: their hashes). Returns how many."""
        removed = 0
        if not self.folder.is_dir():
            return 0
        for path in self.folder.iterdir():
            if path.suffix == ".part" or path.stem not in referenced:
                try:
                    path.unlink()
                    removed += 1
                except OSError as exc:
                    log.warning("cannot remove %s: %s", path, exc)
        return removed


__all__ = ["ImageRef", "ImageStore", "ImageTooLarge", "MAX_IMAGE_BYTES", "images_from", "images_json"]
