"""The Discover tab when the Hub cannot be reached: an empty variants table or results list says why in a
sentence, a search takes the place of the model shown before, and the Hub's trouble is said on Discover only."""

from __future__ import annotations

import pytest

from app.net.client import ApiCall
from app.net.types import ApiError
from engine.server.api_models import HubVariant, VariantList

HUB_DOWN = ApiError(
    "Could not reach the model hub at huggingface.co; check your internet connection (or HF_ENDPOINT) and try again.",
    status=503,
    code="hub_unavailable",
)
REPO = "unsloth/Qwen3-1.7B-GGUF"


@pytest.fixture
def offline_hub(idle_window, monkeypatch):
    """The Discover tab shown, over a worker whose every question to the Hub fails as it does offline."""
    page = idle_window.models_page
    idle_window.nav.select(1)
    page.tabs.setCurrentWidget(page.hub)
    hub = page.hub

    def failing(*_args, **_kwargs) -> ApiCall:
        call = ApiCall("/api/hub", lambda d: d, hub)
        call.fail_soon(HUB_DOWN)
        return call

    monkeypatch.setattr(hub.api, "hub_variants", failing)
    monkeypatch.setattr(hub.api, "hub_search", failing)
    return page


def test_a_model_whose_files_cannot_be_listed_says_why_in_place_of_the_table(qtbot, offline_hub):
    hub = offline_hub.hub
    hub.show_variants(REPO)
    qtbot.waitUntil(lambda: not hub.variants_note.isHidden())
    assert hub.repo_title.text() == REPO and hub.table.isHidden()
    assert hub.variants_note.text() == (
        f"The files of {REPO} are not listed: could not reach the model hub at huggingface.co; check your internet "
        "connection (or HF_ENDPOINT) and try again."
    )
    assert offline_hub.colors.error_text not in offline_hub.message.text()  # not said twice, in red, above

    hub._variants(VariantList(repo=REPO, revision="main", context_length=4096, variants=[
        HubVariant(name="Q4_K_M", format="gguf", size_bytes=1 << 30, fit="cpu", label="CPU only"),
    ]))  # fmt: skip
    assert hub.variants_note.isHidden() and not hub.table.isHidden() and hub.table.rowCount() == 1


def test_a_search_that_fails_says_why_and_clears_the_model_shown_before(qtbot, offline_hub):
    hub = offline_hub.hub
    hub.show_variants(REPO)
    qtbot.waitUntil(lambda: not hub.variants_note.isHidden())
    hub.query.setText("qwen")
    hub.search_button.click()
    assert hub.repo_title.text() == "Pick a model to see its variants." and hub.variants_note.isHidden()
    qtbot.waitUntil(lambda: not hub.results_note.isHidden())
    assert hub.results.isHidden() and hub.search_button.isEnabled()
    assert hub.results_note.text().startswith("The Hub could not be searched: could not reach the model hub")

    hub._results([])  # the Hub answered again, with nothing
    assert hub.results_note.text() == "No models on the Hub match “qwen”; try other words or another format."
    hub.picks_button.click()  # the recommended models come back in its place (here: why they cannot)
    assert hub.list_title.text() == "Recommended for this computer" and hub.results_note.isHidden()
    qtbot.waitUntil(lambda: not hub.results_note.isHidden())
    assert hub.results_note.text().startswith("The recommended models could not be listed: ")


def test_the_hubs_trouble_is_said_on_discover_only(qtbot, offline_hub):
    page = offline_hub
    page.hub.message.emit(HUB_DOWN.message, True)
    assert "Could not reach the model hub" in page.message.text()
    for tab in (page.local_tab, page.downloads, page.remote):
        page.tabs.setCurrentWidget(tab)
        assert page.message.text() == ""
