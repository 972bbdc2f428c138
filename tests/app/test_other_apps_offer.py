"""The first-run question about other apps' models: with an Ollama store on the machine, the app asks once
("Found 1 model from Ollama (0.1 GB). Use them in Hearth?"); "Not now" is remembered, and "Use them" puts the
model in the list, read in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.conftest import WORKER_ARGS, open_window, start_engine, theme  # noqa: F401 - theme is a fixture
from tests.engine.catalog.other_apps_fixtures import ollama_store
from tests.engine.fit.speed_figures import keep_figures

OLLAMA_NAME = "smollm2:135m"


@pytest.fixture(scope="module")
def ollama_root(tmp_path_factory, starter_path: Path) -> Path:
    root = tmp_path_factory.mktemp("ollama-models")
    ollama_store(root, starter_path)
    return root


@pytest.fixture(scope="module")
def offer_engine(qapp, tmp_path_factory, ollama_root: Path):
    """A worker of its own whose machine has an Ollama store (and no other app's models)."""
    from app.net.engine import EngineConfig

    home = tmp_path_factory.mktemp("offer-worker-home")
    keep_figures(home)
    env = (("HEARTH_HOME", str(home)), ("OLLAMA_MODELS", str(ollama_root)))
    controller = start_engine(EngineConfig(extra_args=WORKER_ARGS, env=env), home / "worker.log")
    yield controller
    controller.stop()


def fresh_store(tmp_path_factory):
    from app.store import ChatStore

    return ChatStore(tmp_path_factory.mktemp("offer-chats"))


def answer(qtbot, window, label: str) -> None:
    offer = window.other_apps
    qtbot.waitUntil(lambda: offer.box is not None and offer.box.isVisible(), timeout=60_000)
    box = offer.box
    assert box.text().startswith("Found 1 model from Ollama (") and box.text().endswith(" GB). Use them in Hearth?")
    assert "never moves or deletes them" in box.informativeText()
    next(b for b in box.buttons() if b.text() == label).click()
    qtbot.waitUntil(lambda: offer.box is None, timeout=10_000)


def test_not_now_is_remembered_and_use_them_lists_the_model_in_place(qtbot, tmp_path_factory, offer_engine, theme, ollama_root):  # noqa: F811
    declined = fresh_store(tmp_path_factory)
    accepted = fresh_store(tmp_path_factory)
    try:
        window = open_window(qtbot, declined, offer_engine, theme)
        answer(qtbot, window, "Not now")
        assert window.settings_store.load().other_apps_offered
        qtbot.wait(200)
        assert window.models.get(OLLAMA_NAME) is None
        window.close()

        again = open_window(qtbot, declined, offer_engine, theme)  # the next launch does not ask again
        qtbot.waitUntil(lambda: bool(again.models.models), timeout=30_000)
        qtbot.wait(300)
        assert again.other_apps.box is None
        again.close()

        window = open_window(qtbot, accepted, offer_engine, theme)
        with qtbot.waitSignal(window.other_apps.added, timeout=60_000) as added:
            answer(qtbot, window, "Use them")
        assert added.args[0] == [OLLAMA_NAME]
        qtbot.waitUntil(lambda: window.models.get(OLLAMA_NAME) is not None, timeout=30_000)
        model = window.models.get(OLLAMA_NAME)
        assert Path(model.path).parent == ollama_root / "blobs"  # the blob itself, not a copy
        assert window.settings_store.load().other_apps_offered
        window.close()
    finally:
        declined.close()
        accepted.close()
