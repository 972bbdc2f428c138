"""The Hardware page shows the engine's own plan for a model (GET /api/fit): the slots, KV cache
and memory its loader would allocate, the same numbers `hearth fit` prints."""

from __future__ import annotations

from app.units import human_bytes
from engine.starter import STARTER_NAME


def test_the_hardware_page_shows_what_the_loader_would_allocate(qtbot, window):
    from engine.fit.report import fit_model
    from engine.hardware import detect_hardware

    window.nav.select(2)
    page = window.hardware
    page.refresh()
    qtbot.waitUntil(lambda: page.facts is not None and page.model_combo.count() > 0, timeout=10_000)
    page.model_combo.setCurrentIndex(page.model_combo.findData(STARTER_NAME))
    page.ctx.setValue(2048)
    qtbot.waitUntil(lambda: "Loads as" in page.bar_legend.text(), timeout=20_000)
    legend = page.bar_legend.text()
    assert "of 2,048 tokens, 16-bit KV cache, on CPU" in legend
    engine = fit_model(STARTER_NAME, detect_hardware(), n_ctx=2048).to_dict()["plan"]
    need = page.ram_bar.need
    assert need.weights == engine["devices"][0]["weights_bytes"]
    # the worker and this process see slightly different free memory, so slots may differ by one
    per_slot = engine["memory"]["kv_cache_bytes"] // engine["parallel"]
    assert need.kv_cache % per_slot == 0 and abs(need.kv_cache // per_slot - engine["parallel"]) <= 1
    assert f"needs {human_bytes(need.total)}" in page.ram_label.text()
