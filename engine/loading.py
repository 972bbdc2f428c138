"""Open a model by name: resolve it in the registry, choose its backend, load it."""

from __future__ import annotations

from engine.backend_choice import choose_backend
from engine.backends import Backend, LoadOptions, create_backend
from engine.catalog.metadata import verify_gguf
from engine.catalog.registry import LocalModel, ModelRegistry, resolve_model


def open_model(
    name: str | None,
    *,
    backend: str | None = None,
    options: LoadOptions | None = None,
    registry: ModelRegistry | None = None,
) -> tuple[Backend, LocalModel]:
    """Load the model called ``name`` (the starter model when None) on its backend.

    Raises:
        ModelNotFound: no local model has that name.
        BackendUnavailable: the chosen backend cannot run here.
        ModelLoadError: the model's files could not be loaded.
    """
    model = resolve_model(name, registry)
    choice = choose_backend(model.format, override=backend)
    if model.format == "gguf":
        verify_gguf(model.path)
    engine = create_backend(choice.backend)
    try:
        engine.load(model.spec, options)
    except BaseException:
        engine.close()
        raise
    return engine, model
