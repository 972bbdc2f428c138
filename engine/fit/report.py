"""`hearth fit` and `GET /api/fit`: the breakdown for a local model (what the loader would do now)
or a Hub variant (what the advisor says about it on this machine at rest)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from engine.errors import InvalidRequest, ModelLoadError, ModelNotFound
from engine.fit.budget import MemoryBudget
from engine.fit.facts import ModelFacts, facts_from_files, facts_from_shape, with_draft, with_projector
from engine.fit.memory import kv_bytes_per_token
from engine.fit.plan import LoadPlan, plan_load
from engine.fit.projector import projector_from_size
from engine.fit.speed import CHAT_DEPTH, MachineSpeed, SpeedEstimate, estimate_speed
from engine.paths import check_path_text

if TYPE_CHECKING:
    from engine.catalog.registry import LocalModel, ModelRegistry
    from engine.hardware import HardwareInfo
    from engine.load_settings import ModelLoadSettings


@dataclass(frozen=True, slots=True)
class FitReport:
    """One model's memory plan on this machine, with where the numbers came from."""

    model: str
    source: str  # "local" (the loader's plan now) or "hub" (the advisor's, at rest)
    variant: str | None
    facts: ModelFacts
    plan: LoadPlan
    budget: MemoryBudget
    label: str | None = None
    settings_from: tuple[str, ...] = ()  # settings a load takes, not asked for here, with where each came from
    speed: SpeedEstimate | None = None  # decoding with the plan's whole context in the cache
    speed_chat: SpeedEstimate | None = None  # ... with a chat's first exchanges in it (CHAT_DEPTH tokens)

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.facts, self.plan.kv_type)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "source": self.source,
            "variant": self.variant,
            "label": self.label,
            "fits": self.plan.fits,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "plan": self.plan.to_dict(),
            "budget": self.budget.to_dict(),
            "facts": self.facts.to_dict(),
            "settings_from": list(self.settings_from),
            "speed": self.speed.to_dict() if self.speed is not None else None,
            "speed_chat": self.speed_chat.to_dict() if self.speed_chat is not None else None,
        }

    def with_speed(self, machine: MachineSpeed | None) -> FitReport:
        """This report with the speed model's figures on ``machine`` (unchanged when None)."""
        if machine is None or not self.plan.fits and self.plan.memory.total <= 0:
            return self
        label = self.variant if self.source == "hub" else None
        full = estimate_speed(self.facts, machine, plan=self.plan, label=label)
        chat = estimate_speed(self.facts, machine, plan=self.plan, label=label, depth=min(CHAT_DEPTH, self.plan.n_ctx))
        return replace(self, speed=full, speed_chat=chat)


def facts_for_local(model: LocalModel) -> ModelFacts:
    """The memory facts of a model on disk: its GGUF tensors, or a folder's config.json and file sizes.

    Raises:
        ModelLoadError: the files cannot be read.
    """
    try:
        facts = facts_from_files(model.path, format=model.format, size_bytes=model.size_bytes)
    except ValueError as exc:
        raise ModelLoadError(str(model.path), f"{exc}.") from exc
    if model.format != "gguf":
        return facts
    try:  # the projector paired with it loads beside it
        return with_projector(facts, model.mmproj)
    except ValueError as exc:
        raise ModelLoadError(str(model.mmproj), f"{exc}.") from exc


def draft_facts(facts: ModelFacts, draft: str, registry: ModelRegistry | None, *, target: LocalModel) -> ModelFacts:
    """``facts`` (those of ``target``) with the draft model ``draft`` (a registered name or a .gguf path, as
    ``--speculative draft:MODEL`` names it) loaded beside the model.

    Raises:
        ModelNotFound: no such model. InvalidRequest: it is not a GGUF file, or its vocabulary is not the model's
        (the backend would load the model without it). ModelLoadError: its header cannot be read.
    """
    from engine.catalog.registry import resolve_model
    from engine.fit.draft import draft_vocabulary_mismatch

    model = resolve_model(draft, registry)
    if model.format != "gguf":
        raise InvalidRequest(f"The draft model '{draft}' is not a GGUF file; name a smaller GGUF of the same vocabulary.",
                             param="speculative")  # fmt: skip
    try:
        why = draft_vocabulary_mismatch(target.path, model.path)
        if why is not None:
            raise InvalidRequest(
                f"Draft model '{model.name}' cannot draft for '{target.name}' because their vocabularies differ ({why}); "
                "pick a draft model of the same family, or use --speculative auto.", param="speculative",
            )  # fmt: skip
        return with_draft(facts, model.path)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(str(model.path), f"{exc}.") from exc


def _plan(facts: ModelFacts, budget: MemoryBudget, backend: str, **kw: Any) -> LoadPlan:
    try:
        return plan_load(facts, budget, backend=backend, **kw)
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="kv_type") from exc


def fit_local(
    model: LocalModel,
    hardware: HardwareInfo,
    *,
    n_ctx: int | None = None,
    n_seq: int | None = None,
    kv_type: str | None = None,
    backend: str | None = None,
    gpu_layers: int | None = None,
    flash_attn: bool = True,
    cpu_moe: int | None = None,
    draft: str | None = None,
    registry: ModelRegistry | None = None,
) -> FitReport:
    """The plan the loader would make for ``model`` now (available RAM, free GPU memory), on ``backend``
    (None: the one Hearth picks for its format here), with ``gpu_layers`` and ``flash_attn`` as a load asks, and
    the draft model ``draft`` beside it (the llama.cpp backend's ``--speculative draft:MODEL``)."""
    from engine.backend_choice import choose_backend

    choice = choose_backend(model.format, override=backend, hardware=hardware)
    facts = facts_for_local(model)
    if draft:
        if choice.backend != "llamacpp":
            raise InvalidRequest(f"Only the llama.cpp backend runs a draft model, and {model.name} loads on {choice.backend}; "
                                 "use --speculative ngram there.", param="speculative")  # fmt: skip
        facts = draft_facts(facts, draft, registry, target=model)
    budget = MemoryBudget.from_hardware(hardware, live=True, gpu_offload=choice.gpu_offload)
    kw: dict[str, Any] = {"cpu_moe": cpu_moe} if choice.backend == "llamacpp" else {}
    plan = _plan(facts, budget, choice.backend, n_ctx=n_ctx, n_seq=n_seq, kv_type=kv_type, gpu_layers=gpu_layers,
                 flash_attn=flash_attn, **kw)  # fmt: skip
    return FitReport(model=model.name, source="local", variant=model.variant or model.quantization, facts=facts,
                     plan=plan, budget=budget)  # fmt: skip


def fit_hub(
    hub: Any,
    spec: str,
    hardware: HardwareInfo,
    *,
    n_ctx: int | None = None,
    n_seq: int | None = None,
    kv_type: str | None = None,
) -> FitReport:
    """The advisor's plan for ``OWNER/REPO[:VARIANT]`` (the recommended variant when none is named).

    Raises:
        InvalidRequest: no such variant. HubError: the Hub could not answer.
    """
    from engine.catalog.advisor import advise

    repo, _, name = spec.partition(":")
    listing = hub.repo(repo)
    shape = hub.model_shape(listing)
    projector = hub.projector_facts(listing)
    advice = advise(
        listing.variants, shape, hardware, context_length=n_ctx, kv_type=kv_type, parallel=n_seq, projector=projector
    )
    variant = listing.variant(name) if name else listing.variant(advice.recommended) if advice.recommended else None
    if variant is None:
        variant = min(listing.variants, key=lambda v: v.size_bytes) if listing.variants else None
    if variant is None:
        raise InvalidRequest(f"{repo} has no model files Hearth can run.", param="model")
    est = advice.get(variant.name)
    if est is None or est.plan is None:
        raise InvalidRequest(f"{repo} has no variant '{variant.name}' Hearth can size; choose another.", param="model")
    facts = facts_from_shape(shape, variant.weights_bytes, format=variant.format, bits_per_weight=variant.bits_per_weight)
    if variant.projector is not None:
        facts = replace(facts, projector=projector or projector_from_size(variant.projector.size))
    budget = MemoryBudget.from_hardware(hardware, live=False)
    return FitReport(model=listing.repo, source="hub", variant=variant.name, facts=facts, plan=est.plan,
                     budget=budget, label=est.label)  # fmt: skip


def fit_model(
    name: str,
    hardware: HardwareInfo,
    *,
    registry: ModelRegistry | None = None,
    hub: Any = None,
    n_ctx: int | None = None,
    n_seq: int | None = None,
    kv_type: str | None = None,
    backend: str | None = None,
    gpu_layers: int | None = None,
    flash_attn: bool = True,
    cpu_moe: int | None = None,
    speculative: str | None = None,
    machine: MachineSpeed | None = None,
) -> FitReport:
    """A local model by name or path, else a Hub repo (``OWNER/REPO[:VARIANT]``).

    ``backend`` is the worker's backend override for a local model (None: the one its format gets).
    ``speculative`` is ``--speculative``'s value: with ``draft:MODEL`` the draft model's memory is counted (prompt
    lookup takes none). With ``machine`` (this machine's measured rates) the report has the speed model's figures.

    Raises:
        ModelNotFound: neither here nor a repo name. InvalidRequest: bad settings.
        BackendUnavailable: ``backend`` cannot run the model's format.
    """
    from engine.catalog.registry import resolve_model

    if not name.strip():
        raise InvalidRequest("'model' is empty; name a local model or a hub repo as OWNER/REPO[:VARIANT].", param="model")
    check_path_text(name, param="model")  # a name may be a model file's path: none longer than the system takes
    for value, what in ((n_ctx, "ctx"), (n_seq, "parallel")):
        if value is not None and value < 1:
            raise InvalidRequest(f"'{what}' must be at least 1.", param=what)
    if gpu_layers is not None and gpu_layers < 0:
        raise InvalidRequest("'gpu_layers' must be 0 or more.", param="gpu_layers")
    if cpu_moe is not None and cpu_moe < -1:
        raise InvalidRequest("'cpu_moe' must be a number of layers, or -1 for every layer's experts.", param="cpu_moe")
    from engine.backends.speculative import DRAFT, SpeculativeOptions

    options = SpeculativeOptions.parse(speculative) if speculative else None
    draft = options.draft_model if options is not None and options.mode == DRAFT else None
    try:
        model = resolve_model(name, registry)
    except ModelNotFound:
        if "/" not in name or name.startswith(("/", ".", "~")):
            raise
        if draft:
            raise InvalidRequest("A draft model is counted for a model on this computer; download this one first, "
                                 "then ask again.", param="speculative") from None  # fmt: skip
        if hub is None:
            from engine.catalog.hub import HubClient

            hub = HubClient()
        return fit_hub(hub, name, hardware, n_ctx=n_ctx, n_seq=n_seq, kv_type=kv_type).with_speed(machine)
    # What was not asked for here is what a load of the model would take: its saved settings, its Modelfile's.
    taken, where = settings_a_load_takes(model, registry)
    used: list[str] = []

    def pick(asked: Any, field: str, flag: str) -> Any:
        value = getattr(taken, field)
        if asked is not None or value is None:
            return asked
        used.append(f"{flag} {value} ({where[field]})")
        return value

    n_ctx, n_seq = pick(n_ctx, "n_ctx", "--ctx"), pick(n_seq, "n_seq_max", "--parallel")
    kv_type, gpu_layers = pick(kv_type, "kv_type", "--kv-type"), pick(gpu_layers, "n_gpu_layers", "--gpu-layers")
    cpu_moe = pick(cpu_moe, "cpu_moe", "--cpu-moe")
    if taken.flash_attn is False and flash_attn:
        flash_attn = False
        used.append(f"--no-flash-attn ({where['flash_attn']})")
    if speculative is None and (saved := pick(None, "speculative", "--speculative")) is not None:
        options = SpeculativeOptions.parse(saved)
        draft = options.draft_model if options.mode == DRAFT else None
    report = fit_local(model, hardware, n_ctx=n_ctx, n_seq=n_seq, kv_type=kv_type, backend=backend,
                       gpu_layers=gpu_layers, flash_attn=flash_attn, cpu_moe=cpu_moe, draft=draft, registry=registry)  # fmt: skip
    return replace(report, settings_from=tuple(used)).with_speed(machine)


def settings_a_load_takes(model: LocalModel, registry: ModelRegistry | None) -> tuple[ModelLoadSettings, dict[str, str]]:
    """The settings a load of ``model`` takes when it names none of its own (the model's own defaults, a
    Modelfile's ``num_ctx``, under its saved settings: ``ModelManager.options_for``), and where each came from."""
    from engine.load_settings import LoadSettingsStore
    from engine.model_defaults import load_defaults
    from engine.paths import hearth_home

    own = load_defaults(model.origin_info)
    saved = LoadSettingsStore(registry.home if registry is not None else hearth_home()).get(model.name)
    where = {k: "saved with hearth load --save" for k, v in saved.to_dict().items() if v is not None}
    owner = "Ollama's" if model.origin == "ollama" else "the model's"
    where |= {k: f"{owner} Modelfile" for k, v in own.to_dict().items() if v is not None and k not in where}
    return own.overridden_by(saved), where


__all__ = ["FitReport", "fit_model", "fit_local", "fit_hub", "facts_for_local", "settings_a_load_takes"]
