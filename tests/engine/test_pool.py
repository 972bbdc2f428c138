"""The model pool sizes a model with the loader's own plan: a second model unloads the first exactly
when their plans do not fit the pool's budget together, and a loaded model counts what its backend planned."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from engine.backends.base import LlamaCppOptions, LoadOptions
from engine.catalog.registry import ModelRegistry
from engine.pool import ModelManager

MIB = 1024**2
ROOT = Path(__file__).resolve().parents[2]
# Both plans are made within a fixed 4 GiB of RAM, so they do not move with what this machine has free.
OPTIONS = LoadOptions(n_ctx=512, n_seq_max=2, kv_type="f16", llamacpp=LlamaCppOptions(memory_budget=4096 * MIB))


def _fit_models():
    spec = importlib.util.spec_from_file_location("fit_models", ROOT / "benchmarks" / "fit_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    """A small Llama-shaped GGUF with random weights (another shape than the starter's)."""
    fm = _fit_models()
    shape = fm.Shape("tiny-llama", "llama", 4, 256, 4, 2, 512, 2048, 2048)
    return fm.write_random_gguf(tmp_path_factory.mktemp("models") / "tiny-llama.gguf", shape)


def _plan_bytes(path: Path) -> int:
    from engine.backends.llamacpp.load_plan import plan_llamacpp_load

    return plan_llamacpp_load(path, OPTIONS).model_bytes


def _pool(tmp_path, budget: int) -> ModelManager:
    return ModelManager(ModelRegistry(tmp_path / "home", register_starter=False), backend="llamacpp", options=OPTIONS,
                        memory_budget=budget)  # fmt: skip


@pytest.mark.parametrize("room", [MIB, -MIB], ids=["both-fit", "one-too-many"])
def test_a_second_model_unloads_the_first_exactly_when_the_plans_do_not_fit_together(tmp_path, starter_path, tiny_gguf, room):
    starter, tiny = _plan_bytes(starter_path), _plan_bytes(tiny_gguf)
    pool = _pool(tmp_path, starter + tiny + room)
    try:
        first = pool.load(str(starter_path), allow_paths=True)
        second = pool.load(str(tiny_gguf), allow_paths=True)
        loaded = {lm.model.name for lm in pool.loaded()}
        if room > 0:
            assert loaded == {first.model.name, second.model.name}
            assert first.size_estimate == starter
        else:
            assert loaded == {second.model.name}
        # what the loaded backend planned and allocated is what the pool counts for it
        planned = pool.stats()[second.model.name]["load_plan"]
        assert second.size_estimate == planned["model_bytes"] == tiny
        assert planned["parallel"] == 2 and planned["n_ctx"] == 512
    finally:
        pool.close()


def test_paths_resolve_only_where_the_caller_allows_them(tmp_path, tiny_gguf):
    from engine.errors import ModelNotFound

    pool = _pool(tmp_path, 4096 * MIB)
    try:
        missing = tiny_gguf.with_name("absent.gguf")
        messages = []
        for path in (tiny_gguf, missing):
            with pytest.raises(ModelNotFound) as err:
                pool.resolve(str(path))
            messages.append(str(err.value).replace(str(path), "PATH"))
        assert messages[0] == messages[1] == "Model 'PATH' is not found; `hearth models` (or GET /v1/models) lists the models there are."
        # The local user's own command (`hearth serve --model PATH`) opens it, under its short name,
        # which is then a name like any other; the path itself stays refused.
        opened = pool.resolve(str(tiny_gguf), allow_paths=True)
        assert opened.source == "path" and pool.resolve(opened.name) == opened
        with pytest.raises(ModelNotFound):
            pool.resolve(str(tiny_gguf))
    finally:
        pool.close()


def test_a_registered_file_opened_by_its_path_is_that_model(tmp_path, starter_path):
    """`hearth serve --model FILE` with a file Hearth has registered: the model keeps its registered name (not a
    second entry of the same file, which a client asking for the listed name would load a second copy of), and
    a projector given with it (--mmproj) goes with that name."""
    from engine.starter import STARTER_NAME

    pool = ModelManager(ModelRegistry(tmp_path / "home"), backend="llamacpp", options=OPTIONS)
    try:
        assert pool.resolve(str(starter_path), allow_paths=True).name == STARTER_NAME
        assert [m.name for m in pool.available()] == [STARTER_NAME]
        projector = tmp_path / "mmproj.gguf"
        projector.write_bytes(b"GGUF")
        pool.pair_projector(str(starter_path), projector)
        assert pool.resolve(STARTER_NAME).mmproj == projector.resolve()
        assert pool.resolve(str(starter_path), allow_paths=True).mmproj == projector.resolve()
        assert [m.name for m in pool.available()] == [STARTER_NAME]
    finally:
        pool.close()


def test_a_paired_registered_model_goes_with_its_registration(tmp_path, starter_path):
    """`hearth serve --model NAME --mmproj P` with a registered NAME, then NAME removed from the registry (`ollama
    rm`, the app's Delete): it is no longer listed nor served by that name; the file itself, by its path, opens as
    any file does."""
    from engine.errors import ModelNotFound
    from engine.starter import STARTER_NAME

    registry = ModelRegistry(tmp_path / "home")
    pool = ModelManager(registry, backend="llamacpp", options=OPTIONS)
    try:
        assert pool.resolve(str(starter_path), allow_paths=True).name == STARTER_NAME
        projector = tmp_path / "mmproj.gguf"
        projector.write_bytes(b"GGUF")
        pool.pair_projector(STARTER_NAME, projector)
        assert pool.resolve(STARTER_NAME).mmproj == projector.resolve()
        registry.remove(STARTER_NAME)
        assert pool.available() == []
        with pytest.raises(ModelNotFound):
            pool.resolve(STARTER_NAME)
        opened = pool.resolve(str(starter_path), allow_paths=True)
        assert opened.source == "path" and opened.mmproj is None and opened.path == starter_path
        assert [m.name for m in pool.available()] == [opened.name]
    finally:
        pool.close()


def test_names_made_from_one_model_share_its_loaded_weights(tmp_path, starter_path):
    """A model made from another with only its own defaults (Ollama's `create` with SYSTEM or PARAMETER lines, or
    `copy`) serves from the weights the other loaded, as Ollama's share a runner: one load, counted once against the
    memory budget, and open until the last name that uses it leaves. Another template or other load settings load
    their own."""
    from engine.backends import create_backend
    from engine.starter import STARTER_NAME

    made: list = []
    closed: list = []

    def counting(name: str):
        backend = create_backend(name)
        close = backend.close

        def counted() -> None:
            closed.append(backend)
            close()

        backend.close = counted
        made.append(backend)
        return backend

    registry = ModelRegistry(tmp_path / "home")
    base = registry.get(STARTER_NAME)
    assert base is not None
    registry.derive(base, "pirate", {**(base.origin_info or {}), "defaults": {"system": "Talk like a pirate.", "temperature": 0.2}})
    registry.derive(base, "short", {**(base.origin_info or {}), "defaults": {"num_ctx": 256}})
    plain = "{% for m in messages %}{{ m.content }}\n{% endfor %}"  # (an Ollama template, as translated)
    registry.derive(base, "plain-template", {**(base.origin_info or {}), "template": plain, "template_source": "ollama"})
    size = _plan_bytes(starter_path)
    pool = ModelManager(registry, backend="llamacpp", options=OPTIONS, backend_factory=counting, memory_budget=size + MIB)
    try:
        first = pool.acquire(STARTER_NAME)
        pirate = pool.acquire("pirate")
        assert len(made) == 1 and pirate.backend is first.backend and pirate.model.name == "pirate"
        assert {lm.model.name for lm in pool.loaded()} == {STARTER_NAME, "pirate"}
        # both fit the budget of one: they are one load (nothing was unloaded to make room for the second name)
        assert pool.state(STARTER_NAME) == pool.state("pirate") == "loaded"

        assert pool.unload(STARTER_NAME)  # the weights stay: "pirate" answers from them
        assert closed == []
        chunks = list(pirate.backend.stream(_greedy("Hi", 4)))
        assert chunks[-1].finish_reason == "length" and chunks[-1].completion_tokens == 4
        pool.release(pirate)
        pool.release(first)
        again = pool.acquire(STARTER_NAME)  # loaded again by sharing, not by a second load
        assert len(made) == 1 and again.backend is pirate.backend
        pool.release(again)

        # another template, or other load settings: a load of their own (one at a time in this budget)
        other = pool.load("plain-template")
        assert len(made) == 2 and other.backend is not pirate.backend and other.model.chat_template == plain
        assert {lm.model.name for lm in pool.loaded()} == {"plain-template"}  # both names of the first left together
        assert closed == [made[0]]  # closed once, with the last name that used it
        short = pool.load("short")
        assert len(made) == 3 and short.options is not None and short.options.n_ctx == 256
    finally:
        pool.close()


def _greedy(text: str, n: int):
    from engine.types import ChatMessage, GenerationRequest, SamplingParams

    return GenerationRequest(model="m", messages=(ChatMessage("user", text),),
                             params=SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))  # fmt: skip


def test_a_name_asked_for_while_its_twin_loads_waits_for_that_load(tmp_path):
    """Two names of the same weights asked for at once (the worker's start model, and a model made from it): one
    load, which the second waits for and shares."""
    import threading

    from engine.backends import create_backend
    from engine.starter import STARTER_NAME

    made: list = []
    gate = threading.Event()

    def slow(name: str):
        made.append(name)
        gate.wait(60)  # the first load is under way when the second name is asked for
        return create_backend(name)

    registry = ModelRegistry(tmp_path / "home")
    base = registry.get(STARTER_NAME)
    assert base is not None
    registry.derive(base, "pirate", {**(base.origin_info or {}), "defaults": {"system": "Talk like a pirate."}})
    pool = ModelManager(registry, backend="llamacpp", options=OPTIONS, backend_factory=slow)
    try:
        got: dict = {}
        first = threading.Thread(target=lambda: got.setdefault(STARTER_NAME, pool.load(STARTER_NAME)))
        first.start()
        while not made:
            first.join(0.01)
        second = threading.Thread(target=lambda: got.setdefault("pirate", pool.load("pirate")))
        second.start()
        second.join(0.3)
        assert second.is_alive()  # waiting for the load in progress, not loading a second copy
        gate.set()
        first.join(60)
        second.join(60)
        assert made == ["llamacpp"] and got["pirate"].backend is got[STARTER_NAME].backend
    finally:
        gate.set()
        pool.close()
