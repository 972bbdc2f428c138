"""Hub search with the advisor's labels, and a download to completion, against the fake hub.

A worker of its own runs with HF_ENDPOINT pointing at the fake hub of the catalog tests.
"""

from __future__ import annotations

import pytest

from app.net.engine import EngineConfig
from tests.app.conftest import WORKER_ARGS, open_window, start_engine

TINY = "TheOrg/Tiny-Llama-GGUF"
LABELS = ("fits fully on GPU", "partial offload", "CPU only", "will not fit")  # the advisor's words


@pytest.fixture(scope="module")
def fake_hub(tmp_path_factory):
    from tests.engine.catalog.conftest import TOKEN, build_repos
    from tests.hubserver import FakeHub

    # Small chunks, so a throttled file arrives in visible steps.
    with FakeHub(build_repos(tmp_path_factory.mktemp("hub-files")), token=TOKEN, chunk=16 * 1024) as hub:
        yield hub


@pytest.fixture(scope="module")
def hub_engine(qapp, fake_hub, tmp_path_factory):
    config = EngineConfig(extra_args=WORKER_ARGS, env=(("HF_ENDPOINT", fake_hub.url),))
    engine = start_engine(config, tmp_path_factory.mktemp("hub-worker") / "worker.log")
    yield engine
    engine.stop()


@pytest.fixture
def hub_window(qtbot, store, hub_engine, theme):
    return open_window(qtbot, store, hub_engine, theme)


def search(qtbot, page, text: str):
    page.hub.query.setText(text)
    page.hub.search_button.click()
    qtbot.waitUntil(lambda: page.hub.results.count() > 0, timeout=30_000)
    repos = [page.hub.results.item(i).data(256) for i in range(page.hub.results.count())]
    return repos


def test_hub_search_shows_variants_labelled_by_the_advisor(qtbot, hub_window):
    hub_window.nav.select(1)
    page = hub_window.models_page
    page.tabs.setCurrentWidget(page.hub)
    repos = search(qtbot, page, "llama")
    assert TINY in repos

    page.hub.results.setCurrentRow(repos.index(TINY))
    qtbot.waitUntil(lambda: page.hub.table.rowCount() > 0, timeout=30_000)
    variants = page.hub.variants.variants
    assert {v.name for v in variants} >= {"Q4_K_M", "Q8_0"}
    assert all(v.label.startswith(LABELS) for v in variants)
    shown = [page.hub.table.cellWidget(r, 3).text() for r in range(page.hub.table.rowCount())]
    assert all(v.label in text for v, text in zip(variants, shown, strict=True))
    recommended = [v for v in variants if v.recommended]
    assert len(recommended) == 1 and page.hub.variants.recommended == recommended[0].name
    row = [v.name for v in variants].index(recommended[0].name)
    assert page.hub.table.cellWidget(row, 4).text() == "★ Recommended"
    assert "Recommended:" in page.hub.recommendation.text()


def test_a_download_runs_to_completion_and_the_model_appears(qtbot, hub_window, fake_hub):
    fake_hub.throttle["tiny-llama.Q2_K.gguf"] = 0.25  # ~120 KB in 8 chunks: about two seconds
    hub_window.nav.select(1)
    page = hub_window.models_page
    repos = search(qtbot, page, "tiny")
    page.hub.results.setCurrentRow(repos.index(TINY))
    qtbot.waitUntil(lambda: page.hub.table.rowCount() > 0, timeout=30_000)
    row = [v.name for v in page.hub.variants.variants].index("Q2_K")
    page.hub.table.cellWidget(row, 5).click()
    qtbot.waitUntil(lambda: bool(page.downloads.rows), timeout=30_000)
    assert page.tabs.currentWidget() is page.downloads
    download_row = next(iter(page.downloads.rows.values()))
    seen = [download_row.bar.value()]
    download_row.bar.valueChanged.connect(seen.append)

    qtbot.waitUntil(lambda: download_row.download.state == "running" and download_row.pause.isVisible(), timeout=30_000)
    download_row.pause.click()
    qtbot.waitUntil(lambda: download_row.download.state == "paused", timeout=30_000)
    assert download_row.resume.isVisible() and not download_row.pause.isVisible()
    download_row.resume.click()
    qtbot.waitUntil(lambda: download_row.download.state == "done", timeout=60_000)
    assert any(0 < v < 1000 for v in seen), f"the bar jumped straight to the end: {seen}"
    assert seen == sorted(seen) and download_row.bar.value() == 1000
    assert "ready as" in download_row.detail.text()
    qtbot.waitUntil(
        lambda: any("tiny-llama" in page.table.index(r, 0).data().lower() for r in range(page.table.rowCount())),
        timeout=30_000,
    )


def test_hub_answers_parse_into_the_workers_own_models(qtbot, qapp, hub_engine):
    from app.net.api import HearthApi
    from engine.server import api_models as am
    from tests.app.test_api_models import answer

    api = HearthApi(hub_engine)
    results = answer(qtbot, api.hub_search("tiny", fmt="gguf"))
    tiny = next(r for r in results if r.repo == TINY)
    assert isinstance(tiny, am.HubRepo) and "gguf" in tiny.formats and tiny.updated == tiny.last_modified
    listing = answer(qtbot, api.hub_variants(TINY, ctx=2048))
    assert isinstance(listing, am.VariantList) and listing.repo == TINY and listing.context_length == 2048
    q2 = next(v for v in listing.variants if v.name == "Q2_K")
    assert q2.size_bytes == sum(f.size for f in q2.files) > 0 and q2.files[0].path.endswith(".gguf")
    assert listing.recommended in {v.name for v in listing.variants if v.recommended}
    api.deleteLater()


def test_a_repo_and_a_variant_that_see_are_marked(qtbot, hub_window):
    """What the worker says of a repo with projectors (tests/engine/catalog/test_vision_catalog.py) shows in Discover."""
    from engine.server.api_models import HubRepo, HubVariant, RemoteFileInfo, VariantList

    hub = hub_window.models_page.hub
    hub.showing_picks = False
    hub._results([HubRepo(repo="TheOrg/Tiny-VL-GGUF", vision=True), HubRepo(repo="TheOrg/Text-GGUF")])
    assert hub.results.item(0).text().endswith("· vision") and "vision" not in hub.results.item(1).text()
    projector = RemoteFileInfo(path="mmproj-F16.gguf", size=1 << 20)
    hub._variants(VariantList(repo="TheOrg/Tiny-VL-GGUF", revision="main", context_length=4096, vision=True, variants=[
        HubVariant(name="Q8_0", format="gguf", size_bytes=1 << 20, vision=True, projector=projector, fit="cpu", label="CPU only"),
    ]))  # fmt: skip
    assert hub.table.item(0, 1).text() == "GGUF · vision"
    assert hub.table.item(0, 2).text() == "2.1 MB" and "mmproj-F16.gguf" in hub.table.item(0, 2).toolTip()
