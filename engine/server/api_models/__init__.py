"""The request bodies and answers of the ``/api`` routes: one pydantic model per shape, shared by both ends.

The worker declares the answers as its routes' ``response_model`` and takes the bodies as its routes'
parameters (so ``/openapi.json`` describes both, and an answer that drifts from them fails in the worker rather
than in the GUI); the app builds its requests from the bodies and its objects with ``Model.model_validate(json)``.
One name per fact: the worker's. The bases (:class:`Body`, :class:`NullAsDefaultBody`) serve every dialect's bodies. Importing this package pulls in pydantic
only (no FastAPI, no backend), so the app imports it at startup; the app imports this package, not its modules.
"""

from engine.server.api_models.base import (
    KEEP_ALIVE_PATTERN,
    Answer,
    Body,
    KeepAlive,
    NullAsDefaultBody,
    NullLeftOutBody,
)
from engine.server.api_models.catalog import (
    AcceptAnswer,
    AcceptBody,
    Category,
    Download,
    DownloadBody,
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
    RemoteBody,
    RemoteFileInfo,
    RemoteModelInfo,
    RemovedAnswer,
    SkippedModel,
    VariantList,
    VariantRecommendation,
)
from engine.server.api_models.documents import (
    AddBody,
    ChatDocuments,
    CollectionDeleted,
    CollectionList,
    ContextBody,
    DocCollection,
    DocsContext,
    DocSource,
    FileFailure,
    HearthRequest,
    IndexProgress,
    ModelBody,
    ProgressAnswer,
    SearchAnswer,
    SearchBody,
    SearchHit,
    SharedBody,
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
    ImportBody,
    LoadAnswer,
    LoadBody,
    LoadPlan,
    MemoryBytes,
    ModelInfo,
    ModelList,
    ModelLoadBody,
    Residency,
    ServerStats,
    UnloadAnswer,
    WorkerInfo,
)
from engine.server.api_models.settings import (
    FolderBody,
    FolderList,
    LoadSettings,
    ModelFolder,
    ModelSettingsAnswer,
    ModelSettingsBody,
)

__all__ = [
    "Answer", "Body", "NullAsDefaultBody", "NullLeftOutBody", "KEEP_ALIVE_PATTERN", "KeepAlive",
    "AcceptBody", "AddBody", "ContextBody", "DownloadBody", "FolderBody", "HearthRequest", "ImportBody", "LoadBody", "ModelBody",
    "ModelLoadBody", "ModelSettingsBody", "RemoteBody", "SearchBody", "SharedBody",
    "FolderList", "LoadSettings", "ModelFolder", "ModelSettingsAnswer",
    "AcceptAnswer", "BackendChoice", "BackendFigures", "Category", "ChatDocuments", "CollectionDeleted", "CollectionList", "CpuInfo",
    "DeleteAnswer", "DevicePlan", "DocCollection", "DocSource", "DocsContext", "Download", "DownloadList",
    "FileFailure", "FitAnswer", "FoundModel", "GpuInfo", "HardwareInfo", "HardwareReport", "HubRepo", "HubSearch",
    "HubVariant", "IndexProgress", "LoadAnswer", "LoadPlan", "MemoryBytes", "ModelInfo", "ModelList",
    "OtherAppsFound", "ProgressAnswer", "ProviderInfo", "ProviderList", "RecommendedList", "RecommendedModel",
    "RecommendedVariant", "RemoteFileInfo", "RemoteModelInfo", "RemovedAnswer", "Residency", "SearchAnswer",
    "SearchHit", "ServerStats", "SkippedModel", "UnloadAnswer", "VariantList", "VariantRecommendation", "WorkerInfo",
]  # fmt: skip
