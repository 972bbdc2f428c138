"""RemoteRegistry: the providers as the worker sees them, re-read whenever the providers file
changes (so `hearth remote add` in a terminal reaches a running worker), and their model lists,
fetched concurrently with a short timeout and kept for a few seconds."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from engine.errors import RemoteAuthFailed, RemoteError, RemoteTimeout, RemoteUnreachable
from engine.remote.client import LIST_TIMEOUT, RemoteClient, RemoteModel
from engine.remote.providers import ProviderAccess, ProviderStore, RemoteProvider, split_model_id

log = logging.getLogger(__name__)

CACHE_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class ProviderStatus:
    """A provider and what listing its models found: the models, or the error."""

    provider: RemoteProvider
    models: tuple[RemoteModel, ...] = ()
    error: RemoteError | None = None

    @property
    def state(self) -> str:
        """ok | refused (the key) | unreachable | timeout | error"""
        if self.error is None:
            return "ok"
        if isinstance(self.error, RemoteAuthFailed):
            return "refused"
        if isinstance(self.error, RemoteUnreachable):
            return "unreachable"
        if isinstance(self.error, RemoteTimeout):
            return "timeout"
        return "error"

    def to_json(self) -> dict[str, Any]:
        p = self.provider
        return {
            "name": p.name,
            "url": p.base_url,
            "key": p.key_store,
            "timeout": p.timeout,
            "state": self.state,
            "message": str(self.error) if self.error else None,
            "models": [
                {"id": m.id, "remote_id": m.remote_id, "context_length": m.context_length} for m in self.models
            ],
        }


class RemoteRegistry:
    """Thread-compatible for one event loop (the worker's).

    Args:
        store: The providers file and keys (default: the data folder's).
        client: The HTTP client for every provider.
    """

    def __init__(self, store: ProviderStore | None = None, client: RemoteClient | None = None) -> None:
        self.store = store or ProviderStore()
        self.client = client or RemoteClient()
        self._signature: object = object()  # never equal to a real one: the first use loads
        self._access: dict[str, ProviderAccess] = {}
        self._cache: dict[str, tuple[float, ProviderStatus]] = {}
        self._lock = asyncio.Lock()

    async def accesses(self) -> dict[str, ProviderAccess]:
        """The providers with their keys, re-read if the providers file changed."""
        if self.store.signature() == self._signature:
            return self._access
        async with self._lock:
            signature = self.store.signature()
            if signature != self._signature:
                # Keys may come from the OS keyring (a D-Bus call): off the event loop.
                self._access = await asyncio.to_thread(self._load)
                self._signature = signature
                self._cache.clear()
        return self._access

    def _load(self) -> dict[str, ProviderAccess]:
        return {p.name: self.store.access(p) for p in self.store.list()}

    async def route(self, model_id: str) -> tuple[ProviderAccess, str] | None:
        """``(provider, the provider's model id)`` when ``model_id`` is ``provider/model``, else None."""
        if "/" not in model_id:
            return None
        accesses = await self.accesses()
        split = split_model_id(model_id, set(accesses))
        if split is None:
            return None
        return accesses[split[0]], split[1]

    async def status(self, access: ProviderAccess, *, fresh: bool = False) -> ProviderStatus:
        """What listing ``access``'s models gives (kept for :data:`CACHE_SECONDS`)."""
        hit = self._cache.get(access.name)
        now = time.monotonic()
        if hit is not None and not fresh and now - hit[0] < CACHE_SECONDS and hit[1].provider == access.provider:
            return hit[1]
        try:
            models = await self.client.list_models(access, timeout=LIST_TIMEOUT)
            result = ProviderStatus(access.provider, tuple(models))
        except RemoteError as exc:
            log.info("remote provider %s: %s", access.name, exc)
            result = ProviderStatus(access.provider, error=exc)
        self._cache[access.name] = (time.monotonic(), result)
        return result

    async def statuses(self, *, fresh: bool = False) -> list[ProviderStatus]:
        """Every provider's status, asked concurrently (one slow provider costs its timeout once)."""
        accesses = list((await self.accesses()).values())
        return list(await asyncio.gather(*(self.status(a, fresh=fresh) for a in accesses)))

    async def models(self) -> list[RemoteModel]:
        """The models of every provider that answered."""
        return [m for s in await self.statuses() for m in s.models]

    async def add(self, name: str, url: str, *, api_key: str | None = None, timeout: float | None = None) -> ProviderStatus:
        """Store a provider and list its models (an unreachable one is kept, with its error).

        Raises:
            InvalidRequest: a bad name, URL or timeout, or the name is taken.
        """
        await asyncio.to_thread(self.store.add, name, url, api_key=api_key, timeout=timeout)
        access = (await self.accesses())[name]
        return await self.status(access, fresh=True)

    async def remove(self, name: str) -> RemoteProvider:
        """Raises ProviderNotFound."""
        provider = await asyncio.to_thread(self.store.remove, name)
        self._cache.pop(name, None)
        await self.accesses()
        return provider

    async def aclose(self) -> None:
        await self.client.aclose()


def probe_all(store: ProviderStore | None = None) -> list[ProviderStatus]:
    """Every provider's status, from synchronous code (the CLI)."""

    async def run() -> list[ProviderStatus]:
        registry = RemoteRegistry(store)
        try:
            return await registry.statuses(fresh=True)
        finally:
            await registry.aclose()

    return asyncio.run(run())


__all__ = ["CACHE_SECONDS", "ProviderStatus", "RemoteRegistry", "probe_all"]
