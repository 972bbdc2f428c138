"""The catalog as the worker serves it: one Hub client and one download manager per process,
made on first use so a worker that never touches the Hub pays nothing for it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.catalog.registry import ModelRegistry
from engine.errors import Overloaded

if TYPE_CHECKING:
    from engine.catalog.downloads import DownloadManager
    from engine.catalog.hub import HubClient
    from engine.fit.speed import MachineSpeed
    from engine.hardware import HardwareInfo


def _default_downloads(registry: ModelRegistry, hub: HubClient) -> DownloadManager:
    from engine.catalog.downloads import DownloadManager

    return DownloadManager(registry, hub=hub)


class CatalogServices:
    """Hub access and downloads sharing the worker's registry.

    Both are built at most once, whichever threads ask first (the worker's resume thread and the
    first ``/api/downloads`` request race for it): two download managers would resume the same
    jobs twice. ``close()`` waits for a manager being built and closes it.

    Args:
        registry: The registry downloads register into.
        endpoint: Hub endpoint (HF_ENDPOINT by default).
        token: Hub token for gated or private repos (HF_TOKEN by default).
        make_downloads: Builds the download manager from the registry and hub client (a
            :class:`DownloadManager` by default).
        hardware: Describes the machine the advisor labels variants for (this one, detected
            afresh each time, by default).
        speed: The measured rates of a machine, for the speed model (by default this machine's, measured once and
            kept; None for a machine that is not this one).
    """

    def __init__(
        self,
        registry: ModelRegistry,
        *,
        endpoint: str | None = None,
        token: str | None = None,
        make_downloads: Callable[[ModelRegistry, HubClient], DownloadManager] | None = None,
        hardware: Callable[[], HardwareInfo] | None = None,
        speed: Callable[[HardwareInfo], MachineSpeed | None] | None = None,
    ) -> None:
        self.registry = registry
        self._hardware = hardware
        self._speed = speed
        self._endpoint = endpoint
        self._token = token
        self._make_downloads = make_downloads or _default_downloads
        # One lock, re-entrant: building the manager builds the hub client under it.
        self._lock = threading.RLock()
        self._hub: HubClient | None = None
        self._downloads: DownloadManager | None = None
        self._closed = False

    @property
    def hub(self) -> HubClient:
        hub = self._hub
        if hub is not None:
            return hub
        with self._lock:
            if self._hub is None:
                from engine.catalog.hub import HubClient

                self._hub = HubClient(endpoint=self._endpoint, token=self._token)
            return self._hub

    def hardware(self) -> HardwareInfo:
        """The machine the advisor plans for."""
        if self._hardware is not None:
            return self._hardware()
        from engine.hardware import detect_hardware

        return detect_hardware()

    def speed(self, hardware: HardwareInfo, *, wait: bool = False) -> MachineSpeed | None:
        """The measured rates of ``hardware`` for the speed model (None: not known, and not this machine). The
        first asking on a machine starts the probe (seconds); ``wait`` waits for it, else None is the answer
        meanwhile."""
        if self._speed is not None:
            return self._speed(hardware)
        from engine.fit.probe import speed_for

        return speed_for(hardware, wait=wait)

    @property
    def downloads(self) -> DownloadManager:
        """The process's one download manager; the downloads cut off last time resume when it is built.

        Raises:
            Overloaded: the services were closed (the worker is stopping).
        """
        manager = self._downloads
        if manager is not None and not self._closed:
            return manager
        with self._lock:
            if self._closed:
                raise Overloaded("The worker is stopping; try the download again once it has restarted.")
            if self._downloads is None:
                manager = self._make_downloads(self.registry, self.hub)
                manager.resume_interrupted()
                self._downloads = manager
            return self._downloads

    def resume_downloads(self) -> None:
        """Resume the downloads cut off when the last worker ended. Where there are none, nothing is built: the
        download manager and its Hub client (a second of imports) wait for the first request that needs them."""
        if self._downloads is None:
            from engine.catalog.download_store import DownloadStore

            if not DownloadStore(self.registry.engine).any_to_resume():
                return
        _ = self.downloads  # built: it resumes them

    def close(self) -> None:
        """Close the download manager (pausing its downloads for the next worker), waiting for one
        being built."""
        with self._lock:
            self._closed = True
            manager = self._downloads
        if manager is not None:
            manager.close()
