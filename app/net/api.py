"""HearthApi: the worker's endpoints as typed calls (one method per endpoint)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject

from app.net.catalog_types import (
    Download,
    FitFacts,
    HardwareFacts,
    HubRepo,
    OtherAppsFound,
    RecommendedList,
    VariantList,
)
from app.net.chat_stream import ChatStream
from app.net.client import ApiCall, ApiClient
from app.net.engine import EngineController
from app.net.remote_types import ProviderInfo
from app.net.types import Metrics, ModelInfo, StatsSnapshot

LOAD_TIMEOUT_MS = 300_000  # a big model can take minutes to load from a slow disk
HUB_TIMEOUT_MS = 90_000  # the worker asks the hub about each recommended repo, several at a time


class HearthApi(ApiClient):
    """``succeeded`` of each call carries the type named in the method's docstring."""

    def __init__(self, engine: EngineController, parent: QObject | None = None) -> None:
        super().__init__(engine, parent)

    # -- OpenAI-compatible --------------------------------------------------------------------
    def stream_chat(self, body: dict[str, Any]) -> ChatStream:
        """A started :class:`ChatStream` for ``body`` (``stream`` is set for you)."""
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        stream = ChatStream(self.nam, self.request("/v1/chat/completions", streaming=True), body, self)
        stream.start()
        return stream

    # -- local models -------------------------------------------------------------------------
    def models(self) -> ApiCall:
        """list[ModelInfo]"""
        return self.get("/api/models", lambda d: [ModelInfo.from_json(m) for m in d.get("models", [])])

    def load_model(self, name: str) -> ApiCall:
        """dict with n_ctx and backend"""
        return self.post("/api/models/load", {"model": name}, timeout_ms=LOAD_TIMEOUT_MS)

    def unload_model(self, name: str) -> ApiCall:
        return self.post("/api/models/unload", {"model": name})

    def import_model(self, path: str) -> ApiCall:
        """ModelInfo"""
        return self.post("/api/models/import", {"path": path}, ModelInfo.from_json, timeout_ms=LOAD_TIMEOUT_MS)

    def delete_model(self, name: str) -> ApiCall:
        """str (the deleted name)"""
        return self.delete(f"/api/models/{self.quote(name)}", lambda d: str(d.get("deleted", name)))

    def other_apps(self) -> ApiCall:
        """OtherAppsFound (the models other apps keep that Hearth does not list yet)"""
        return self.call("GET", "/api/other-apps", OtherAppsFound.from_json, timeout_ms=LOAD_TIMEOUT_MS)

    def accept_other_apps(self) -> ApiCall:
        """list[str] (the names registered; their files stay in place)"""
        return self.post(
            "/api/other-apps/accept", {}, lambda d: [str(n) for n in d.get("registered", [])], timeout_ms=LOAD_TIMEOUT_MS
        )

    # -- remote providers ---------------------------------------------------------------------
    def remotes(self, *, fresh: bool = False) -> ApiCall:
        """list[ProviderInfo]"""
        return self.get(
            "/api/remotes", lambda d: [ProviderInfo.from_json(p) for p in d.get("providers", [])], fresh="true" if fresh else None
        )

    def add_remote(self, name: str, url: str, api_key: str = "") -> ApiCall:
        """ProviderInfo (added even when it cannot be reached now; its state says so)"""
        return self.post("/api/remotes", {"name": name, "url": url, "api_key": api_key or None}, ProviderInfo.from_json)

    def remove_remote(self, name: str) -> ApiCall:
        """str (the removed name)"""
        return self.delete(f"/api/remotes/{self.quote(name)}", lambda d: str(d.get("removed", name)))

    # -- live numbers -------------------------------------------------------------------------
    def stats(self) -> ApiCall:
        """StatsSnapshot"""
        return self.get("/api/stats", StatsSnapshot.from_json)

    def metrics(self) -> ApiCall:
        """Metrics"""
        return self.get("/metrics", lambda text: Metrics.parse(text if isinstance(text, str) else ""))

    def hardware(self) -> ApiCall:
        """HardwareFacts"""
        return self.get("/api/hardware", HardwareFacts.from_json)

    def fit(self, model: str, *, ctx: int | None = None) -> ApiCall:
        """FitFacts: how ``model`` would load here (context, slots, KV type, memory per device)"""
        return self.get("/api/fit", FitFacts.from_json, model=model, ctx=ctx)

    # -- the Hub and downloads ----------------------------------------------------------------
    def hub_search(self, query: str, *, sort: str = "downloads", fmt: str = "") -> ApiCall:
        """list[HubRepo]"""
        return self.get(
            "/api/hub/search", lambda d: [HubRepo.from_json(r) for r in d.get("results", [])], q=query, sort=sort, format=fmt
        )

    def hub_variants(self, repo: str, *, ctx: int = 4096) -> ApiCall:
        """VariantList"""
        return self.get("/api/hub/variants", VariantList.from_json, repo=repo, ctx=ctx)

    def hub_recommended(self, *, live: bool = False, ctx: int | None = None) -> ApiCall:
        """RecommendedList (with ``live``, the hub's details too, which can take a while)"""
        query = f"live={'true' if live else 'false'}" + (f"&ctx={ctx}" if ctx else "")
        return self.call("GET", f"/api/hub/recommended?{query}", RecommendedList.from_json, timeout_ms=HUB_TIMEOUT_MS)

    def downloads(self) -> ApiCall:
        """list[Download]"""
        return self.get("/api/downloads", lambda d: [Download.from_json(x) for x in d.get("downloads", [])])

    def start_download(self, repo: str, variant: str) -> ApiCall:
        """Download"""
        return self.post("/api/downloads", {"repo": repo, "variant": variant}, Download.from_json)

    def download_action(self, download_id: str, action: str) -> ApiCall:
        """Download (``action``: pause | resume | cancel)"""
        return self.post(f"/api/downloads/{self.quote(download_id)}/{action}", {}, Download.from_json)
