"""The API page's tokens a second are the worker's generated tokens summed over its loaded models: names that answer
from one load's weights (a model made from another with its own defaults, or a copy) show that load's counters under
each name, and the sum counts them once."""

from __future__ import annotations

from app.net.types import StatsSnapshot


def _stats(loaded: dict[str, list[str]], generated: dict[str, int]) -> dict:
    """``GET /api/stats`` as the worker answers it (tests/engine/server/test_ollama_create.py reads the route)."""
    return {
        "requests_in_flight": 0,
        "models": {name: {"backend": "llamacpp", "in_use": 0, "generated_tokens": n} for name, n in generated.items()},
        "loaded": [{"name": name, "backend": "llamacpp", "in_use": 0, "loaded_at": 0.0, "size_bytes": 1, "idle_seconds": 0.0,
                    "shares_weights_with": shares} for name, shares in loaded.items()],  # fmt: skip
    }


def test_a_load_shared_by_names_is_counted_once():
    snap = StatsSnapshot.from_json(_stats({"base": ["pirate", "copy"], "other": [], "pirate": ["base", "copy"],
                                           "copy": ["base", "pirate"]},  # fmt: skip
                                          {"base": 1000, "other": 70, "pirate": 1000, "copy": 1000}))
    assert snap.generated_tokens == 1070
    assert {m.name for m in snap.models} == {"base", "other", "pirate", "copy"}  # each still listed with its figures
    # a twin loaded beside a busy model adds nothing to the sum, so the page shows no burst of tokens that never came
    before = StatsSnapshot.from_json(_stats({"base": []}, {"base": 1000}))
    after = StatsSnapshot.from_json(_stats({"base": ["pirate"], "pirate": ["base"]}, {"base": 1000, "pirate": 1000}))
    assert after.generated_tokens - before.generated_tokens == 0


def test_an_older_worker_without_the_field_sums_every_model():
    answer = _stats({"a": [], "b": []}, {"a": 5, "b": 7})
    for entry in answer["loaded"]:
        del entry["shares_weights_with"]
    assert StatsSnapshot.from_json(answer).generated_tokens == 12
