"""The OpenAI-compatible HTTP server (FastAPI). Pydantic lives here, at the HTTP edge.

``create_app`` is imported on first use, so ``engine.server.api_models`` (the answers the app parses)
imports without FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.settings import ServerSettings

if TYPE_CHECKING:
    from engine.server.app import create_app

__all__ = ["create_app", "ServerSettings"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from engine.server.app import create_app

        return create_app
    raise AttributeError(f"module 'engine.server' has no attribute {name!r}")
