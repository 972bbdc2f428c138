"""The catalog as the worker serves it: one Hub client and one download manager per process,
made on first use so a worker that never touches the Hub pays nothing for it."""

from __future__ import annotations

import threading
from functools import cached_property

from engine.catalog.registry import ModelRegistry


class CatalogServices:
    """Hub access and downloads sharing the worker's registry.

    Args:
        registry: The registry downloads register into.
        endpoint: Hub endpoint (HF_ENDPOINT by default).
        token: Hub token for gated or private repos (HF_TOKEN by default).
    """

    def __init__(self, registry: ModelRegistry, *, endpoint: str | None = None, token: str | None = None) -> None:
        self.registry = registry
        self._endpoint = endpoint
        self._token = token
        self._lock = threading.Lock()

    @cached_property
    def hub(self):
        from engine.catalog.hub import HubClient

        return HubClient(endpoint=self._endpoint, token=self._token)

    @cached_property
    def downloads(self):
        from engine.catalog.downloads import DownloadManager

        with self._lock:
            manager = DownloadManager(self.registry, hub=self.hub)
            manager.resume_interrupted()
            return manager

    def close(self) -> None:
        if "downloads" in self.__dict__:
            self.downloads.close()
