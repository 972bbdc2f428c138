"""Which model answers a request, and how: the one place a remote provider's model is told apart from a
local one.

A name resolves to a :data:`Target`: a registered local model first (so a provider can never take a local
model's requests, and its prompts), else a provider's ``provider/model``. A request for a provider's model
is served one of two ways, decided once by :func:`pass_through`:

- passed through: the client's own OpenAI body sent to the provider as it is, and its answer relayed back
  (engine.remote.relay). Only for a request already in the provider's own shape that asks for nothing
  Hearth adds.
- translated: run below the dialects as a :class:`GenerationRequest`, which
  :class:`engine.remote.chat.RemoteChat` sends to the provider; its chunks come back as a local model's do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from engine.catalog.registry import LocalModel
from engine.errors import ModelNotFound
from engine.remote.providers import LOCAL_MODEL_HOSTS, ProviderAccess

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from engine.pool import ModelManager
    from engine.remote.registry import RemoteRegistry


@dataclass(frozen=True, slots=True)
class RemoteTarget:
    """A provider's model: ``name`` is its public ``provider/model`` id, ``remote_id`` the provider's own."""

    access: ProviderAccess
    remote_id: str
    name: str


Target = LocalModel | RemoteTarget


def is_local(target: Target) -> TypeIs[LocalModel]:
    """Whether ``target`` is a model of the local pool (else a provider's)."""
    return not isinstance(target, RemoteTarget)


def pass_through(target: Target, *, own_shape: bool) -> RemoteTarget | None:
    """The provider's model to pass a request for ``target`` through to as it is, or None: the request
    is served below the dialects (by a local model, or translated for the provider).

    Args:
        target: The model the request names, resolved.
        own_shape: The request is in the provider's own shape (an OpenAI body for an endpoint every
            provider serves) and asks for nothing Hearth adds (no ``hearth`` extension).
    """
    return target if own_shape and not is_local(target) else None


async def resolve(
    manager: ModelManager,
    remotes: RemoteRegistry | None,
    name: str,
    *,
    aliases: Sequence[str] = (),
) -> Target:
    """The model ``name`` means: a registered local model (``name``, else one of ``aliases``, else ``name`` as
    Ollama spells a local model, :func:`local_spelling`), else a provider's ``provider/model`` of ``remotes``
    (None: local models only, as for a request another Hearth forwarded here).

    Raises:
        ModelNotFound: neither; a path is refused as any unknown name is (with the same message).
    """
    spelled = local_spelling(name)
    names = [name, *aliases, *([spelled] if spelled != name and spelled not in aliases else [])]
    local_error: ModelNotFound | None = None
    for each in names:  # as spelled, before any provider
        try:
            return await asyncio.to_thread(partial(manager.resolve, each, fold_case=False))
        except ModelNotFound as exc:
            local_error = local_error or exc
    routed = await remotes.route(name) if remotes is not None else None
    if routed is not None:
        return RemoteTarget(routed[0], routed[1], name)
    for each in names:  # in another case: the one local model that matches so
        try:
            return await asyncio.to_thread(manager.resolve, each)
        except ModelNotFound:
            continue
    assert local_error is not None
    raise local_error


def local_spelling(name: str) -> str:
    """Hearth's name for a local model as Ollama's clients write it (``/api/tags`` lists it so): without a
    ``:latest`` tag and without an ``hf.co/`` host, which no provider may be named."""
    short = name
    for host in LOCAL_MODEL_HOSTS:
        if short[: len(host) + 1].lower() == f"{host}/":
            short = short[len(host) + 1 :]
    return short[:-7] if short[-7:].lower() == ":latest" else short


__all__ = ["RemoteTarget", "Target", "is_local", "local_spelling", "pass_through", "resolve"]
