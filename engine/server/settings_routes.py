"""A model's saved load settings: ``GET``/``PUT /api/models/NAME/settings``, and the options a load takes.

Every load reads them (`hearth load`, the app, and a load a request triggers through any dialect), so a
model set to 16k of context gets 16k however it is first used.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from engine.backends.options import LoadOptions
from engine.backends.speculative import DRAFT
from engine.errors import InvalidRequest, ModelNotFound
from engine.load_settings import ModelLoadSettings
from engine.server.api_models import LoadSettings, ModelLoadBody, ModelSettingsAnswer, ModelSettingsBody

router = APIRouter(prefix="/api")


def body_settings(body: ModelLoadBody) -> ModelLoadSettings:
    """The load settings a ``POST /api/models/load`` body gives (the rest None).

    Raises:
        InvalidRequest: a value out of range (in the words the CLI's flags use too).
    """
    return ModelLoadSettings.read(body).validate(wire=True)


def load_options(manager, body: ModelLoadBody) -> LoadOptions | None:
    """The options ``body`` asks one load for: the model's saved settings with the body's over them, on the
    manager's options. None when it asks for nothing (the load takes the saved settings).

    Raises:
        InvalidRequest: a value out of range.
        ModelNotFound: no such model.
    """
    given = check_draft(manager, body_settings(body))
    if given.is_empty:
        return None
    model = manager.resolve(body.model)
    return manager.load_settings.get(model.name).overridden_by(given).apply(manager.options)


def check_draft(manager, settings: ModelLoadSettings) -> ModelLoadSettings:
    """``settings``, when the draft model a ``draft:MODEL`` mode names is one the worker has: over HTTP a draft
    is named as any model is, by its registered name, never by a path on this machine's disk.

    Raises:
        InvalidRequest: no registered model has that name.
    """
    speculative = settings.speculative_options()
    if speculative is not None and speculative.mode == DRAFT and speculative.draft_model:
        try:
            manager.resolve(speculative.draft_model)
        except ModelNotFound:
            raise InvalidRequest(
                f"The draft model '{speculative.draft_model}' is not one of this worker's models; "
                "name one that GET /v1/models lists.", param="speculative",
            ) from None  # fmt: skip
    return settings


def save_loaded(manager, body: ModelLoadBody, name: str) -> None:
    """After a load that succeeded with ``body.save``: remember its settings (over the saved ones) for every
    later load of ``name``. A load that failed saves nothing."""
    if body.save:
        manager.load_settings.put(name, manager.load_settings.get(name).overridden_by(body_settings(body)))


def _answer(manager, name: str, settings: ModelLoadSettings) -> ModelSettingsAnswer:
    loaded = manager.state(name) == "loaded"
    return ModelSettingsAnswer(name=name, settings=LoadSettings.model_validate(settings), loaded=loaded)


@router.get("/models/{name:path}/settings", response_model=ModelSettingsAnswer)
async def get_settings(request: Request, name: str) -> ModelSettingsAnswer:
    """The settings every load of ``name`` takes (nulls: Hearth chooses)."""
    manager = request.app.state.manager
    model = await asyncio.to_thread(manager.resolve, name)
    return _answer(manager, model.name, manager.load_settings.get(model.name))


@router.put("/models/{name:path}/settings", response_model=ModelSettingsAnswer)
async def put_settings(request: Request, name: str, body: ModelSettingsBody) -> ModelSettingsAnswer:
    """Save the settings every later load of ``name`` takes; all nulls forget them. A loaded model keeps
    its settings until it is loaded again (`hearth load`, or after it is unloaded)."""
    manager = request.app.state.manager
    if body.model_extra:
        unknown = sorted(body.model_extra)[0]
        raise InvalidRequest(f"Unknown load setting '{unknown}'; see GET /api/models/NAME/settings for the names.", param=unknown)
    model = await asyncio.to_thread(manager.resolve, name)
    settings = await asyncio.to_thread(check_draft, manager, ModelLoadSettings.read(body).validate())
    await asyncio.to_thread(manager.load_settings.put, model.name, settings)
    return _answer(manager, model.name, settings)
