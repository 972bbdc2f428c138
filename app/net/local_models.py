"""LocalModels: the worker's local model list, shared by every page that offers a model."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.net.api import HearthApi
from app.net.types import ApiError, ModelInfo


class LocalModels(QObject):
    """Refreshed when the engine becomes ready and after imports, downloads and deletes."""

    changed = Signal(list)  # list[ModelInfo]
    failed = Signal(ApiError)

    def __init__(self, api: HearthApi, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.api = api
        self.models: list[ModelInfo] = []

    def refresh(self) -> None:
        call = self.api.models()
        call.succeeded.connect(self._loaded)
        call.failed.connect(self.failed)

    def _loaded(self, models: list[ModelInfo]) -> None:
        self.models = models
        self.changed.emit(models)

    def names(self) -> list[str]:
        return [m.name for m in self.models]

    def get(self, name: str) -> ModelInfo | None:
        return next((m for m in self.models if m.name == name), None)
