"""The admin API under /api/ used by the desktop app: local models, load state, load/unload, stats, fit."""

from __future__ import annotations

import asyncio
import os
import time

from fastapi import APIRouter, Request

from engine import __version__
from engine.errors import InvalidRequest
from engine.server.api_models import (
    FitAnswer,
    LoadAnswer,
    LoadBody,
    ModelList,
    ModelLoadBody,
    ServerStats,
    UnloadAnswer,
    WorkerInfo,
)

router = APIRouter(prefix="/api")


#: The badge of a model found in one of the user's model folders (``origin`` "folder").
FOLDER_LABEL = "Model folder"


def _origin_entry(m) -> dict:
    """Another app's model: which app, the mmproj beside it, and for Ollama's its defaults and template."""
    from engine.catalog.model_folders import ORIGIN as FOLDER
    from engine.catalog.other_apps import ORIGINS

    info = m.origin_info or {}
    return {
        "origin": m.origin,
        "origin_label": (FOLDER_LABEL if m.origin == FOLDER else ORIGINS.get(m.origin, m.origin)) if m.origin else None,
        "mmproj": info.get("mmproj"),
        "defaults": info.get("defaults"),
        "template_source": info.get("template_source"),
    }


def _model_entry(m, state: str, others: tuple = ()) -> dict:
    """``others``: the paths of the other entries (a model made from it, a variant in its folder, keep its files)."""
    from engine.catalog.registry import overlaps

    return {
        "name": m.name,
        "path": str(m.path),
        "format": m.format,
        "source": m.source,
        "repo": m.repo,
        "variant": m.variant,
        "quantization": m.quantization,
        "size_bytes": m.size_bytes,
        "sha256": m.sha256,
        "architecture": m.architecture,
        "parameters": m.parameters,
        "context_length": m.context_length,
        "has_chat_template": m.has_chat_template,
        "state": state,
        "capabilities": _capabilities(m),
        **_origin_entry(m),
        "made_from": m.derived_from,
        "deletes_files": m.owns_files and not any(overlaps(m.path, p) for p in others),
    }


def _capabilities(m) -> list[str]:
    """``thinking`` where its chat template can think, and what the model takes in besides text (``vision``,
    ``audio``: a projector paired with it)."""
    from engine.server.media import capabilities
    from engine.server.model_template import model_thinks

    thinks = ["thinking"] if model_thinks(m) else []
    try:
        return thinks + capabilities(m.mmproj)
    except (OSError, ValueError):  # a projector that cannot be read is said when the model loads
        return thinks


@router.get("/models", response_model=ModelList)
async def models(request: Request) -> dict:
    from engine.catalog.model_folders import sync_folders
    from engine.catalog.other_apps_sync import refresh
    from engine.server.model_template import model_thinks

    manager = request.app.state.manager
    # models the other apps pulled or deleted since the last listing appear or go (no restart, no watcher)
    await asyncio.to_thread(refresh, manager.registry)
    await asyncio.to_thread(sync_folders, manager.registry)  # and the model folders' (none of an offline one)
    local = await asyncio.to_thread(manager.available)
    # a model's template is read from its file once per version of the file: off the event loop
    await asyncio.to_thread(lambda: [model_thinks(m) for m in local])
    entries = []
    for i, m in enumerate(local):
        others = tuple(o.path for j, o in enumerate(local) if j != i and m.owns_files)  # (only Hearth's own are compared)
        entries.append(_model_entry(m, manager.state(m.name), others))
    return {"models": entries}


def _load_options(manager, body: ModelLoadBody):
    """The model's saved settings with those ``body`` sets, on the manager's options; when it sets none,
    those a load naming none takes, so that a model an Ollama request reloaded with its own ``num_ctx``
    is loaded as saved again (a request's settings never outlive the admin's next load).
    ``body.save`` remembers them for every later load."""
    from engine.server.settings_routes import load_options

    options = load_options(manager, body)
    if options is None:
        options = manager.options_for(manager.resolve(body.model).name)
    return options


@router.post("/models/load", response_model=LoadAnswer)
async def load(request: Request, body: ModelLoadBody) -> dict:
    from engine.validation import keep_alive

    manager = request.app.state.manager
    keep = None
    if body.keep_alive is not None:
        seconds = keep_alive(body.keep_alive, name="keep_alive")
        keep = -1.0 if seconds is None else seconds  # never: the pool's negative keep-alive
    options = await asyncio.to_thread(_load_options, manager, body)
    lm = await asyncio.to_thread(lambda: manager.load(body.model, options=options))
    from engine.server.settings_routes import save_loaded  # --save: only settings that loaded are remembered

    await asyncio.to_thread(save_loaded, manager, body, lm.model.name)
    if keep is not None:
        manager.set_keep_alive(lm, keep)
    info = lm.backend.info
    return {
        "name": lm.model.name,
        "state": "loaded",
        "backend": lm.backend_name,
        "n_ctx": info.n_ctx,
        "n_ctx_train": info.n_ctx_train,
        "keep_alive": manager.ttl(lm),
        "draft_refused": _draft_refused(lm),
    }


def _draft_refused(lm) -> str | None:
    """Why the draft model its load named does not draft for ``lm`` (None: none was refused)."""
    stats = lm.backend.stats()
    return stats.details.get("draft_model_refused") if stats is not None else None


@router.post("/models/unload", response_model=UnloadAnswer)
async def unload(request: Request, body: LoadBody) -> dict:
    manager = request.app.state.manager
    model = await asyncio.to_thread(manager.resolve, body.model)
    kept_for = manager.sharing(model.name)
    unloaded = await asyncio.to_thread(manager.unload, model.name)
    return {"name": model.name, "state": "not-loaded", "unloaded": unloaded, "weights_kept_for": kept_for}


def _residency(manager, lm) -> dict:
    """How long ``lm`` has been idle and how long it stays loaded (None: until unloaded), in seconds."""
    idle = 0.0 if lm.in_use else max(0.0, time.monotonic() - lm.last_used)
    ttl = manager.ttl(lm)
    return {
        "size_bytes": lm.size_estimate,
        "idle_seconds": round(idle, 1),
        "keep_alive": ttl,
        "expires_in": None if ttl is None else round(max(0.0, ttl - idle), 1),
        "shares_weights_with": manager.sharing(lm.model.name),
    }


@router.get("/stats", response_model=ServerStats)
async def stats(request: Request) -> dict:
    manager = request.app.state.manager
    metrics = request.app.state.metrics
    return {
        "requests_in_flight": metrics.in_flight,
        "models": manager.stats(),
        "loaded": [
            {"name": lm.model.name, "backend": lm.backend_name, "in_use": lm.in_use, "loaded_at": lm.loaded_at,
             **_residency(manager, lm)}  # fmt: skip
            for lm in manager.loaded()
        ],
    }


@router.get("/worker", response_model=WorkerInfo)
async def worker(request: Request) -> dict:
    """The worker process: its pid, version and start, and who reads its request log."""
    import psutil

    log = request.app.state.metrics.request_log
    return {
        "pid": os.getpid(),
        "version": __version__,
        "started_at": psutil.Process().create_time(),
        "log_subscribers": log.subscribers,
        "log_dropped": log.dropped,
        "loading": not request.app.state.manager.preloaded.is_set(),
        "load_errors": dict(request.app.state.manager.preload_errors),
    }


@router.get("/fit", response_model=FitAnswer)
async def fit(
    request: Request, model: str, ctx: int | None = None, parallel: int | None = None, kv_type: str | None = None,
    gpu_layers: int | None = None, flash_attn: bool = True, cpu_moe: int | None = None, speculative: str | None = None,
) -> dict:
    """How ``model`` (local, or a Hub ``OWNER/REPO[:VARIANT]``) fits this machine: the memory model's breakdown."""
    from engine.fit.report import fit_model
    from engine.hardware import detect_hardware

    if kv_type not in (None, "", "f16", "q8_0", "q4_0", "fp8"):
        raise InvalidRequest("'kv_type' must be f16, q8_0, q4_0 or fp8.", param="kv_type")
    manager = request.app.state.manager
    catalog = getattr(request.app.state, "catalog", None)
    hub = catalog.hub if catalog is not None else None

    def work():
        hardware = detect_hardware()
        return fit_model(
            model, hardware, registry=manager.registry, hub=hub, n_ctx=ctx, n_seq=parallel,
            kv_type=kv_type or None, backend=manager.backend_override, gpu_layers=gpu_layers, flash_attn=flash_attn,
            cpu_moe=cpu_moe, speculative=speculative or None, machine=catalog.speed(hardware) if catalog else None,
        )

    report = await asyncio.to_thread(work)
    return report.to_dict()
