"""Whether a local model can think, read once per file version from the chat template it renders with."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path


def model_thinks(m) -> bool:
    """Whether the model's chat template has a thinking switch or writes a thinking tag (``"thinking"`` among its
    capabilities). An Ollama model's translated template wins over its file's, as when it loads."""
    from engine.tools.reasoning import template_thinks

    if m.chat_template:
        return template_thinks(m.chat_template)
    path = Path(m.path)
    try:
        stat = path.stat()
    except OSError:
        return False
    return _file_thinks(str(path), m.format, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=512)
def _file_thinks(path: str, fmt: str, _mtime_ns: int, _size: int) -> bool:
    """The file's own template, read once per version of the file (a listing asks for every model each time)."""
    from engine.server.ollama_models import model_header
    from engine.tools.reasoning import template_thinks

    kv = model_header(_Files(Path(path), fmt))
    template = kv.get("tokenizer.chat_template") or kv.get("chat_template") or ""
    return isinstance(template, str) and template_thinks(template)


class _Files:
    """What :func:`model_header` reads of a model: where its files are and their format."""

    def __init__(self, path: Path, fmt: str) -> None:
        self.path = path
        self.format = fmt


__all__ = ["model_thinks"]
