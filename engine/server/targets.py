"""Which model serves a request, below every dialect: the target a name resolves to (a local model of the
pool, or a remote provider's ``provider/model``, told apart in :mod:`engine.remote.routing`), acquired.

Either kind is served through the same small interface, :class:`Served`: ``stream`` a
:class:`GenerationRequest` into :class:`GenerationChunk` items, ``cancel`` one, ``release`` the model.
Each dialect translates its request and the chunks once, whatever model answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from fastapi import Request

from engine.backends.runtime import prompt_ids
from engine.model_defaults import ModelDefaults
from engine.remote import routing
from engine.remote.chat import RemoteChat
from engine.remote.client import FORWARDED_HEADER
from engine.remote.routing import RemoteTarget, Target
from engine.types import GenerationChunk, GenerationRequest

if TYPE_CHECKING:
    from engine.pool import LoadedModel, ModelManager
    from engine.remote.registry import RemoteRegistry


def remotes_for(request: Request) -> RemoteRegistry | None:
    """The remote providers ``request`` may reach: none for a request another Hearth forwarded here
    (answered with local models only: one hop at most)."""
    if FORWARDED_HEADER.lower() in request.headers:
        return None
    return request.app.state.remotes


async def resolve(request: Request, name: str, *, aliases: Sequence[str] = ()) -> Target:
    """The model ``name`` means (engine.remote.routing.resolve): a local model (``name``, else one of
    ``aliases``, such as Ollama's ``:latest`` spellings), else a remote provider's ``provider/model``.

    Raises:
        ModelNotFound: neither; a path is refused as any unknown name is (with the same message).
    """
    return await routing.resolve(request.app.state.manager, remotes_for(request), name, aliases=aliases)


class Served:
    """A model serving one request, local or remote (see the module's docstring)."""

    name: str  # the model named in answers
    backend_name: str  # llamacpp | paged | mlx | remote
    lm: LoadedModel | None = None  # the pool's entry, for a local model
    defaults: ModelDefaults = ModelDefaults()  # the model's own (an Ollama Modelfile's); a provider applies its own

    def with_defaults(self, request: GenerationRequest) -> GenerationRequest:
        """``request`` with the model's own defaults in what it left unset (engine.model_defaults)."""
        return self.defaults.apply(request)

    def stream(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        raise NotImplementedError

    def cancel(self, request_id: str) -> None:
        raise NotImplementedError

    def prompt_tokens(self, request: GenerationRequest) -> list[int]:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError


class LocalServed(Served):
    def __init__(self, manager: ModelManager, lm: LoadedModel) -> None:
        self.manager = manager
        self.lm = lm
        self._local = lm  # the same entry, never None here
        self.name = lm.model.name
        self.backend_name = lm.backend_name
        # the registry's entry as it is now (made again with other defaults while loaded: `create`), but for a file the
        # local user serves by its path, whose name a registered model may have too
        now = manager.registry.get(lm.model.name) if lm.model.source != "path" else None
        self.defaults = ModelDefaults.from_info((now or lm.model).origin_info)

    def stream(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        return self._local.backend.stream(request)

    def cancel(self, request_id: str) -> None:
        self._local.backend.cancel(request_id)

    def prompt_tokens(self, request: GenerationRequest) -> list[int]:
        return prompt_ids(self._local.backend, request)

    def release(self) -> None:
        self.manager.release(self._local)


class RemoteServed(Served):
    def __init__(self, target: RemoteTarget) -> None:
        self.chat = RemoteChat(target.access, target.remote_id, name=target.name)
        self.name = target.name
        self.backend_name = "remote"

    def stream(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        return self.chat.open(request)  # the provider's refusal raises here, before any byte is sent

    def cancel(self, request_id: str) -> None:
        self.chat.cancel(request_id)

    def prompt_tokens(self, request: GenerationRequest) -> list[int]:
        return self.chat.prompt_tokens(request)

    def release(self) -> None:
        self.chat.close()


async def acquire(request: Request, name: str, target: Target | None = None) -> Served:
    """``name``'s model, ready to generate (a local one loaded and kept from eviction until
    :meth:`Served.release`).

    Raises:
        ModelNotFound, BackendUnavailable, ModelLoadError.
    """
    target = target if target is not None else await resolve(request, name)
    if not routing.is_local(target):  # translated below the dialects (engine.remote.chat)
        return RemoteServed(target)
    manager = request.app.state.manager
    lm = await asyncio.to_thread(manager.acquire, target.name)
    try:
        return await asyncio.to_thread(LocalServed, manager, lm)  # (it reads the registry: off the event loop)
    except BaseException:
        manager.release(lm)
        raise


__all__ = ["LocalServed", "RemoteServed", "RemoteTarget", "Served", "Target", "acquire", "remotes_for", "resolve"]
