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
                {"id": m.id, "provider": p.name, "remote_id": m.remote_id, "context_length": m.context_length}
                for m in self.models
            ],
        }


class RemoteRegistry:
    """Used from one event loop (the worker's).

    Args:
        store: The providers file and keys (default: the data folder's).
        client: The HTTP client for every provider.
    """

    def __init__(self, store: ProviderStore | None = None, client: RemoteClient | None = None) -> None:
        self.store = store or ProviderStore()
        self.client = client or RemoteClient()
        self._signature: object = object()  # never equal to a real one: the first use loads
        self._providers: dict[str, RemoteProvider] = {}
        self._keys: dict[str, ProviderAccess] = {}
        self._cache: dict[str, tuple[float, ProviderStatus]] = {}

    def providers(self) -> dict[str, RemoteProvider]:
        """The providers by name, re-read if the providers file changed (a small file: read inline)."""
        signature = self.store.signature()
        if signature != self._signature:
            self._providers = {p.name: p for p in self.store.list()}
            self._signature = signature
            self._cache.clear()
            self._keys = {n: a for n, a in self._keys.items() if self._providers.get(n) == a.provider}
        return self._providers

    async def access(self, provider: RemoteProvider) -> ProviderAccess:
        """``provider`` with its key. The key may come from the OS keyring (a D-Bus call that can
        wait on an unlock prompt): it is read off the event loop, once, and only for this provider."""
        cached = self._keys.get(provider.name)
        if cached is not None and cached.provider == provider:
            return cached
        access = await asyncio.to_thread(self.store.access, provider)
        if access.api_key is not None or provider.key_store is None:  # a failed read is tried again
            self._keys[provider.name] = access
        return access

    async def accesses(self) -> dict[str, ProviderAccess]:
        """Every provider with its key."""
        providers = list(self.providers().values())
        found = await asyncio.gather(*(self.access(p) for p in providers))
        return {a.name: a for a in found}

    async def route(self, model_id: str) -> tuple[ProviderAccess, str] | None:
        """``(provider, the provider's model id)`` when ``model_id`` is ``provider/model``, else None.
        A local model's name never waits on a provider's key."""
        if "/" not in model_id:
            return None
        providers = self.providers()
        split = split_model_id(model_id, set(providers))
        if split is None:
            return None
        return await self.access(providers[split[0]]), split[1]

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
        except Exception as exc:  # noqa: BLE001 - one odd provider never fails the whole listing
            log.warning("remote provider %s: unexpected %r", access.name, exc)
            error = RemoteUnreachable(provider=access.name, url=access.base_url, reason=str(exc) or type(exc).__name__)
            result = ProviderStatus(access.provider, error=error)
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
        provider = await asyncio.to_thread(self.store.add, name, url, api_key=api_key, timeout=timeout)
        self.providers()
        return await self.status(await self.access(provider), fresh=True)

    async def remove(self, name: str) -> RemoteProvider:
        """Raises ProviderNotFound."""
        provider = await asyncio.to_thread(self.store.remove, name)
        self._cache.pop(name, None)
        self._keys.pop(name, None)
        self.providers()
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
