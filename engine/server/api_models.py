"""The answers of the ``/api`` routes the desktop app reads: one pydantic model per shape, shared by both ends.

The worker declares them as its routes' ``response_model`` (so ``/openapi.json`` describes them and an answer
that drifts from them fails in the worker, not in the GUI); the app builds its objects with
``Model.model_validate(json)``. One name per fact: the worker's. Importing this module pulls in pydantic
only (no FastAPI, no backend), so the app may import it at startup.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Answer(BaseModel):
    """Frozen: the app passes these around in signals and never edits them."""

    model_config = ConfigDict(frozen=True)


# -- local models: GET /api/models, POST /api/models/{load,unload,import}, DELETE /api/models/NAME ------
class ModelInfo(_Answer):
    """A model the worker can load, and whether it is loaded."""

    name: str
    path: str = ""
    format: str = ""
    source: str = ""
    repo: str | None = None
    variant: str | None = None
    quantization: str | None = None
    size_bytes: int = 0
    architecture: str | None = None
    parameters: int | None = None
    context_length: int | None = None
    has_chat_template: bool = False
    state: str = "not-loaded"  # loaded | loading | not-loaded
    origin: str | None = None  # another app's model, read in place: ollama | lmstudio | jan | gpt4all | hf-cache
    origin_label: str | None = None  # "Ollama", "LM Studio"...
    mmproj: str | None = None
    defaults: dict[str, Any] | None = None  # an Ollama model's parameters and system prompt
    template_source: str | None = None


class ModelList(_Answer):
    models: list[ModelInfo]


class LoadAnswer(_Answer):
    name: str
    state: str
    backend: str
    n_ctx: int
    n_ctx_train: int


class UnloadAnswer(_Answer):
    name: str
    state: str
    unloaded: bool


class DeleteAnswer(_Answer):
    """Another app's model keeps its files: ``files_kept``, its ``origin`` and a ``message`` say so."""

    deleted: str
    files_kept: bool | None = None
    origin: str | None = None
    message: str | None = None


# -- live figures: GET /api/stats, GET /api/worker -----------------------------------------------------
class BackendFigures(_Answer):
    """A loaded model's engine figures; each backend adds its own (blocks, device, plan) as extra fields."""

    model_config = ConfigDict(frozen=True, extra="allow")

    backend: str
    in_use: bool = False
    running: int = 0
    waiting: int = 0
    slots: int = 0
    n_ctx_per_sequence: int | None = None  # None while a backend reports no figures (mid-close)
    requests: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefix_cache_tokens: int = 0
    prefix_cache_hit_rate: float = 0.0


class Residency(_Answer):
    """How long a loaded model has been idle and how long it stays (``keep_alive`` None: until unloaded)."""

    name: str
    backend: str
    in_use: bool
    loaded_at: float
    size_bytes: int
    idle_seconds: float
    keep_alive: float | None = None
    expires_in: float | None = None


class ServerStats(_Answer):
    requests_in_flight: int
    models: dict[str, BackendFigures]  # by model name
    loaded: list[Residency] = []


class WorkerInfo(_Answer):
    pid: int
    version: str
    started_at: float
    log_subscribers: int
    log_dropped: int


# -- this machine: GET /api/hardware, GET /api/fit ---------------------------------------------------
class CpuInfo(_Answer):
    model: str
    arch: str
    cores_physical: int
    cores_logical: int
    features: list[str] = []


class GpuInfo(_Answer):
    """Memory in bytes; ``memory_free`` is None where it cannot be read (Apple)."""

    index: int
    name: str
    vendor: str  # nvidia | apple
    memory_total: int
    memory_free: int | None = None
    compute_capability: str | None = None
    driver: str | None = None
    unified_memory: bool = False


class HardwareInfo(_Answer):
    os: str
    cpu: CpuInfo
    ram_total: int
    ram_available: int
    gpus: list[GpuInfo] = []
    disk_free: int | None = None
    models_dir: str | None = None
    notes: list[str] = []
    has_gpu: bool = False
    apple_silicon: bool = False
    gpu_summary: str = ""


class BackendChoice(_Answer):
    """The backend that runs a model format here, and why."""

    format: str  # gguf | safetensors | mlx
    backend: str
    reason: str


class HardwareReport(_Answer):
    hardware: HardwareInfo
    backends: list[BackendChoice]

    def backend_for(self, fmt: str) -> BackendChoice | None:
        return next((b for b in self.backends if b.format == fmt), None)


class MemoryBytes(_Answer):
    weights_bytes: int
    kv_cache_bytes: int
    buffers_bytes: int  # compute and output buffers
    runtime_bytes: int  # the worker process, the runtime's bookkeeping, CUDA contexts
    total_bytes: int


class DevicePlan(MemoryBytes):
    """What one device ("cpu", "gpu0"...) holds under a plan, against what it may hold."""

    device: str
    name: str
    layers: int
    usable_bytes: int
    fits: bool


class LoadPlan(_Answer):
    backend: str
    n_ctx: int  # per slot
    parallel: int  # slots
    kv_type: str
    flash_attn: bool
    gpu_layers: int
    total_layers: int
    where: str
    fits: bool
    reason: str
    kv_blocks: int | None = None
    model_bytes: int
    memory: MemoryBytes
    devices: list[DevicePlan]


class FitAnswer(_Answer):
    """How a model (local, or a Hub variant) would load here: the loader's plan and where its numbers came from."""

    model: str
    source: str  # local | hub
    variant: str | None = None
    label: str | None = None
    fits: bool
    kv_bytes_per_token: int
    plan: LoadPlan
    budget: dict[str, Any]
    facts: dict[str, Any]


# -- the Hub: GET /api/hub/search, /api/hub/variants, /api/hub/recommended ----------------------------
class HubRepo(_Answer):
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


class HubSearch(_Answer):
    results: list[HubRepo]


class RemoteFileInfo(_Answer):
    path: str
    size: int
    sha256: str | None = None
    blob_id: str | None = None


class HubVariant(_Answer):
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


class VariantRecommendation(_Answer):
    variant: str
    reason: str


class VariantList(_Answer):
    repo: str
    revision: str
    context_length: int
    variants: list[HubVariant]
    recommendation: VariantRecommendation | None = None  # None: nothing fits well
    reason: str = ""

    @property
    def recommended(self) -> str | None:
        return self.recommendation.variant if self.recommendation else None


class RecommendedVariant(_Answer):
    name: str
    quantization: str
    file: str
    size_bytes: int
    fit: str
    label: str
    memory_bytes: int | None = None
    recommended: bool = False


class RecommendedModel(_Answer):
    """One of Hearth's recommended models, labelled by the fit plan for this machine."""

    repo: str
    name: str
    category: str
    description: str = ""
    parameters: int | None = None
    suggested: str | None = None  # None: no variant fits here
    variant: str = ""  # the suggested variant, else the smallest
    size_bytes: int = 0
    fit: str = ""  # gpu | partial | cpu | none
    label: str = ""
    reason: str = ""
    memory_bytes: int | None = None
    context_length: int | None = None
    live: bool = False  # the hub's details below came with it
    downloads: int | None = None
    likes: int | None = None
    updated: str | None = None
    variants: list[RecommendedVariant] = []


class Category(_Answer):
    id: str
    title: str


class RecommendedList(_Answer):
    as_of: str
    live: bool = False
    asked_hub: bool = False
    hub_error: str | None = None  # why the hub's details are missing
    categories: list[Category] = []  # in display order
    models: list[RecommendedModel]


# -- downloads: GET/POST /api/downloads, POST /api/downloads/ID/ACTION ---------------------------------
class Download(_Answer):
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


class DownloadList(_Answer):
    downloads: list[Download]


# -- other apps' models: GET /api/other-apps, POST /api/other-apps/accept ------------------------------
class FoundModel(_Answer):
    """A model another app keeps."""

    origin: str
    origin_label: str
    name: str
    path: str
    format: str
    size_bytes: int = 0
    mmproj: str | None = None


class OtherAppsFound(_Answer):
    """The other apps' models Hearth does not list yet, and the sentence that sums them up."""

    models: list[FoundModel] = []
    total_bytes: int = 0
    summary: str = ""


class SkippedModel(_Answer):
    name: str
    origin: str
    reason: str


class AcceptAnswer(_Answer):
    registered: list[str]
    skipped: list[SkippedModel] = []


# -- remote providers: GET/POST /api/remotes, DELETE /api/remotes/NAME --------------------------------
class RemoteModelInfo(_Answer):
    """A model a remote provider serves; chats name it by ``id`` (``provider/model``)."""

    id: str
    provider: str
    remote_id: str
    context_length: int | None = None


class ProviderInfo(_Answer):
    """A remote provider and what listing its models found."""

    name: str
    url: str
    key: str | None = None  # where its key is: keyring | file | None
    timeout: float
    state: str = "ok"  # ok | refused | unreachable | timeout | error
    message: str | None = None
    models: list[RemoteModelInfo] = []


class ProviderList(_Answer):
    providers: list[ProviderInfo]


class RemovedAnswer(_Answer):
    removed: str


__all__ = [
    "AcceptAnswer", "BackendChoice", "BackendFigures", "Category", "CpuInfo", "DeleteAnswer", "DevicePlan",
    "Download", "DownloadList", "FitAnswer", "FoundModel", "GpuInfo", "HardwareInfo", "HardwareReport", "HubRepo",
    "HubSearch", "HubVariant", "LoadAnswer", "LoadPlan", "MemoryBytes", "ModelInfo", "ModelList", "OtherAppsFound",
    "ProviderInfo", "ProviderList", "RecommendedList", "RecommendedModel", "RecommendedVariant", "RemoteFileInfo",
    "RemoteModelInfo", "RemovedAnswer", "Residency", "ServerStats", "SkippedModel", "UnloadAnswer", "VariantList",
    "VariantRecommendation", "WorkerInfo",
]  # fmt: skip
