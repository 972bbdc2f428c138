"""`hearth chat --image PATH`: pictures sent with a message from the terminal.

Each picture goes into the conversation as OpenAI's ``image_url`` part with a ``data:`` URL, and is read from
there by the same readers the server's dialects use (:mod:`engine.server.media`: size, pixel cap, a full decode),
so the terminal and the API send a model the same bytes and refuse the same files.
"""

from __future__ import annotations

import base64
import mimetypes
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.errors import InvalidRequest
from engine.types import MEDIA_MARKER, ChatMessage, MediaInput


def image_part(path: str | Path) -> dict[str, Any]:
    """An ``image_url`` part holding the picture at ``path`` as a ``data:`` URL.

    Raises:
        InvalidRequest: the file cannot be read, or is not a picture (or one too large), naming the path.
    """
    from engine.images import readable_image
    from engine.server.media import check_image

    where = str(path)
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"Cannot read the image {where} ({exc.strerror or exc}); check the path.", param="image") from exc
    if not data:
        raise InvalidRequest(f"The image {where} is empty; give a PNG, JPEG, GIF, BMP or WebP file.", param="image")
    checked = readable_image(check_image(data, f"The image {where}"), f"The image {where}")  # a full decode
    mime = mimetypes.guess_type(where)[0] if checked is data else None  # re-encoded: PNG
    mime = mime if mime and mime.startswith("image/") else "image/png"
    url = f"data:{mime};base64,{base64.b64encode(checked).decode()}"
    return {"type": "image_url", "image_url": {"url": url}}


def user_message(text: str, images: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A user turn: plain text, or the text then its pictures as content parts."""
    if not images:
        return {"role": "user", "content": text}
    return {"role": "user", "content": [{"type": "text", "text": text}, *images]}


def chat_messages(history: Sequence[Mapping[str, Any]]) -> tuple[ChatMessage, ...]:
    """``history`` as chat messages, each ``image_url`` part read and put at a media marker in its text.

    Raises:
        InvalidRequest: a picture that is not one (it was checked when attached, so only a changed file).
    """
    from engine.server.media import image_from_url, with_media
    from engine.types import as_messages

    items: list[dict[str, Any]] = []
    found: list[list[MediaInput]] = []
    for i, item in enumerate(history):
        content = item.get("content")
        own: list[MediaInput] = []
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if part.get("type") == "image_url":
                    own.append(image_from_url(part["image_url"]["url"], f"messages[{i}].content[{j}]", allow_remote=False))
                    parts.append({"type": "text", "text": MEDIA_MARKER})
                else:
                    parts.append(part)
            item = {**item, "content": parts}
        items.append(dict(item))
        found.append(own)
    return with_media(as_messages(items), found)


#: A picture's path, as `ollama run` finds one in a message: from ``/``, ``./``, ``~/`` or ``\`` (a drive letter before
#: it on Windows) to a ``.jpg``, ``.jpeg``, ``.png`` or ``.webp`` ending.
_PICTURE_PATH = re.compile(r"(?:[a-zA-Z]:)?(?:\./|/|~/|\\).*\.(?i:jpe?g|png|webp)", re.DOTALL)
_QUOTED = re.compile(r"(?=('([^'\n]{1,4096})'|\"([^\"\n]{1,4096})\"|`([^`\n]{1,4096})`))")  # in quotes, from each quote
_WORD = re.compile(r"(?:\\\s|\S)+")  # a word: blanks escaped with a backslash stay in it
_PICTURE_END = re.compile(r"\.(?i:jpe?g|png|webp)$")
_LEADING, _TRAILING = "([{<`'\"", ".,;:!?)]}>`'\""  # around a path in a sentence: `What is in ./photo.jpg?`
MAX_NAMED_PICTURES = 16  # a message's paths attached (a longer list is text)
MAX_PATH_WORDS = 8  # words of a path written with plain spaces (`/tmp/my pic.png`), as `ollama run` reads one
MAX_LOOKS = 256  # files a message's words are looked up as (a look costs microseconds)


def _written_paths(text: str):
    """``(as written, the path)`` for each text of ``text`` shaped as a picture's path, nearest first: in quotes or
    backticks, a word (``.png's`` and the punctuation around it left out), and a word with the words before it
    where a path has plain spaces; linear in the text's length, however many slashes or quotes a pasted text holds."""
    for m in _QUOTED.finditer(text):
        yield m.group(1), m.group(2) or m.group(3) or m.group(4)
    words = []
    for m in _WORD.finditer(text):
        start, end = m.span()
        while start < end and text[start] in _LEADING:
            start += 1
        for _ in range(2):  # `/tmp/x.png's colours`, `/tmp/x.png's,`
            while end > start and text[end - 1] in _TRAILING:
                end -= 1
            if text[start:end].lower().endswith("'s"):
                end -= 2
        words.append((start, end))
    for i, (start, end) in enumerate(words):
        if not 2 < end - start <= 4096 or not _PICTURE_END.search(text[start:end]):
            continue
        for first in range(i, max(-1, i - MAX_PATH_WORDS), -1):
            begin = words[first][0]
            if end - begin > 4096 or (first < i and _PICTURE_END.search(text[begin : words[first][1]])):
                break  # (a path with blanks holds no other picture's name)
            written = text[begin:end]
            yield written, written.replace("\\ ", " ")


def pictures_in(text: str) -> tuple[str, list[dict[str, Any]]]:
    """The pictures ``text`` names by path, attached as `ollama run` attaches them for a model that sees: each path of
    a file there taken out of the text (quotes around it too) and said on stderr; a path to no file stays text.

    Raises:
        InvalidRequest: a file named so that is not a picture, naming it.
    """
    parts: list[dict[str, Any]] = []
    seen: set[str] = set()
    looks = 0
    for written, path in _written_paths(text):
        if len(parts) >= MAX_NAMED_PICTURES or looks >= MAX_LOOKS:
            break
        if path in seen or not _PICTURE_PATH.fullmatch(path) or written not in text:  # (a part taken out already)
            continue
        seen.add(path)
        looks += 1
        try:
            there = Path(path).expanduser().is_file()
        except (OSError, ValueError):
            there = False
        if not there:
            continue
        parts.append(image_part(path))
        print(f"Added image '{path}'", file=sys.stderr)
        text = text.replace(written, "", 1)  # (where it comes first: a longer path may hold it)
    return (text.strip() if parts else text), parts


def can_see(model: Any) -> bool:
    """Whether the local model ``model`` has a projector that sees."""
    from engine.catalog.pairing import projector_senses

    return model.mmproj is not None and "vision" in projector_senses(model.mmproj)


def check_sees(model: Any) -> None:
    """Refuse pictures for a local model without a projector that sees, before it is loaded.

    Raises:
        InvalidRequest: the model cannot see, saying how to give it a projector.
    """
    if not can_see(model):
        raise InvalidRequest(
            f"Model '{model.name}' cannot see images; choose one that can (`hearth models` marks them [vision]), or "
            "pair it with its projector: `hearth import FILE.gguf --mmproj MMPROJ.gguf`.",
            param="image",
        )


__all__ = ["can_see", "chat_messages", "check_sees", "image_part", "pictures_in", "user_message"]
