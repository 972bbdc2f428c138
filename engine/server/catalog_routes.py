"""The catalog part of the admin API: hardware, Hub search with advisor labels, downloads,
imports and deletions. The app reaches the catalog only through these endpoints."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from engine.catalog.hub import check_repo_id
from engine.errors import InvalidRequest, ModelLoadError
from engine.paths import user_path
from engine.server.admin_routes import _model_entry
from engine.server.api_models import (
    BackendChoice,
    DeleteAnswer,
    Download,
    DownloadBody,
    DownloadList,
    HardwareInfo,
    HardwareReport,
    HubSearch,
    ImportBody,
    ModelInfo,
    RecommendedList,
    RemoteFileInfo,
    VariantList,
)

router = APIRouter(prefix="/api")

# The API speaks of a finished download as "done".
_STATE = {"completed": "done"}


def _download(status) -> dict:
    d = status.to_dict()
    d["state"] = _STATE.get(d["state"], d["state"])
    return d


def _catalog(request: Request):
    return request.app.state.catalog


@router.get("/hardware", response_model=HardwareReport)
async def hardware(request: Request) -> HardwareReport:
    from engine.backend_choice import choose_backend
    from engine.hardware import detect_hardware

    hw = await asyncio.to_thread(detect_hardware)
    backends = []
    for fmt in ("gguf", "safetensors", "mlx"):
        choice = choose_backend(fmt, hardware=hw)
        backends.append(BackendChoice(format=fmt, backend=choice.backend, reason=choice.reason))
    return HardwareReport(hardware=HardwareInfo.model_validate(hw), backends=backends)


@router.get("/hub/search", response_model=HubSearch)
async def hub_search(
    request: Request, q: str = "", sort: str = "downloads", format: str | None = None, limit: int = 20
) -> dict:
    if sort not in ("downloads", "likes", "recent"):
        raise InvalidRequest("'sort' must be downloads, likes or recent.", param="sort")
    if format not in (None, "", "gguf", "mlx", "safetensors"):
        raise InvalidRequest("'format' must be gguf, mlx or safetensors.", param="format")
    hub = _catalog(request).hub
    results = await asyncio.to_thread(hub.search, q, sort=sort, format=format or None, limit=max(1, min(limit, 100)))
    out = []
    for r in results:
        d = r.to_dict()
        d["updated"] = d.get("last_modified")
        out.append(d)
    return {"results": out}


def _check_min_speed(min_speed: float | None) -> None:
    if min_speed is not None and not min_speed >= 0:
        raise InvalidRequest("'min_speed' must be 0 tokens per second or more.", param="min_speed")


@router.get("/hub/variants", response_model=VariantList)
async def hub_variants(request: Request, repo: str, ctx: int | None = None, min_speed: float | None = None) -> dict:
    from engine.catalog.advisor import advise
    from engine.fit.speed import DEFAULT_MIN_TOKENS_PER_S

    if ctx is not None and ctx < 256:
        raise InvalidRequest("'ctx' must be at least 256 tokens.", param="ctx")
    _check_min_speed(min_speed)
    check_repo_id(repo, param="repo")
    catalog = _catalog(request)
    hub = catalog.hub

    def work():
        listing = hub.repo(repo)
        shape = hub.model_shape(listing)
        hardware = catalog.hardware()
        advice = advise(listing.variants, shape, hardware, context_length=ctx, projector=hub.projector_facts(listing),
                        machine=catalog.speed(hardware, wait=True), min_speed=DEFAULT_MIN_TOKENS_PER_S if min_speed is None else min_speed)  # fmt: skip
        return listing, advice

    listing, advice = await asyncio.to_thread(work)
    variants = []
    for v in listing.variants:
        est = advice.get(v.name)
        variants.append(
            {
                "name": v.name,
                "quantization": v.name,
                "format": v.format,
                "files": [RemoteFileInfo.model_validate(f) for f in v.files],
                "size_bytes": v.size_bytes,
                "fit": est.fit.value if est else "none",
                "label": est.label if est else "",
                "detail": est.reason if est else "",
                # what the loader would allocate here (engine.fit): the same plan `hearth fit` shows
                "memory_bytes": (est.plan.memory.total if est.plan else est.memory.total) if est else None,
                "plan": est.plan.to_dict() if est and est.plan else None,
                "backend": est.backend if est else None,
                "recommended": advice.recommended == v.name,
                "speed": est.speed_label if est else "",
                "slow": est.slow if est else False,
                "vision": v.vision,
                "projector": RemoteFileInfo.model_validate(v.projector) if v.projector else None,
            }
        )
    rec = {"variant": advice.recommended, "reason": advice.reason} if advice.recommended else None
    return {
        "repo": listing.repo,
        "revision": listing.revision,
        "context_length": advice.context_length,
        "variants": variants,
        "recommendation": rec,
        "reason": advice.reason,
        "vision": listing.vision,
        "projectors": listing.to_dict()["projectors"],
    }


@router.get("/hub/recommended", response_model=RecommendedList)
async def hub_recommended(request: Request, live: bool = True, ctx: int | None = None, min_speed: float | None = None) -> dict:
    """Hearth's curated models, each labelled by the fit plan and the speed model for this machine; with ``live``,
    the hub's sizes, downloads, likes and dates too. An unreachable hub leaves the list standing and says why in
    ``hub_error``. The first asking on a machine not measured yet waits for the speed probe (seconds, once)."""
    from engine.catalog.recommended import load_picks, recommend

    if ctx is not None and ctx < 256:
        raise InvalidRequest("'ctx' must be at least 256 tokens.", param="ctx")
    _check_min_speed(min_speed)
    catalog = _catalog(request)

    def work():
        hardware = catalog.hardware()
        return recommend(load_picks(), hardware, hub=catalog.hub if live else None, context_length=ctx,
                         machine=catalog.speed(hardware, wait=True), min_speed=min_speed)  # fmt: skip

    return (await asyncio.to_thread(work)).to_dict()


@router.get("/downloads", response_model=DownloadList)
async def downloads(request: Request) -> dict:
    manager = _catalog(request).downloads
    return {"downloads": [_download(s) for s in manager.status()]}


@router.post("/downloads", response_model=Download)
async def start_download(request: Request, body: DownloadBody) -> dict:
    manager = _catalog(request).downloads
    check_repo_id(body.repo, param="repo")
    job = await asyncio.to_thread(manager.start, body.repo, body.variant, projector=body.mmproj_variant)
    return _download(job.status())


@router.post("/downloads/{job_id}/{action}", response_model=Download)
async def control_download(request: Request, job_id: str, action: str) -> dict:
    manager = _catalog(request).downloads
    if action not in ("pause", "resume", "cancel"):
        raise InvalidRequest("A download can be paused, resumed or cancelled.", param="action")
    job = await asyncio.to_thread(manager.get, job_id)
    await asyncio.to_thread(getattr(manager, action), job_id)
    return _download(job.status())


@router.post("/models/import", response_model=ModelInfo)
async def import_model(request: Request, body: ImportBody) -> dict:
    from engine.catalog.pairing import import_model as register_import

    registry = request.app.state.manager.registry
    mmproj = user_path(body.mmproj, param="mmproj") if body.mmproj else None
    try:
        model = await asyncio.to_thread(register_import, registry, user_path(body.path), name=body.name, mmproj=mmproj)
    except ModelLoadError as exc:  # a path the user gave: their input, not a server fault
        raise InvalidRequest(str(exc), param="path") from exc
    return await asyncio.to_thread(_model_entry, model, "not-loaded")  # reads the file's chat template


# Plain deletions answer {"deleted": NAME} only: the other fields are for another app's model.
@router.delete("/models/{name:path}", response_model=DeleteAnswer, response_model_exclude_none=True)
async def delete_model(request: Request, name: str) -> dict:
    manager = request.app.state.manager
    model = await asyncio.to_thread(manager.registry.resolve, name)
    deletes = model.owns_files and not await asyncio.to_thread(manager.registry.shares_files, model)
    await asyncio.to_thread(manager.unload, model.name)
    await asyncio.to_thread(manager.registry.remove, model.name, delete_files=True)
    if model.origin:  # another app's model: only Hearth's entry goes
        from engine.catalog.other_apps_sync import owner_sentence

        return {"deleted": model.name, "files_kept": True, "origin": model.origin, "message": owner_sentence(model)}
    if not deletes:  # an import's files, or files a model made from it still uses
        return {"deleted": model.name, "files_kept": True, "message": f"Removed {model.name}; its files at {model.path} were left in place."}
    return {"deleted": model.name}
