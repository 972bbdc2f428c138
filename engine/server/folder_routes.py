"""The model folders: ``GET``/``POST``/``DELETE /api/folders`` (the app's "Model folders" and `hearth folders`)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from engine.server.api_models import FolderBody
from engine.server.api_models import FolderList as FolderListAnswer

router = APIRouter(prefix="/api")


def _rows(registry) -> dict:
    from engine.catalog.model_folders import folder_rows
    from engine.catalog.other_apps_sync import refresh

    refresh(registry)  # an offline folder's models leave the list, and come back with it
    return {"folders": folder_rows(registry, sync=True)}


@router.get("/folders", response_model=FolderListAnswer)
async def folders(request: Request) -> dict:
    """Every model folder: its path, whether it is there now, where downloads go, and its models."""
    return await asyncio.to_thread(_rows, request.app.state.manager.registry)


@router.post("/folders", response_model=FolderListAnswer)
async def add_folder(request: Request, body: FolderBody) -> dict:
    """Add a folder (last, or first with ``first``: downloads go to it); its models are found at once."""
    from engine.catalog.model_folders import FolderList

    registry = request.app.state.manager.registry
    await asyncio.to_thread(FolderList(registry.home).add, body.path, first=body.first)
    return await asyncio.to_thread(_rows, registry)


@router.delete("/folders", response_model=FolderListAnswer)
async def remove_folder(request: Request, path: str) -> dict:
    """Take the folder ``path`` off the list; its models leave the list, and its files stay."""
    from engine.catalog.model_folders import FolderList

    registry = request.app.state.manager.registry
    await asyncio.to_thread(FolderList(registry.home).remove, path)
    return await asyncio.to_thread(_rows, registry)
