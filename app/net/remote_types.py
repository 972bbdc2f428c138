"""The worker's remote providers (``/api/remotes``) and the models they serve, as the worker answers them
(:mod:`engine.server.api_models`)."""

from __future__ import annotations

from engine.server.api_models import ProviderInfo, ProviderList, RemoteModelInfo

__all__ = ["ProviderInfo", "ProviderList", "RemoteModelInfo"]
