"""The Discover tab opens on Hearth's recommended models, labelled for this machine, without a search.

A worker of its own runs with HF_ENDPOINT pointing at a fake hub that has one of the recommended repos.
"""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QApplication, QMessageBox

from app.net.engine import EngineConfig
from app.units import human_count
from tests.app.conftest import WORKER_ARGS, open_window, start_engine
from tests.engine.catalog.test_recommended import LABELS, LLAMA_3B, picks_hub_repos

PICK_ROLE = 257  # Qt.UserRole + 1: the row's RecommendedModel


@pytest.fixture(scope="module")
def picks_hub(tmp_path_factory):
    from tests.engine.catalog.conftest import TOKEN
    from tests.hubserver import FakeHub

    with FakeHub(picks_hub_repos(tmp_path_factory.mktemp("picks-files")), token=TOKEN) as hub:
        yield hub


@pytest.fixture(scope="module")
def picks_engine(qapp, picks_hub, tmp_path_factory):
    config = EngineConfig(extra_args=WORKER_ARGS, env=(("HF_ENDPOINT", picks_hub.url),))
    engine = start_engine(config, tmp_path_factory.mktemp("picks-worker") / "worker.log")
    yield engine
    engine.stop()


@pytest.fixture
def open_discover(qtbot, store, picks_engine, picks_hub, theme):
    """Opens a window on the Models page's Discover tab (after the test has set the hub up)."""
    picks_hub.reset()

    def opened():
        window = open_window(qtbot, store, picks_engine, theme)
        window.nav.select(1)
        page = window.models_page
        page.tabs.setCurrentWidget(page.hub)
        return page

    yield opened
    picks_hub.reset()


def pick_rows(panel) -> dict:
    rows = {}
    for i in range(panel.results.count()):
        model = panel.results.item(i).data(PICK_ROLE)
        if model is not None:
            rows[model.repo] = (i, model)
    return rows


def headers(panel) -> list[str]:
    return [panel.results.item(i).text() for i in range(panel.results.count()) if panel.results.item(i).data(PICK_ROLE) is None]


def test_discover_opens_on_the_recommended_models_with_the_hubs_details(qtbot, open_discover, picks_hub):
    panel = open_discover().hub
    qtbot.waitUntil(lambda: panel.picks is not None and panel.picks.asked_hub, timeout=60_000)
    assert panel.query.text() == "" and not [r for r in picks_hub.requests if r.path.rstrip("/") == "/api/models"]
    assert panel.list_title.text() == "Recommended for this computer"
    assert headers(panel) == ["Chat", "Coding", "Reasoning", "Vision", "Embedding"]
    rows = pick_rows(panel)
    assert len(rows) == len(panel.picks.models) >= 10
    for _row, model in rows.values():
        assert model.label.startswith(LABELS)
    row, llama = rows[LLAMA_3B]
    assert llama.live and llama.downloads == 123_456
    text = panel.results.item(row).text()
    assert f"↓ {human_count(123_456)}" in text and llama.label in text and llama.variant in text
    # the expected speed beside the fit label (the tests' fixed figures for this machine), its basis in the tooltip
    assert llama.speed.startswith(("about ", "slow here: about ")) and llama.speed in text
    assert "GB/s measured" in panel.results.item(row).toolTip()
    usable = [not m.slow for _r, m in sorted(rows.values(), key=lambda r: r[0]) if m.category == "chat"]
    assert usable == sorted(usable, reverse=True)  # within a use, what is slow here comes last

    # picking one opens its variants, as a search result does
    panel.results.setCurrentRow(row)
    qtbot.waitUntil(lambda: panel.variants is not None and panel.table.rowCount() > 0, timeout=30_000)
    assert panel.variants.repo == LLAMA_3B and panel.repo_title.text() == LLAMA_3B
    names = [v.name for v in panel.variants.variants]
    assert "Q4_K_M" in names
    assert panel.table.cellWidget(names.index("Q4_K_M"), 5).text() == "Download"
    assert " tok/s" in panel.table.cellWidget(names.index("Q4_K_M"), 3).text()  # speed beside the fit label

    # a search takes the list's place; the Recommended button brings the picks back
    panel.query.setText("llama")
    panel.search_button.click()
    qtbot.waitUntil(lambda: panel.results.count() > 0, timeout=30_000)
    assert panel.list_title.text() == "Search results" and not pick_rows(panel)
    assert panel.results.item(0).data(256) == LLAMA_3B
    panel.picks_button.click()
    assert len(pick_rows(panel)) == len(panel.picks.models) and headers(panel)[0] == "Chat"


def test_without_the_hub_the_list_still_shows_and_no_dialog_opens(qtbot, open_discover, picks_hub):
    picks_hub.rate_limited = True
    discover = open_discover()
    panel = discover.hub
    qtbot.waitUntil(lambda: panel.picks is not None and panel.picks.asked_hub, timeout=60_000)
    assert panel.picks.hub_error and "rate-limiting" in panel.picks.hub_error
    rows = pick_rows(panel)
    assert len(rows) == len(panel.picks.models) and not any(m.live for _r, m in rows.values())
    assert all(m.label.startswith(LABELS) for _r, m in rows.values())
    assert discover.message.isVisible() and "rate-limiting" in discover.message.text()
    assert discover.colors.error_text not in discover.message.text()  # said plainly, not as an error
    assert not [w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()]
