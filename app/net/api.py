"""HearthApi: the worker's endpoints as typed calls (one method per endpoint).

Bodies are the worker's own request models (:mod:`engine.server.api_models`), sent as the fields the caller
gave (``exclude_unset``): the JSON is what the worker's route declares, and a field the route does not have is
a mistake the type checker sees here rather than one the worker ignores."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from pydantic import BaseModel
from PySide6.QtCore import QObject

from app.net.catalog_types import FitFacts
from app.net.chat_stream import ChatStream
from app.net.client import ApiCall, ApiClient
from app.net.engine import EngineController
from app.net.types import Metrics, StatsSnapshot
from engine.server.api_models import (
    AcceptAnswer,
    AcceptBody,
    AddBody,
    CollectionList,
    DeleteAnswer,
    DocCollection,
    Download,
    DownloadBody,
    DownloadList,
    FolderBody,
    FolderList,
    HardwareReport,
    HubSearch,
    ImportBody,
    LoadAnswer,
    LoadBody,
    LoadSettings,
    ModelInfo,
    ModelList,
    ModelLoadBody,
    ModelSettingsAnswer,
    OtherAppsFound,
    ProgressAnswer,
    ProviderInfo,
    ProviderList,
    RecommendedList,
    RemoteBody,
    RemovedAnswer,
    UnloadAnswer,
    VariantList,
)

LOAD_TIMEOUT_MS = 300_000  # a big model can take minutes to load from a slow disk
HUB_TIMEOUT_MS = 90_000  # the worker asks the hub about each recommended repo, several at a time


def sent(body: BaseModel) -> dict[str, Any]:
    """``body`` as JSON, with the fields it was given (the rest are the worker's defaults)."""
    return body.model_dump(mode="json", exclude_unset=True)


class HearthApi(ApiClient):
    """``succeeded`` of each call carries the type named in the method's docstring, parsed by the worker's
    own response model (an answer of another shape fails the call: the engine and the app are one version)."""

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
        return self.get("/api/models", lambda d: ModelList.model_validate(d).models)

    def load_model(self, name: str) -> ApiCall:
        """LoadAnswer (the backend and the context it loaded with)"""
        body = sent(ModelLoadBody(model=name))
        return self.post("/api/models/load", body, LoadAnswer.model_validate, timeout_ms=LOAD_TIMEOUT_MS)

    def unload_model(self, name: str) -> ApiCall:
        """UnloadAnswer"""
        return self.post("/api/models/unload", sent(LoadBody(model=name)), UnloadAnswer.model_validate)

    def import_model(self, path: str) -> ApiCall:
        """ModelInfo"""
        body = sent(ImportBody(path=path))
        return self.post("/api/models/import", body, ModelInfo.model_validate, timeout_ms=LOAD_TIMEOUT_MS)

    def delete_model(self, name: str) -> ApiCall:
        """DeleteAnswer (the deleted name, and whether its files were kept, with the worker's sentence)"""
        return self.delete(f"/api/models/{self.quote(name)}", DeleteAnswer.model_validate)

    def other_apps(self) -> ApiCall:
        """OtherAppsFound (the models other apps keep that Hearth does not list yet)"""
        return self.call("GET", "/api/other-apps", OtherAppsFound.model_validate, timeout_ms=LOAD_TIMEOUT_MS)

    def accept_other_apps(self) -> ApiCall:
        """list[str] (the names registered; their files stay in place)"""
        return self.post(
            "/api/other-apps/accept", sent(AcceptBody()), lambda d: AcceptAnswer.model_validate(d).registered,
            timeout_ms=LOAD_TIMEOUT_MS,
        )

    def model_settings(self, name: str) -> ApiCall:
        """ModelSettingsAnswer (the settings every load of ``name`` takes)"""
        return self.get(f"/api/models/{self.quote(name)}/settings", ModelSettingsAnswer.model_validate)

    def save_model_settings(self, name: str, settings: LoadSettings) -> ApiCall:
        """ModelSettingsAnswer (None values: Hearth chooses). A PUT: every setting is sent, null ones too."""
        path = f"/api/models/{self.quote(name)}/settings"
        return self.call("PUT", path, ModelSettingsAnswer.model_validate, settings.model_dump(mode="json"))

    def folders(self) -> ApiCall:
        """list[ModelFolder]"""
        return self.get("/api/folders", lambda d: FolderList.model_validate(d).folders)

    def add_folder(self, path: str, *, first: bool = False) -> ApiCall:
        """list[ModelFolder] (the folders after adding it)"""
        return self.post("/api/folders", sent(FolderBody(path=path, first=first)),
                         lambda d: FolderList.model_validate(d).folders, timeout_ms=LOAD_TIMEOUT_MS)  # fmt: skip

    def remove_folder(self, path: str) -> ApiCall:
        """list[ModelFolder] (the folders left)"""
        return self.delete(f"/api/folders?{urlencode({'path': path})}", lambda d: FolderList.model_validate(d).folders)

    # -- remote providers ---------------------------------------------------------------------
    def remotes(self, *, fresh: bool = False) -> ApiCall:
        """list[ProviderInfo]"""
        return self.get(
            "/api/remotes", lambda d: ProviderList.model_validate(d).providers, fresh="true" if fresh else None
        )

    def add_remote(self, name: str, url: str, api_key: str = "") -> ApiCall:
        """ProviderInfo (added even when it cannot be reached now; its state says so)"""
        body = sent(RemoteBody(name=name, url=url, api_key=api_key or None))
        return self.post("/api/remotes", body, ProviderInfo.model_validate)

    def remove_remote(self, name: str) -> ApiCall:
        """str (the removed name)"""
        return self.delete(f"/api/remotes/{self.quote(name)}", lambda d: RemovedAnswer.model_validate(d).removed)

    # -- live numbers -------------------------------------------------------------------------
    def stats(self) -> ApiCall:
        """StatsSnapshot"""
        return self.get("/api/stats", StatsSnapshot.from_json)

    def metrics(self) -> ApiCall:
        """Metrics"""
        return self.get("/metrics", lambda text: Metrics.parse(text if isinstance(text, str) else ""))

    def hardware(self) -> ApiCall:
        """HardwareReport"""
        return self.get("/api/hardware", HardwareReport.model_validate)

    def fit(
        self, model: str, *, ctx: int | None = None, kv_type: str | None = None, gpu_layers: int | None = None,
        flash_attn: bool | None = None, cpu_moe: int | None = None,
    ) -> ApiCall:
        """FitFacts: how ``model`` would load here (context, slots, KV type, memory per device)"""
        flash = None if flash_attn is None else ("true" if flash_attn else "false")
        return self.get("/api/fit", FitFacts.from_json, model=model, ctx=ctx, kv_type=kv_type, gpu_layers=gpu_layers,
                        flash_attn=flash, cpu_moe=cpu_moe)  # fmt: skip

    # -- the Hub and downloads ----------------------------------------------------------------
    def hub_search(self, query: str, *, sort: str = "downloads", fmt: str = "") -> ApiCall:
        """list[HubRepo]"""
        return self.get(
            "/api/hub/search", lambda d: HubSearch.model_validate(d).results, q=query, sort=sort, format=fmt
        )

    def hub_variants(self, repo: str, *, ctx: int = 4096, min_speed: float | None = None) -> ApiCall:
        """VariantList"""
        return self.get("/api/hub/variants", VariantList.model_validate, repo=repo, ctx=ctx, min_speed=min_speed)

    def hub_recommended(self, *, live: bool = False, ctx: int | None = None, min_speed: float | None = None) -> ApiCall:
        """RecommendedList (with ``live``, the hub's details too, which can take a while)"""
        query = f"live={'true' if live else 'false'}" + (f"&ctx={ctx}" if ctx else "")
        query += f"&min_speed={min_speed:g}" if min_speed is not None else ""
        return self.call("GET", f"/api/hub/recommended?{query}", RecommendedList.model_validate, timeout_ms=HUB_TIMEOUT_MS)

    def downloads(self) -> ApiCall:
        """list[Download]"""
        return self.get("/api/downloads", lambda d: DownloadList.model_validate(d).downloads)

    def start_download(self, repo: str, variant: str) -> ApiCall:
        """Download"""
        return self.post("/api/downloads", sent(DownloadBody(repo=repo, variant=variant)), Download.model_validate)

    def download_action(self, download_id: str, action: str) -> ApiCall:
        """Download (``action``: pause | resume | cancel)"""
        return self.post(f"/api/downloads/{self.quote(download_id)}/{action}", {}, Download.model_validate)

    # -- document collections -----------------------------------------------------------------
    def collections(self) -> ApiCall:
        """list[DocCollection]"""
        return self.get("/api/docs/collections", lambda d: CollectionList.model_validate(d).collections)

    def add_collection(self, name: str, paths: list[str]) -> ApiCall:
        """DocCollection (indexing starts; its progress says how far it got)"""
        return self.post("/api/docs/collections", sent(AddBody(name=name, paths=paths)), DocCollection.model_validate,
                         timeout_ms=LOAD_TIMEOUT_MS)  # (on a busy machine its answer can come after 30 s)

    def collection_action(self, name: str, action: str) -> ApiCall:
        """ProgressAnswer (``action``: pause | resume | cancel the collection's indexing)"""
        return self.post(f"/api/docs/collections/{self.quote(name)}/{action}", {}, ProgressAnswer.model_validate)
