"""A model's own speculative setting, through the real worker: saved by `hearth load --save` and
``PUT /api/models/NAME/settings``, taken by the loads that follow (a request's just-in-time load included),
over the server's own ``--speculative``; a request's ``speculative: false`` still turns drafting off."""

from __future__ import annotations

import httpx
import pytest

from engine.cli import main
from tests.engine.backends.test_speculative import COPY
from tests.engine.server.conftest import API_KEY, MODEL


def _drafts(server, **extra) -> tuple[int, int]:
    """Tokens drafted and kept for a greedy answer that copies a block of code (usage counts them)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": COPY}], "max_tokens": 24, "temperature": 0, **extra}
    r = httpx.post(f"{server.base_url}/chat/completions", json=body, headers=server.headers, timeout=120)
    assert r.status_code == 200, r.text
    details = r.json()["usage"]["completion_tokens_details"]
    kept = details["accepted_prediction_tokens"]
    return kept + details["rejected_prediction_tokens"], kept


def _settings(server) -> dict:
    r = httpx.get(f"{server.root}/api/models/{MODEL}/settings", headers=server.headers, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _put(server, body: dict) -> httpx.Response:
    return httpx.put(f"{server.root}/api/models/{MODEL}/settings", json=body, headers=server.headers, timeout=30)


def _unload(server) -> None:
    r = httpx.post(f"{server.root}/api/models/unload", json={"model": MODEL}, headers=server.headers, timeout=60)
    assert r.status_code == 200, r.text


def test_a_model_saved_with_speculation_off_drafts_nothing_where_ngram_drafts(server, monkeypatch, capsys):
    monkeypatch.setenv("HEARTH_ADMIN_KEY", API_KEY)
    try:
        assert _put(server, {"speculative": "ngram"}).json()["settings"]["speculative"] == "ngram"
        _unload(server)  # the next request loads it with its saved settings
        drafted, kept = _drafts(server)
        assert drafted > 0 and kept > 0  # the copy repeats its prompt: prompt lookup drafts it
        assert _drafts(server, speculative=False) == (0, 0)  # a request's own false still wins
        # `hearth load --save` reloads it with drafting off, and remembers that for every later load
        assert main(["load", MODEL, "--speculative", "off", "--save", "--url", server.root, "--json"]) == 0
        assert '"saved": true' in capsys.readouterr().out
        assert _settings(server)["settings"]["speculative"] == "off" and _settings(server)["loaded"] is True
        assert _drafts(server) == (0, 0)
        _unload(server)
        assert _drafts(server) == (0, 0)  # a just-in-time load takes the saved setting too
        drafted, _ = _drafts(server, speculative=True)  # a request may still ask for drafts
        assert drafted > 0
    finally:  # the session's server goes on with its own settings
        _put(server, {})
        _unload(server)
    assert _settings(server)["settings"]["speculative"] is None


@pytest.mark.parametrize("value", ["sometimes", 3])
def test_a_speculative_mode_hearth_does_not_have_is_refused_and_not_saved(server, value):
    r = _put(server, {"speculative": value, "n_ctx": 1024})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "speculative" or "speculative" in r.json()["error"]["message"].lower()
    assert _settings(server)["settings"]["n_ctx"] is None
    r = httpx.post(f"{server.root}/api/models/load", json={"model": MODEL, "speculative": "maybe", "save": True},
                   headers=server.headers, timeout=60)  # fmt: skip
    assert r.status_code == 400 and "auto, ngram" in r.json()["error"]["message"]


def test_a_model_saved_with_a_draft_model_loads_it_by_its_registered_name_and_never_by_a_path(server, starter_path):
    refused = _put(server, {"speculative": f"draft:{starter_path}"})  # a file on the disk, named over HTTP
    assert refused.status_code == 400 and "GET /v1/models" in refused.json()["error"]["message"]
    assert _settings(server)["settings"]["speculative"] is None
    try:
        assert _put(server, {"speculative": f"draft:{MODEL}"}).status_code == 200  # the starter drafts for itself
        _unload(server)
        drafted, kept = _drafts(server)
        stats = httpx.get(f"{server.root}/api/stats", headers=server.headers, timeout=30).json()["models"][MODEL]
        assert stats["draft_model"] == starter_path.name and stats["draft_model_refused"] is None
        assert drafted > 0 and kept > 0
    finally:
        _put(server, {})
        _unload(server)


def test_the_default_auto_drafts_no_greedy_request_unless_it_asks(server):
    """A batch rounds unlike a one-token step, so a drafted greedy answer can part from the plain one at a
    near-tie: under the default, a greedy answer is the plain one because nothing is drafted for it."""
    _unload(server)  # loaded with the server's own settings (auto)
    assert _drafts(server) == (0, 0)
    drafted, _ = _drafts(server, speculative=True)  # asked: drafted
    assert drafted > 0
    plain = httpx.post(f"{server.base_url}/chat/completions", headers=server.headers, timeout=120, json={
        "model": MODEL, "messages": [{"role": "user", "content": COPY}], "max_tokens": 24, "temperature": 0,
        "speculative": False}).json()["choices"][0]["message"]["content"]  # fmt: skip
    default = httpx.post(f"{server.base_url}/chat/completions", headers=server.headers, timeout=120, json={
        "model": MODEL, "messages": [{"role": "user", "content": COPY}], "max_tokens": 24,
        "temperature": 0}).json()["choices"][0]["message"]["content"]  # fmt: skip
    assert default == plain
