"""The model pool: the models a worker holds, loaded on first use, kept while used, unloaded when idle.

Several models can be loaded at once within a memory budget; the least recently used
idle model is unloaded first when a new one needs room. A model is sized by the memory model
(engine.fit): the plan its loader makes for the pool's options before the load, what its backend
planned and allocated after it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from engine.backend_choice import choose_backend
from engine.backends import Backend, LoadOptions, create_backend
from engine.catalog.metadata import verify_gguf
from engine.catalog.registry import LocalModel, ModelRegistry, resolve_model
from engine.collector import refreeze
from engine.errors import AmbiguousModel, HearthError, InvalidRequest, ModelNotFound
from engine.fit.plan import LoadPlan
from engine.load_settings import LoadSettingsStore, ModelLoadSettings
from engine.model_defaults import load_defaults

log = logging.getLogger(__name__)

def not_served_message(name: str) -> str:
    """What a client hears for a model name that is not served here: the same for every unknown name,
    a path to a file that exists included (so the answer says nothing about the disk)."""
    return f"Model '{name}' is not found; `hearth models` (or GET /v1/models) lists the models there are."


# Share of available memory the loaded models may take when no budget is given.
DEFAULT_BUDGET_SHARE = 0.75


def _stats_dict(backend: Backend) -> dict[str, Any]:
    stats = backend.stats()
    return stats.as_dict() if stats is not None else {}


def return_freed_memory() -> None:
    """Hand the memory an unloaded model freed back to the OS. Its objects are collected first (the worker keeps
    what it holds frozen out of the collector's walks: engine/collector.py). glibc keeps freed heap pages in each
    thread's arena, and a model's threads (its loader, its decode loop) leave them scattered over
    several arenas: without a trim, every load and unload left the worker a little larger."""
    refreeze()
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc (macOS, Windows, musl): nothing to do
            _malloc_trim = False
    if callable(_malloc_trim):
        _malloc_trim(0)


_malloc_trim = None

# Where the memory model makes no plan for a backend (MLX), a model is sized by its files, with room
# for its KV cache and buffers: the pool's rule of thumb from before the memory model.
FALLBACK_SIZE_FACTOR = 1.2
FALLBACK_EXTRA_BYTES = 256 * 1024 * 1024


def fallback_estimate(size_bytes: int) -> int:
    return int(size_bytes * FALLBACK_SIZE_FACTOR) + FALLBACK_EXTRA_BYTES


def plan_for_load(backend: str, path: Path, options: LoadOptions, *, mmproj: Path | None = None) -> LoadPlan | None:
    """The plan ``backend``'s loader makes for ``path`` with ``options`` (fitting or not), or None where
    the memory model does not plan that backend's loads.

    Raises:
        HearthError: the files cannot be read, or an option is out of range.
    """
    if backend == "llamacpp":
        from engine.backends.llamacpp.load_plan import draft_for, llamacpp_load_plan

        return llamacpp_load_plan(path, options, mmproj=mmproj, draft=draft_for(options))
    if backend == "paged":
        from engine.backends.paged.load_plan import paged_load_plan

        return paged_load_plan(path, options)
    return None


def loaded_bytes(backend: Backend) -> int | None:
    """What a loaded backend planned and allocated (``load_plan.model_bytes`` in its stats), if it says."""
    try:
        plan = _stats_dict(backend).get("load_plan")
    except Exception:  # a backend without stats yet: the estimate stands
        return None
    size = plan.get("model_bytes") if isinstance(plan, dict) else None
    return size if isinstance(size, int) else None


@dataclass(eq=False)
class LoadedModel:
    model: LocalModel
    backend: Backend
    backend_name: str
    size_estimate: int
    loaded_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    in_use: int = 0
    keep_alive: float | None = None  # idle seconds before unloading (None: the manager's idle_ttl; < 0: never)
    options: LoadOptions | None = None  # what it was loaded with (None: the manager's options)
    # what its backend loaded (see ModelManager._identity): names whose loads are the same share one backend
    identity: tuple | None = None


class ModelManager:
    """Loads, shares and unloads the worker's models. Thread-safe.

    Args:
        registry: Where model names are resolved.
        backend: Backend override for every model (None chooses per model).
        options: Load options for every model.
        idle_ttl: Seconds a model may sit unused before it is unloaded (None: never).
        memory_budget: Bytes the loaded models may take together (None: 75% of available RAM).
        backend_factory: Makes a backend by name (tests pass their own).
        load_settings: Each model's saved load settings, used by every load that names none of its own
            (None: those saved in the registry's data folder).
    """

    def __init__(
        self,
        registry: ModelRegistry,
        *,
        backend: str | None = None,
        options: LoadOptions | None = None,
        idle_ttl: float | None = None,
        memory_budget: int | None = None,
        backend_factory: Callable[[str], Backend] = create_backend,
        load_settings: LoadSettingsStore | None = None,
    ) -> None:
        self.registry = registry
        self.load_settings = load_settings or LoadSettingsStore(registry.home)
        self.backend_override = backend
        self.options = options or LoadOptions()
        self.idle_ttl = idle_ttl
        self.memory_budget = memory_budget or int(psutil.virtual_memory().available * DEFAULT_BUDGET_SHARE)
        self._factory = backend_factory
        self._loaded: dict[str, LoadedModel] = {}
        self._by_path: dict[str, LocalModel] = {}  # models opened by file path, not registered
        self._loading: set[str] = set()
        self._loading_as: dict[str, tuple] = {}  # what each load in progress makes (see _identity)
        self._lock = threading.Condition()
        self._closed = threading.Event()
        # Set when the worker begins to stop: streams that would never end (the request log) end then.
        self.stopping = threading.Event()
        # Clear while the models the worker was started with load (`hearth serve --model`): /health says
        # "loading" and a request that names no model waits. Each one that failed, with its sentence.
        self.preloaded = threading.Event()
        self.preloaded.set()
        self.preload_errors: dict[str, str] = {}
        self._reaper = threading.Thread(target=self._reap_idle, name="idle-unloader", daemon=True)
        self._reaper.start()

    # -- queries --------------------------------------------------------------------------------
    def available(self) -> list[LocalModel]:
        models = self.registry.list()
        names = {m.name for m in models}
        # a registered model paired with a projector (--mmproj) is listed as long as it is registered
        extra = {m.name: m for m in list(self._by_path.values()) if m.name not in names and m.source == "path"}
        return models + list(extra.values())

    def _forget_pairing(self, model: LocalModel) -> None:
        """Drop a registered model's pairing with a projector once its registration is gone (deleted, or made
        again from other files): the name then means what the registry says, or nothing."""
        for key in [k for k, m in list(self._by_path.items()) if m is model]:
            self._by_path.pop(key, None)

    def resolve(self, name: str, *, allow_paths: bool = False, fold_case: bool = True) -> LocalModel:
        """The model called ``name``: registered, or opened earlier by path by the local user.

        Over HTTP only registered names are taken (``allow_paths`` false): a path is refused with the
        message any unknown name gets, whether or not a file is there. Only the local user's own
        commands (``hearth serve --model PATH``) and the worker's own files pass ``allow_paths``.

        Raises:
            ModelNotFound: nothing matches (a path, unless ``allow_paths``); ``fold_case`` false: nothing matches
                in this case.
        """
        known = self._by_path.get(name)
        if known is not None and known.source != "path":  # a registered model paired with --mmproj
            registered = self.registry.get(known.name)
            if registered is None or registered.path != known.path:
                self._forget_pairing(known)
                known = None
        if known is not None and (allow_paths or known.name == name):
            registered = self.registry.get(name)
            if registered is None or registered.path == known.path:  # that file (a registered one paired with --mmproj)
                return known
        if not allow_paths:
            try:
                return self.registry.resolve(name, fold_case=fold_case)
            except AmbiguousModel:
                raise
            except ModelNotFound:
                raise ModelNotFound(name, not_served_message(name)) from None
        model = resolve_model(name, self.registry)
        if model.source == "path":
            # Remember it under its short name and as asked (its path), so neither reads the file again.
            self._by_path[model.name] = model
            self._by_path[name] = model
        return model

    def pair_projector(self, name: str, mmproj: Path) -> LocalModel:
        """Open the model file ``name`` (a path, the local user's own) with the multimodal projector ``mmproj``
        (``hearth serve --model FILE.gguf --mmproj P.gguf``).

        Raises:
            ModelNotFound: ``name`` is not a model file.
        """
        model = self.resolve(name, allow_paths=True)
        paired = replace(model, origin_info={**(model.origin_info or {}), "mmproj": str(mmproj.resolve())})
        for key in [k for k, m in self._by_path.items() if m is model] or [name, model.name]:
            self._by_path[key] = paired
        return paired

    def state(self, name: str) -> str:
        with self._lock:
            if name in self._loaded:
                return "loaded"
            if name in self._loading:
                return "loading"
            return "not-loaded"

    def loaded(self) -> list[LoadedModel]:
        with self._lock:
            return list(self._loaded.values())

    @property
    def is_loading(self) -> bool:
        with self._lock:
            return bool(self._loading)

    def stats(self) -> dict[str, Any]:
        """Each loaded model's backend and engine figures, as ``/api/stats`` shows them."""
        out = {}
        for lm in self.loaded():
            try:
                out[lm.model.name] = {"backend": lm.backend_name, "in_use": lm.in_use, **_stats_dict(lm.backend)}
            except Exception:  # a backend mid-close has no stats
                continue
        return out

    def stats_by_load(self) -> dict[str, Any]:
        """:meth:`stats` with each load once: names that share weights (one backend) are given under the first of
        them, so a sum over ``/metrics``' ``model`` label counts a shared engine's requests once."""
        out = self.stats()
        with self._lock:
            holders = list(self._loaded.values())
        seen: set[int] = set()
        for lm in holders:
            if id(lm.backend) in seen:
                out.pop(lm.model.name, None)
            seen.add(id(lm.backend))
        return out

    # -- loading --------------------------------------------------------------------------------
    def load(self, name: str, *, allow_paths: bool = False, options: LoadOptions | None = None) -> LoadedModel:
        """Load ``name`` (or return it if loaded), making room within the memory budget
        (``allow_paths``: as :meth:`resolve`).

        ``options`` load it this once with other settings than the manager's (`hearth load --ctx ...`): a
        model loaded with others is unloaded first when no request uses it. Later loads take the manager's.

        Raises:
            ModelNotFound, BackendUnavailable, ModelLoadError.
            InvalidRequest: it is loaded with other settings and requests are using it.
        """
        model = self.resolve(name, allow_paths=allow_paths)
        key = model.name
        if options is not None:  # settings that cannot load are refused, and leave a loaded model as it is
            self._refuse_unfit(model, options)
        with self._lock:
            while key in self._loading:
                self._lock.wait()
            lm = self._loaded.get(key)
            if lm is not None and options is not None and (lm.options or self.options) != options:
                if lm.in_use:
                    raise InvalidRequest(
                        f"Model '{key}' is answering requests with other load settings; try again when they "
                        "finish, or load it without settings."
                    )
                del self._loaded[key]  # reloaded below with the settings asked for
                stale = lm
            elif lm is not None and lm.model.source != "path" and lm.model.spec != model.spec and not lm.in_use:
                del self._loaded[key]  # its entry changed (another file or template: `create` again): loaded anew
                stale = lm
            else:
                stale = None
            if key in self._loaded:
                lm = self._loaded[key]
                lm.last_used = time.monotonic()
                return lm
            self._loading.add(key)
        if stale is not None:
            old = [stale]
            lm = stale = None  # nothing here holds the old model: it is collected in _close
            self._close(old, "to load it again")
        options = options or self.options_for(key)
        try:
            choice = choose_backend(model.format, override=self.backend_override)
            identity = self._identity(model, choice.backend, options)
            with self._lock:  # the same weights loaded (or loading) under another name: this name shares them
                while True:
                    twin = next((t for t in self._loaded.values() if identity and t.identity == identity), None)
                    if twin is not None:
                        lm = LoadedModel(model=model, backend=twin.backend, backend_name=twin.backend_name,
                                         size_estimate=twin.size_estimate, options=options, identity=identity)  # fmt: skip
                        self._loaded[key] = lm
                        log.info("%s shares the weights %s loaded", key, twin.model.name)
                        return lm
                    if not identity or identity not in self._loading_as.values():
                        break
                    self._lock.wait()
                if identity is not None:
                    self._loading_as[key] = identity
            if model.format == "gguf":
                verify_gguf(model.path)  # a truncated or hostile file is refused here, not crashed on
            estimate = self._estimate(model, choice.backend, options)
            self._make_room(estimate)
            backend = self._factory(choice.backend)
            try:
                backend.load(model.spec, options)
            except BaseException:
                backend.close()
                raise
            size = loaded_bytes(backend)  # what the loader planned and allocated, once it has
            lm = LoadedModel(model=model, backend=backend, backend_name=choice.backend,
                             size_estimate=estimate if size is None else size, options=options, identity=identity)  # fmt: skip
            log.info("loaded %s on %s (%s); it takes %.0f MiB of the pool's %.0f MiB", key, choice.backend,
                     choice.reason, lm.size_estimate / 2**20, self.memory_budget / 2**20)  # fmt: skip
            with self._lock:
                self._loaded[key] = lm
            refreeze()  # its tokenizer and the modules its loading imported: out of the collector's walks
            return lm
        finally:
            with self._lock:
                self._loading.discard(key)
                self._loading_as.pop(key, None)
                self._lock.notify_all()

    @staticmethod
    def _identity(model: LocalModel, backend: str, options: LoadOptions) -> tuple | None:
        """What a load of ``model`` on ``backend`` with ``options`` makes: the file and projector, the template and
        the load settings. Two names with the same (a model made from another with its own system prompt or sampling
        defaults, or a copy) share one backend, as Ollama's models share a runner. None: the file cannot be found."""
        try:
            path = model.path.resolve()
        except OSError:
            return None
        return (backend, model.format, str(path), model.mmproj, model.chat_template, options)

    def sharing(self, name: str) -> list[str]:
        """The other loaded names that answer from ``name``'s loaded weights (unloading ``name`` leaves them
        loaded for those)."""
        with self._lock:
            lm = self._loaded.get(name)
            return [] if lm is None else [o.model.name for o in self._holders(lm) if o is not lm]

    def _holders(self, lm: LoadedModel) -> list[LoadedModel]:
        """The pool's entries that serve from ``lm``'s backend (the names that share its weights); with the lock."""
        return [other for other in self._loaded.values() if other.backend is lm.backend]

    def options_for(self, name: str) -> LoadOptions:
        """The options a load of ``name`` takes when it names none: the manager's, under the model's own
        defaults (an Ollama Modelfile's ``num_ctx``), under its saved settings (a JIT load through any dialect
        takes them too). A request's own load options (Ollama's) go over all of them: :meth:`options_with`."""
        own = load_defaults(self._origin_info(name))
        return own.overridden_by(self.load_settings.get(name)).apply(self.options)

    def _origin_info(self, name: str) -> Mapping[str, object] | None:
        model = self._by_path.get(name) or self.registry.get(name)
        return model.origin_info if model is not None else None

    def options_with(self, name: str, settings: ModelLoadSettings) -> LoadOptions:
        """The options ``name`` is loaded with now (else those its next load takes) with ``settings`` over
        them: what a request's own load options (Ollama's ``num_ctx``...) ask for."""
        with self._lock:
            lm = self._loaded.get(name)
        base = lm.options if lm is not None and lm.options is not None else self.options_for(name)
        return settings.apply(base)

    def _refuse_unfit(self, model: LocalModel, options: LoadOptions) -> None:
        """Refuse settings asked for one load that its loader's plan already refuses (memory as it is now).

        Raises:
            InvalidRequest: the plan does not fit (the reason names what would), or the backend does not
                take an option.
            ModelLoadError: the file cannot be read.
        """
        choice = choose_backend(model.format, override=self.backend_override)
        plan = plan_for_load(choice.backend, model.path, options, mmproj=model.mmproj)
        if plan is not None and not plan.fits:
            raise InvalidRequest(f"Model '{model.name}' cannot load with these settings: {plan.reason}")

    def _estimate(self, model: LocalModel, backend: str, options: LoadOptions) -> int:
        """Bytes ``model`` will take on ``backend``: its loader's plan for ``options`` (``model_bytes``:
        weights, KV cache, buffers, the model's runtime), else the files' size x 1.2 + 256 MiB."""
        try:
            plan = plan_for_load(backend, model.path, options, mmproj=model.mmproj)
        except HearthError as exc:  # the load itself will refuse with the reason; the pool only sizes
            log.debug("no plan for %s ahead of its load: %s", model.name, exc)
            plan = None
        if plan is None:
            return fallback_estimate(model.size_bytes)
        return plan.model_bytes

    def _make_room(self, needed: int) -> None:
        with self._lock:
            # names that share one backend (its weights) count once, and leave together: one alone frees nothing
            groups: dict[int, list[LoadedModel]] = {}
            for lm in self._loaded.values():
                groups.setdefault(id(lm.backend), []).append(lm)
            used = sum(group[0].size_estimate for group in groups.values())
            idle = sorted((g for g in groups.values() if all(lm.in_use == 0 for lm in g)),
                          key=lambda g: max(lm.last_used for lm in g))  # fmt: skip
            victims: list[LoadedModel] = []  # the only list that holds them once out of the pool (see _close)
            while used + needed > self.memory_budget and idle:
                group = idle.pop(0)
                used -= group[0].size_estimate
                for lm in group:
                    victims.append(lm)
                    del self._loaded[lm.model.name]
            group = []
            lm = None
        if victims:
            self._close(victims, "to make room")

    def unload(self, name: str) -> bool:
        """Unload ``name`` now; a request still using it keeps its stream until the close."""
        with self._lock:
            if name not in self._loaded:
                return False
            models = [self._loaded.pop(name)]
        self._close(models, "as asked")
        return True

    @contextmanager
    def use(self, name: str, *, allow_paths: bool = False) -> Iterator[LoadedModel]:
        """The loaded model ``name`` (loaded now if needed), kept from eviction while in use."""
        lm = self.acquire(name, allow_paths=allow_paths)
        try:
            yield lm
        finally:
            self.release(lm)

    def acquire(self, name: str, *, allow_paths: bool = False) -> LoadedModel:
        while True:
            lm = self.load(name, allow_paths=allow_paths)
            with self._lock:
                if self._loaded.get(lm.model.name) is lm:
                    lm.in_use += 1
                    lm.last_used = time.monotonic()
                    return lm

    def release(self, lm: LoadedModel) -> None:
        with self._lock:
            lm.in_use = max(0, lm.in_use - 1)
            lm.last_used = time.monotonic()

    def set_keep_alive(self, lm: LoadedModel, seconds: float | None) -> None:
        """Keep ``lm`` loaded for ``seconds`` after its last use (None: the manager's idle_ttl; < 0: forever)."""
        with self._lock:
            lm.keep_alive = seconds

    def ttl(self, lm: LoadedModel) -> float | None:
        """Idle seconds before ``lm`` is unloaded, or None when it stays."""
        ttl = lm.keep_alive if lm.keep_alive is not None else self.idle_ttl
        return None if ttl is None or ttl < 0 else ttl

    def reap_idle(self) -> list[str]:
        """Unload every model idle for longer than its TTL now; returns their names."""
        now = time.monotonic()
        with self._lock:
            stale = [
                lm
                for lm in self._loaded.values()
                if lm.in_use == 0 and (ttl := self.ttl(lm)) is not None and now - lm.last_used >= ttl
            ]
            names = [lm.model.name for lm in stale]
            for name in names:
                del self._loaded[name]
        if stale:
            self._close(stale, "after being idle")
        return names

    def _close(self, models: list[LoadedModel], why: str) -> None:
        """Close the backends of ``models``, which are out of the pool, then collect and trim what they held. The
        list is emptied: the callers hold them nowhere else, so nothing keeps them from the collection. A backend
        another name in the pool still serves from stays open (its weights are that name's too)."""
        closed = False
        while models:
            lm = models.pop()
            with self._lock:
                kept = self._holders(lm)
            if kept or any(other.backend is lm.backend for other in models):
                log.info("%s leaves the pool %s; its weights stay loaded%s", lm.model.name, why,
                         f" for {kept[0].model.name}" if kept else "")  # fmt: skip
                continue
            log.info("unloading %s %s", lm.model.name, why)
            lm.backend.close()
            closed = True
        lm = kept = None
        if closed:
            return_freed_memory()

    def _reap_idle(self) -> None:
        while not self._closed.wait(1.0):
            self.reap_idle()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            backends = list({id(lm.backend): lm.backend for lm in self._loaded.values()}.values())
            self._loaded.clear()
        for backend in backends:
            backend.close()
