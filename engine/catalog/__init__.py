"""The model catalog: local registry, model metadata, Hub search and downloads."""

from engine.catalog.registry import LocalModel, ModelRegistry, resolve_model

__all__ = ["LocalModel", "ModelRegistry", "resolve_model"]
