"""The answers of the ``/api`` routes the desktop app reads: one pydantic model per shape, shared by both ends.

The worker declares them as its routes' ``response_model`` (so ``/openapi.json`` describes them, and an answer
that drifts from them fails in the worker rather than in the GUI); the app builds its objects with
``Model.model_validate(json)``. One name per fact: the worker's. Importing this package pulls in pydantic
only (no FastAPI, no backend), so the app imports it at startup; the app imports this package, not its modules.
"""

from engine.server.api_models.catalog import (
    AcceptAnswer,
    Category,
    Download,
    DownloadList,
    FoundModel,
    HubRepo,
    HubSearch,
    HubVariant,
    OtherAppsFound,
    ProviderInfo,
    ProviderList,
    RecommendedList,
    RecommendedModel,
    RecommendedVariant,
    RemoteFileInfo,
    RemoteModelInfo,
    RemovedAnswer,
    SkippedModel,
    VariantList,
    VariantRecommendation,
)
from engine.server.api_models.documents import (
    ChatDocuments,
    CollectionDeleted,
    CollectionList,
    DocCollection,
    DocsContext,
    DocSource,
    FileFailure,
    IndexProgress,
    ProgressAnswer,
    SearchAnswer,
    SearchHit,
)
from engine.server.api_models.local import (
    BackendChoice,
    BackendFigures,
    CpuInfo,
    DeleteAnswer,
    DevicePlan,
    FitAnswer,
    GpuInfo,
    HardwareInfo,
    HardwareReport,
    LoadAnswer,
    LoadPlan,
    MemoryBytes,
    ModelInfo,
    ModelList,
    Residency,
    ServerStats,
    UnloadAnswer,
    WorkerInfo,
)
from engine.server.api_models.settings import FolderList, LoadSettings, ModelFolder, ModelSettingsAnswer

__all__ = [
    "FolderList", "LoadSettings", "ModelFolder", "ModelSettingsAnswer",
    "AcceptAnswer", "BackendChoice", "BackendFigures", "Category", "ChatDocuments", "CollectionDeleted", "CollectionList", "CpuInfo",
    "DeleteAnswer", "DevicePlan", "DocCollection", "DocSource", "DocsContext", "Download", "DownloadList",
    "FileFailure", "FitAnswer", "FoundModel", "GpuInfo", "HardwareInfo", "HardwareReport", "HubRepo", "HubSearch",
    "HubVariant", "IndexProgress", "LoadAnswer", "LoadPlan", "MemoryBytes", "ModelInfo", "ModelList",
    "OtherAppsFound", "ProgressAnswer", "ProviderInfo", "ProviderList", "RecommendedList", "RecommendedModel",
    "RecommendedVariant", "RemoteFileInfo", "RemoteModelInfo", "RemovedAnswer", "Residency", "SearchAnswer",
    "SearchHit", "ServerStats", "SkippedModel", "UnloadAnswer", "VariantList", "VariantRecommendation", "WorkerInfo",
]  # fmt: skip
