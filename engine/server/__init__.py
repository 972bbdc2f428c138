"""The OpenAI-compatible HTTP server (FastAPI). Pydantic lives here, at the HTTP edge."""

from engine.server.app import create_app
from engine.settings import ServerSettings

__all__ = ["create_app", "ServerSettings"]
