"""Loading the starter model into a backend for the loader tests (closed again if the load fails)."""

from __future__ import annotations

from pathlib import Path

from engine.backends import Backend
from engine.backends.base import LoadOptions, ModelSpec


def load_starter(backend: Backend, starter_path: Path, options: LoadOptions) -> Backend:
    """``backend`` with the starter model loaded under ``options``."""
    try:
        backend.load(ModelSpec(name="starter", path=starter_path), options)
    except BaseException:
        backend.close()
        raise
    return backend
