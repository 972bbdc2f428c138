"""LocalModels: the worker's local model list, and the remote providers' models, shared by every
page that offers a model."""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Signal

from app.net.api import HearthApi
from app.net.remote_types import ProviderInfo, RemoteModelInfo
from app.net.types import ApiError, ModelInfo

log = logging.getLogger(__name__)


class LocalModels(QObject):
    """Refreshed when the engine becomes ready and after imports, downloads and deletes; the
    remote providers' models with them, and when a provider is added or removed."""

    changed = Signal(list)  # list[ModelInfo]
    failed = Signal(ApiError)
    remote_changed = Signal(list)  # list[ProviderInfo]

    def __init__(self, api: HearthApi, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.api = api
        self.models: list[ModelInfo] = []
        self.providers: list[ProviderInfo] = []
        self.remotes_known = False  # whether the providers were listed yet (until then a remote model is not "gone")

    def refresh(self) -> None:
        call = self.api.models()
        call.succeeded.connect(self._loaded)
        call.failed.connect(self.failed)
        self.refresh_remotes()

    def refresh_remotes(self, *, fresh: bool = False) -> None:
        call = self.api.remotes(fresh=fresh)
        call.succeeded.connect(self._remotes_loaded)
        # An engine without remote providers (an older worker) simply has none to offer.
        call.failed.connect(lambda e: log.info("no remote providers: %s", e.message))

    def _remotes_loaded(self, providers: list[ProviderInfo]) -> None:
        self.providers = providers
        self.remotes_known = True
        self.remote_changed.emit(providers)

    def remote_models(self) -> list[RemoteModelInfo]:
        return [m for p in self.providers for m in p.models]

    def provider_of(self, model_id: str) -> ProviderInfo | None:
        """The provider serving ``model_id`` (``provider/model``), None for a local model."""
        return next((p for p in self.providers if any(m.id == model_id for m in p.models)), None)

    def _loaded(self, models: list[ModelInfo]) -> None:
        self.models = models
        self.changed.emit(models)

    def names(self) -> list[str]:
        return [m.name for m in self.models]

    def get(self, name: str) -> ModelInfo | None:
        return next((m for m in self.models if m.name == name), None)
