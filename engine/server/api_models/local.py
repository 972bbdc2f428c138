"""Answers about local models, their live figures, this machine and how a model fits it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, create_model

from engine.server.api_models.base import Answer, KeepAlive, NullAsDefaultBody
from engine.server.api_models.settings import load_setting_fields


# -- local models: GET /api/models, POST /api/models/{load,unload,import}, DELETE /api/models/NAME ------
class ModelInfo(Answer):
    """A model the worker can load, and whether it is loaded."""

    name: str
    path: str = ""
    format: str = ""
    source: str = ""
    repo: str | None = None
    variant: str | None = None
    quantization: str | None = None
    size_bytes: int = 0
    sha256: str | None = None  # the file's, where Hearth knows it (a download's, checked when it finished)
    architecture: str | None = None
    parameters: int | None = None
    context_length: int | None = None
    has_chat_template: bool = False
    state: str = "not-loaded"  # loaded | loading | not-loaded
    origin: str | None = None  # another app's model, read in place: ollama | lmstudio | jan | gpt4all | hf-cache
    origin_label: str | None = None  # "Ollama", "LM Studio"...
    mmproj: str | None = None
    capabilities: list[str] = []  # "thinking" (its template can think); what it takes in besides text: "vision", "audio"
    defaults: dict[str, Any] | None = None  # an Ollama model's parameters and system prompt
    template_source: str | None = None
    made_from: str | None = None  # the model it was made from (Ollama's create or copy, `hearth create`)
    # whether deleting it deletes its files (Hearth's own, and no other entry uses them); None: a worker that does not say
    deletes_files: bool | None = None


class ModelList(Answer):
    models: list[ModelInfo]


class LoadAnswer(Answer):
    name: str
    state: str
    backend: str
    n_ctx: int
    n_ctx_train: int
    keep_alive: float | None = None  # idle seconds before it unloads; None: it stays until unloaded
    draft_refused: str | None = None  # why the draft model named does not draft for it (it loaded without)


class UnloadAnswer(Answer):
    """``weights_kept_for``: the loaded names that answer from the same weights (a model made from this one with
    its own defaults, or a copy): they stay loaded for them, and their memory is not freed."""

    name: str
    state: str
    unloaded: bool
    weights_kept_for: list[str] = []


class DeleteAnswer(Answer):
    """A model whose files stay (another app's, an import's, or files a model made from it still uses): ``files_kept``
    and a ``message`` say so, with ``origin`` for another app's."""

    deleted: str
    files_kept: bool | None = None
    origin: str | None = None
    message: str | None = None


# -- live figures: GET /api/stats, GET /api/worker -----------------------------------------------------
class BackendFigures(Answer):
    """A loaded model's engine figures; each backend adds its own (blocks, device, plan) as extra fields."""

    model_config = ConfigDict(frozen=True, extra="allow")

    backend: str
    in_use: int = 0  # requests using it now
    running: int = 0
    waiting: int = 0
    slots: int = 0
    n_ctx_per_sequence: int | None = None  # None while a backend reports no figures (mid-close)
    requests: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefix_cache_tokens: int = 0
    prefix_cache_hit_rate: float = 0.0


class Residency(Answer):
    """How long a loaded model has been idle and how long it stays (``keep_alive`` None: until unloaded)."""

    name: str
    backend: str
    in_use: int  # requests using it now
    loaded_at: float
    size_bytes: int
    idle_seconds: float
    keep_alive: float | None = None
    expires_in: float | None = None
    # the other loaded names that answer from the same weights (size_bytes is that one load's, counted once)
    shares_weights_with: list[str] = []


class ServerStats(Answer):
    requests_in_flight: int
    models: dict[str, BackendFigures]  # by model name
    loaded: list[Residency] = []


class WorkerInfo(Answer):
    pid: int
    version: str
    started_at: float
    log_subscribers: int
    log_dropped: int
    loading: bool = False  # the models it was started with are still loading
    load_errors: dict[str, str] = {}  # each of those that failed to load, with the reason


# -- this machine: GET /api/hardware, GET /api/fit ---------------------------------------------------
class CpuInfo(Answer):
    model: str
    arch: str
    cores_physical: int
    cores_logical: int
    features: list[str] = []


class GpuInfo(Answer):
    """Memory in bytes; ``memory_free`` is None where it cannot be read (Apple)."""

    index: int
    name: str
    vendor: str  # nvidia | apple
    memory_total: int
    memory_free: int | None = None
    compute_capability: str | None = None
    driver: str | None = None
    unified_memory: bool = False


class HardwareInfo(Answer):
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


class BackendChoice(Answer):
    """The backend that runs a model format here, and why."""

    format: str  # gguf | safetensors | mlx
    backend: str
    reason: str


class HardwareReport(Answer):
    hardware: HardwareInfo
    backends: list[BackendChoice]

    def backend_for(self, fmt: str) -> BackendChoice | None:
        return next((b for b in self.backends if b.format == fmt), None)


class MemoryBytes(Answer):
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


class LoadPlan(Answer):
    backend: str
    n_ctx: int  # per slot
    parallel: int  # slots
    kv_type: str
    flash_attn: bool
    gpu_layers: int
    total_layers: int
    where: str
    summary: str  # "16 slots of 4,096 tokens, 16-bit KV cache, on CPU"
    fits: bool
    reason: str
    kv_blocks: int | None = None
    model_bytes: int
    projector_bytes: int = 0  # of the memory: the projector that lets the model see and hear
    draft_bytes: int = 0  # of the memory: the draft model for speculative decoding
    memory: MemoryBytes
    devices: list[DevicePlan]


class SlotSpeed(Answer):
    slots: int
    tokens_per_s: float


class SpeedFigures(Answer):
    """The speed model's figures for a load (engine.fit.speed.SpeedEstimate)."""

    decode_tokens_per_s: float
    prompt_tokens_per_s: float
    bytes_per_token: int
    read_rate: float  # bytes/s the token's bytes are read at
    basis: str  # measured | reported by NVML ...
    depth: int  # tokens in the KV cache while decoding
    slots: list[SlotSpeed] = []  # all streams together
    batch_limit: int = 1  # streams past which batching adds less than a tenth
    summary: str = ""


class FitAnswer(Answer):
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
    settings_from: list[str] = []  # the settings a load takes that the plan used, each with where it came from
    speed: SpeedFigures | None = None  # with the plan's whole context in the cache (None: this machine not measured)
    speed_chat: SpeedFigures | None = None  # with a chat's first exchanges in it


# -- request bodies: POST /api/models/{load,unload,import} -------------------------------------------------
# ``POST /api/models/unload``: the model.
class LoadBody(NullAsDefaultBody):
    model: str = Field(min_length=1)


# The body's own narrower types, refused by pydantic before the route checks the ranges (engine.validation's,
# in the sentences the CLI's flags refuse with too).
_NARROWER: dict[str, tuple[Any, dict[str, Any]]] = {
    "kv_type": (Literal["f16", "q8_0", "q4_0", "fp8"] | None, {}),
    "cpu_moe": (int | None, {"ge": -1}),
}


class ModelLoadBody(create_model("ModelLoadBodyFields", __base__=LoadBody, **load_setting_fields(wire=True, narrower=_NARROWER))):
    """``POST /api/models/load``: the model, and settings for this load (left out: the worker's own)."""

    # The settings are ModelLoadSettings's fields under their wire names (ctx, parallel, ...): in Python each has
    # its field's name (body.n_ctx), in JSON (read, and sent by the app) its wire name.
    model_config = ConfigDict(serialize_by_alias=True)

    save: bool = Field(default=False, description="remember these settings for every later load of the model")
    keep_alive: KeepAlive = Field(
        default=None, description="how long it stays loaded when idle: seconds, a duration ('10m') or 'never'"
    )


# ``POST /api/models/import``: a model file on this machine, registered where it is.
class ImportBody(NullAsDefaultBody):
    path: str = Field(min_length=1)
    name: str | None = None
    mmproj: str | None = None  # the projector to pair it with; unset: an mmproj*.gguf beside it, if there is one
