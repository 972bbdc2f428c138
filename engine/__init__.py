"""Hearth's engine: types, backends, catalog, worker and the OpenAI-compatible server. No Qt."""

__version__ = "0.1.0"
__all__ = ["__version__"]
