"""The Hardware page says in one line how big a model this machine runs well, from the worker's labels of the
recommended models (Discover's), and says the engine's plan once."""

from __future__ import annotations

import re

from app.net.catalog_types import RecommendedList
from app.pages.machine_summary import machine_summary
from engine.starter import STARTER_NAME


def pick(
    name: str, parameters: int, *, fit: str = "cpu", slow: bool = False, experts: int | None = None
) -> dict:
    variant = {"name": "Q4_K_M", "quantization": "Q4_K_M", "file": "m.gguf", "size_bytes": 1, "fit": fit,
               "label": "", "slow": slow, "speed": "slow here: about 1 tok/s" if slow else "about 9 tok/s"}  # fmt: skip
    return {"repo": f"org/{name}", "name": name, "category": "chat", "parameters": parameters, "experts": experts,
            "variants": [variant]}  # fmt: skip


def test_the_summary_names_the_largest_dense_model_that_runs_well_at_q4():
    listing = RecommendedList.model_validate({"as_of": "2025-07-15", "models": [
        pick("Small 3B", 3_210_000_000),
        pick("Mid 8B", 8_030_000_000),
        pick("Big 24B", 23_600_000_000, slow=True),  # fits, but nobody would wait for it
        pick("Huge 70B", 70_600_000_000, fit="none"),
        pick("MoE 30B", 30_500_000_000, experts=128),  # decodes like a 3B: says nothing of dense models
    ]})  # fmt: skip
    assert machine_summary(listing) == (
        "This machine runs models up to about 8 B parameters well (Q4): Mid 8B, about 9 tok/s."
    )
    slow = RecommendedList.model_validate(
        {"as_of": "2025-07-15", "models": [pick("Small 1B", 1_240_000_000, slow=True)]}
    )
    assert "run slowly" in machine_summary(slow)


def test_the_hardware_page_shows_what_this_machine_runs_well_and_says_its_plan_once(qtbot, window):
    window.nav.select(2)
    page = window.hardware
    page.refresh()
    qtbot.waitUntil(page.summary.isVisible, timeout=60_000)  # the worker may measure the machine first
    assert re.search(
        r"runs models up to about [\d.]+ B parameters well \(Q4\)|run slowly", page.summary.text()
    )

    qtbot.waitUntil(lambda: page.facts is not None and page.model_combo.count() > 0, timeout=10_000)
    page.model_combo.setCurrentIndex(page.model_combo.findData(STARTER_NAME))
    page.ctx.setValue(3072)
    qtbot.waitUntil(lambda: "Loads as" in page.bar_legend.text(), timeout=20_000)
    legend = page.bar_legend.text()
    # "16 slots of 3,072 tokens, 16-bit KV cache, on CPU", once: the reason below no longer begins with it
    plan = re.search(r"Loads as (.+?)\.</b>", legend).group(1)
    assert legend.count(plan) == 1
