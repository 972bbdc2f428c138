"""Ollama's load ``options`` (``num_ctx``, ``num_gpu``, ``num_thread``, ``num_batch``) per request.

What Ollama does: a request whose load options differ from those its model runs with reloads the model with
them, and later requests keep it so. Hearth does the same, over the model's saved settings. The difference:
Ollama waits for the requests using the model to finish before it reloads; Hearth refuses the request with a
sentence while other requests use it (it never stops their answers, and never keeps a client waiting unseen).
A request without load options takes the model as it is loaded, as in Ollama.

With keys set, the model a request reloads or unloads is every client's: load options and a shorter
``keep_alive`` (0 unloads) need the admin key. An inference key may still send the options the model
is loaded with already, and a ``keep_alive`` at least as long as the model has; anything else is a 403
that names the admin key. Without keys every request is the one user's, and Ollama's behaviour stays.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from fastapi import Request

from engine.errors import AdminKeyRequired, InvalidRequest
from engine.load_settings import ModelLoadSettings
from engine.remote.routing import is_local
from engine.server import targets
from engine.server.access import owns_loads

if TYPE_CHECKING:
    from engine.pool import LoadedModel

# Ollama's option -> the load setting it maps onto (llama.cpp takes each when the model loads)
LOAD_OPTIONS = {"num_ctx": "n_ctx", "num_gpu": "n_gpu_layers", "num_thread": "n_threads", "num_batch": "n_batch"}
# Ollama's own defaults for "the runtime decides", which its clients send as they are: layers as many as fit, threads
# as the machine has
_OLLAMA_AUTO = {"num_gpu": -1, "num_thread": 0}


def load_settings(options: dict[str, Any] | None) -> ModelLoadSettings:
    """The load settings Ollama's ``options`` ask for (empty when none).

    Raises:
        InvalidRequest: a value that is not a whole number in range, naming the option.
    """
    if not isinstance(options, dict):
        return ModelLoadSettings()
    given: dict[str, Any] = {}  # whole numbers, for the fields LOAD_OPTIONS names
    for name, field in LOAD_OPTIONS.items():
        value = options.get(name)
        auto = _OLLAMA_AUTO.get(name)
        if value is None or (auto is not None and isinstance(value, int | float) and not isinstance(value, bool) and value == auto):
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidRequest(f"'options.{name}' must be a whole number.", param=f"options.{name}")
        given[field] = value
    try:
        return ModelLoadSettings(**given).validate()
    except InvalidRequest as exc:
        field = exc.param
        name = next((k for k, v in LOAD_OPTIONS.items() if v == field), field)
        raise InvalidRequest(str(exc).replace(f"'{field}'", f"'options.{name}'"), param=f"options.{name}") from None


async def apply_load_options(request: Request, found: targets.Target, options: dict[str, Any] | None) -> None:
    """Load ``found`` with the load options a request asks for, when they differ from those it has (a
    remote model, or a request that asks none, is left as it is).

    Raises:
        InvalidRequest: the options do not fit this machine, or other requests use the model now.
    """
    settings = load_settings(options)
    if settings.is_empty or not is_local(found):
        return
    manager = request.app.state.manager
    wanted = manager.options_with(found.name, settings)
    if not owns_loads(request.scope):  # only what the model has (or, unloaded, loads with) already
        if wanted != manager.options_with(found.name, ModelLoadSettings()):
            asked = ", ".join(n for n in LOAD_OPTIONS if n in (options or {}))
            raise AdminKeyRequired(
                f"Loading model '{found.name}' with other settings ({asked}) changes it for every client, so it "
                "needs the admin key; leave those options out.",
                param="options",
            )
        return
    await asyncio.to_thread(lambda: manager.load(found.name, options=wanted))


def check_keep_alive(request: Request, found: targets.Target, keep: float | None) -> None:
    """Refuse a ``keep_alive`` shorter than the one ``found`` has (0: unload it now) unless the request
    holds the admin key; None (the server's) and longer ones are anyone's to ask.

    Raises:
        AdminKeyRequired: an inference key asks to unload the model, or to keep it loaded for less time.
    """
    if is_local(found):
        check_model_keep_alive(request, found.name, keep)


def check_model_keep_alive(request: Request, name: str, keep: float | None) -> None:
    """:func:`check_keep_alive` for the local model ``name`` (every dialect's ``keep_alive`` passes here).

    Raises:
        AdminKeyRequired: an inference key asks to unload the model, or to keep it loaded for less time.
    """
    if keep is None or keep < 0 or owns_loads(request.scope):
        return
    manager = request.app.state.manager
    loaded = next((lm for lm in manager.loaded() if lm.model.name == name), None)
    current = manager.ttl(loaded) if loaded is not None else manager.idle_ttl
    if current is not None and current >= 0 and keep >= current:
        return
    raise AdminKeyRequired(
        f"A 'keep_alive' of {keep:g} s would unload model '{name}' sooner for every client, so it needs "
        "the admin key; leave it out, or ask for a longer one.",
        param="keep_alive",
    )


def set_keep_alive(request: Request, lm: LoadedModel, keep: float | None) -> None:
    """Keep ``lm`` loaded as a request asked (checked by :func:`check_keep_alive`). A request without
    ``keep_alive`` gives the model back the server's idle TTL, as in Ollama, only with admin rights:
    an inference key's would cut short a longer keep-alive the admin asked for."""
    if keep is None and not owns_loads(request.scope):
        return
    request.app.state.manager.set_keep_alive(lm, keep)


__all__ = ["LOAD_OPTIONS", "apply_load_options", "check_keep_alive", "check_model_keep_alive", "load_settings", "set_keep_alive"]
