"""Answers of the catalog: the Hub, downloads, other apps' models and remote providers."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from engine.server.api_models.base import Answer, NullAsDefaultBody


# -- the Hub: GET /api/hub/search, /api/hub/variants, /api/hub/recommended ----------------------------
class HubRepo(Answer):
    """One search result (sizes need its variants)."""

    repo: str
    downloads: int = 0
    likes: int = 0
    last_modified: str | None = None  # ISO 8601
    updated: str | None = None  # the same date, under the name the app shows
    tags: list[str] = []
    library: str | None = None
    gated: bool = False
    formats: list[str] = []
    variants: list[str] = []
    vision: bool = False  # it has mmproj projector files: its GGUF models see


class HubSearch(Answer):
    results: list[HubRepo]


class RemoteFileInfo(Answer):
    path: str
    size: int
    sha256: str | None = None
    blob_id: str | None = None


class HubVariant(Answer):
    """One downloadable choice of a repo, labelled by how it fits this machine."""

    name: str
    quantization: str | None = None
    format: str = ""
    files: list[RemoteFileInfo] = []
    size_bytes: int = 0
    fit: str = "none"  # gpu | partial | cpu | none
    label: str = ""
    detail: str = ""
    memory_bytes: int | None = None  # what the loader would allocate here (GET /api/fit's plan)
    plan: dict[str, Any] | None = None
    backend: str | None = None
    recommended: bool = False
    speed: str = ""  # "about 38 tok/s" or "slow here: about 1 tok/s" (empty: this machine not measured)
    slow: bool = False  # it would decode under the threshold here, so it is not recommended
    vision: bool = False  # pulled with a projector, it sees
    projector: RemoteFileInfo | None = None  # the projector pulled with it unless another is picked


class ProjectorInfo(RemoteFileInfo):
    label: str  # F16, Q8_0...: what mmproj_variant names


class VariantRecommendation(Answer):
    variant: str
    reason: str


class VariantList(Answer):
    repo: str
    revision: str
    context_length: int
    variants: list[HubVariant]
    recommendation: VariantRecommendation | None = None  # None: nothing fits well
    reason: str = ""
    vision: bool = False
    projectors: list[ProjectorInfo] = []  # the repo's mmproj files, one per precision

    @property
    def recommended(self) -> str | None:
        return self.recommendation.variant if self.recommendation else None


class RecommendedVariant(Answer):
    name: str
    quantization: str
    file: str
    size_bytes: int
    fit: str
    label: str
    memory_bytes: int | None = None
    recommended: bool = False
    speed: str = ""
    slow: bool = False


class RecommendedModel(Answer):
    """One of Hearth's recommended models, labelled by the fit plan for this machine."""

    repo: str
    name: str
    category: str
    description: str = ""
    parameters: int | None = None
    experts: int | None = None  # a mixture of experts' experts per layer (None: a dense model)
    suggested: str | None = None  # None: no variant fits here
    variant: str = ""  # the suggested variant, else the smallest
    size_bytes: int = 0
    fit: str = ""  # gpu | partial | cpu | none
    label: str = ""
    reason: str = ""
    memory_bytes: int | None = None
    speed: str = ""  # the shown variant's: "about 38 tok/s", "slow here: about 1 tok/s"
    speed_detail: str = ""  # with its basis: "about 38 tok/s (reads 0.10 GB a token at 4.1 GB/s measured)"
    slow: bool = False
    context_length: int | None = None
    live: bool = False  # the hub's details below came with it
    downloads: int | None = None
    likes: int | None = None
    updated: str | None = None
    variants: list[RecommendedVariant] = []


class Category(Answer):
    id: str
    title: str


class RecommendedList(Answer):
    as_of: str
    live: bool = False
    asked_hub: bool = False
    hub_error: str | None = None  # why the hub's details are missing
    categories: list[Category] = []  # in display order
    models: list[RecommendedModel]


# -- downloads: GET/POST /api/downloads, POST /api/downloads/ID/ACTION ---------------------------------
class Download(Answer):
    id: str
    repo: str
    variant: str
    name: str  # REPO:VARIANT
    format: str
    state: str  # queued | running | paused | done | failed | cancelled
    bytes_done: int = 0
    bytes_total: int = 0
    speed: float = 0.0  # bytes per second
    eta: float | None = None  # seconds left
    current_file: str | None = None
    files_done: int = 0
    files_total: int = 0
    error: str | None = None  # one sentence, when failed
    model: str | None = None  # the registered name, once done

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running", "paused")

    @property
    def fraction(self) -> float:
        return min(1.0, self.bytes_done / self.bytes_total) if self.bytes_total else 0.0


class DownloadList(Answer):
    downloads: list[Download]


# -- other apps' models: GET /api/other-apps, POST /api/other-apps/accept ------------------------------
class FoundModel(Answer):
    """A model another app keeps."""

    origin: str
    origin_label: str
    name: str
    path: str
    format: str
    size_bytes: int = 0
    mmproj: str | None = None


class OtherAppsFound(Answer):
    """The other apps' models Hearth does not list yet, and the sentence that sums them up."""

    models: list[FoundModel] = []
    total_bytes: int = 0
    summary: str = ""


class SkippedModel(Answer):
    name: str
    origin: str
    reason: str


class AcceptAnswer(Answer):
    registered: list[str]
    skipped: list[SkippedModel] = []


# -- remote providers: GET/POST /api/remotes, DELETE /api/remotes/NAME --------------------------------
class RemoteModelInfo(Answer):
    """A model a remote provider serves; chats name it by ``id`` (``provider/model``)."""

    id: str
    provider: str
    remote_id: str
    context_length: int | None = None


class ProviderInfo(Answer):
    """A remote provider and what listing its models found."""

    name: str
    url: str
    key: str | None = None  # where its key is: keyring | file | None
    timeout: float
    state: str = "ok"  # ok | refused | unreachable | timeout | error
    message: str | None = None
    models: list[RemoteModelInfo] = []


class ProviderList(Answer):
    providers: list[ProviderInfo]


class RemovedAnswer(Answer):
    removed: str


# -- request bodies: POST /api/downloads, /api/other-apps/accept, /api/remotes -------------------------
# ``POST /api/downloads``: a variant of a Hub repo to download.
class DownloadBody(NullAsDefaultBody):
    repo: str = Field(min_length=3)
    variant: str | None = None
    mmproj_variant: str | None = None  # the projector pulled with it (F16, Q8_0, a file name, "none"); F16 unset


# ``POST /api/other-apps/accept``: the apps whose found models are registered.
class AcceptBody(NullAsDefaultBody):
    origins: list[str] | None = Field(default=None, max_length=16)  # None: every app's


# ``POST /api/remotes``: a remote provider to add (its key is kept in the OS keyring, else a 0600 file).
class RemoteBody(NullAsDefaultBody):
    name: str = Field(min_length=1, max_length=40)
    url: str = Field(min_length=1, max_length=2000)
    api_key: str | None = None
    timeout: float | None = None
