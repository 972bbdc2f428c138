"""Other apps' models offered to Hearth: ``GET /api/other-apps`` lists those found on this machine that
Hearth does not list yet (the app's first-run question), ``POST /api/other-apps/accept`` registers them in
place and watches their apps from then on. Both read the disk: admin key."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from engine.errors import InvalidRequest
from engine.server.api_models import AcceptAnswer, AcceptBody, OtherAppsFound

router = APIRouter(prefix="/api/other-apps")


def _unregistered(registry):
    from engine.catalog.other_apps import scan_other_apps
    from engine.catalog.other_apps_sync import new_models

    return new_models(registry, scan_other_apps())


@router.get("", response_model=OtherAppsFound)
async def found(request: Request) -> dict:
    """The models other apps keep that Hearth does not list yet, with one sentence that sums them up."""
    from engine.catalog.other_apps import summary

    models = await asyncio.to_thread(_unregistered, request.app.state.manager.registry)
    return {
        "models": [f.to_dict() for f in models],
        "total_bytes": sum(f.size_bytes for f in models),
        "summary": summary(models) if models else "No new models from other apps were found.",
    }


@router.post("/accept", response_model=AcceptAnswer)
async def accept(request: Request, body: AcceptBody) -> dict:
    """Register the found models (of ``origins``, else all) in place; their apps are watched from now on."""
    from engine.catalog.other_apps import ORIGINS
    from engine.catalog.other_apps_sync import accept as accept_found

    unknown = sorted(set(body.origins or ()) - set(ORIGINS))
    if unknown:
        raise InvalidRequest(
            f"Unknown app {unknown[0]!r}; use one of {', '.join(sorted(ORIGINS))}.", param="origins"
        )
    registry = request.app.state.manager.registry

    def work():
        models = [f for f in _unregistered(registry) if body.origins is None or f.origin in body.origins]
        return accept_found(registry, models)

    result = await asyncio.to_thread(work)
    return {
        "registered": [m.name for m in result.registered],
        "skipped": [{"name": f.name, "origin": f.origin, "reason": reason} for f, reason in result.skipped],
    }
