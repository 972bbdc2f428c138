"""An Ollama model's own defaults (its Modelfile's PARAMETERs and SYSTEM, read from a fake store built here with
the starter GGUF as the blob) apply to every request that leaves them out, in every dialect; what a request
sets, an explicit 0 or an empty stop list included, is kept; a request's own system message replaces SYSTEM.

The stores have no template layer, so the GGUF's own template renders the chat: the SYSTEM text reaches the
prompt only as the message Hearth adds (SmolLM2's template puts its own default system prompt otherwise)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from engine.catalog.other_apps import OtherAppRoots, scan_other_apps
from engine.catalog.other_apps_sync import accept
from engine.load_settings import ModelLoadSettings
from engine.server import ServerSettings, create_app
from tests.engine.catalog.other_apps_fixtures import SYSTEM, ollama_store

STARTER = "smollm2-135m-instruct"  # the same file, registered as Hearth's own: no defaults
HOT = "smollm2:135m"  # Modelfile: temperature 2, num_ctx 1024
STOPPED = "smollm2:stopped"  # Modelfile: temperature 0, num_predict 24, and a stop found in its greedy answer
ASK = [{"role": "user", "content": "Tell me about the sea."}]
SEA = ASK[0]["content"]


@pytest.fixture(scope="module")
def api(tmp_path_factory, starter_path):
    from engine.backends import LoadOptions
    from engine.catalog.registry import ModelRegistry
    from engine.pool import ModelManager

    home = tmp_path_factory.mktemp("home")
    store = home / "ollama-store"
    ollama_store(store, starter_path, template=None, system=SYSTEM, params={"temperature": 2.0, "num_ctx": 1024})
    registry = ModelRegistry(home)
    accept(registry, scan_other_apps(OtherAppRoots(ollama=(store,))), watch=False)
    manager = ModelManager(registry, options=LoadOptions(n_ctx=512, n_seq_max=1))
    with TestClient(create_app(ServerSettings(), manager), base_url="http://127.0.0.1") as client:
        client.manager = manager  # type: ignore[attr-defined]
        client.store = store  # type: ignore[attr-defined]
        client.registry = registry  # type: ignore[attr-defined]
        yield client
    manager.close()
    registry.close()


def chat(api, model: str, **extra) -> dict:
    r = api.post("/v1/chat/completions", json={"model": model, "messages": ASK, **extra})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def greedy(api, starter_path) -> tuple[str, str]:
    """The greedy answer of HOT (its SYSTEM applied, its temperature 2 overridden by an explicit 0), and a
    stop string from its middle, which STOPPED's Modelfile is then written with."""
    answer = chat(api, HOT, temperature=0, stop=[], max_tokens=24)["choices"][0]["message"]["content"]
    words = answer.split()
    assert len(words) >= 6, answer
    stop = words[len(words) // 2]
    ollama_store(api.store, starter_path, parts=("registry.ollama.ai", "library", "smollm2", "stopped"), template=None,
                 system=SYSTEM, params={"temperature": 0, "stop": [stop], "num_predict": 24, "num_ctx": 1024})  # fmt: skip
    accept(api.registry, scan_other_apps(OtherAppRoots(ollama=(api.store,))), watch=False)
    return answer, stop


def test_an_explicit_temperature_of_0_wins_over_the_modelfiles(api, greedy):
    answer, _ = greedy
    again = chat(api, HOT, temperature=0, stop=[], max_tokens=24)["choices"][0]["message"]["content"]
    assert again == answer  # greedy both times: the Modelfile's temperature 2 did not replace the 0


def test_openai_requests_take_the_modelfiles_stop_temperature_and_system_unless_they_set_their_own(api, greedy):
    answer, stop = greedy
    own = chat(api, STOPPED)  # no temperature, stop or max_tokens: the Modelfile's
    assert own["choices"][0]["message"]["content"] == answer[: answer.index(stop)]
    assert own["choices"][0]["finish_reason"] == "stop"
    kept = chat(api, STOPPED, stop=[])  # its own (empty) stop list; the Modelfile's temperature 0 and num_predict
    assert kept["choices"][0]["message"]["content"] == answer
    assert kept["choices"][0]["finish_reason"] == "length" and kept["usage"]["completion_tokens"] == 24
    # the SYSTEM text is in the prompt exactly once, as if the client had sent it; a client's own replaces it
    with_system = [{"role": "system", "content": SYSTEM}, *ASK]
    prompt = own["usage"]["prompt_tokens"]
    assert prompt == chat(api, STARTER, messages=with_system, max_tokens=1)["usage"]["prompt_tokens"]
    assert prompt == chat(api, STOPPED, messages=with_system, max_tokens=1)["usage"]["prompt_tokens"]
    assert prompt != chat(api, STARTER, max_tokens=1)["usage"]["prompt_tokens"]  # SmolLM2's own default system
    other = [{"role": "system", "content": "Answer in French, briefly."}, *ASK]
    mine = chat(api, STOPPED, messages=other, max_tokens=1)["usage"]["prompt_tokens"]
    assert mine == chat(api, STARTER, messages=other, max_tokens=1)["usage"]["prompt_tokens"]


def test_ollama_requests_take_the_modelfiles_defaults_unless_their_options_set_them(api, greedy):
    answer, stop = greedy
    body = {"model": STOPPED, "messages": ASK, "stream": False}
    own = api.post("/api/chat", json=body).json()
    assert own["message"]["content"] == answer[: answer.index(stop)] and own["done_reason"] == "stop"
    kept = api.post("/api/chat", json={**body, "options": {"stop": []}}).json()
    assert kept["message"]["content"] == answer and kept["done_reason"] == "length"
    assert kept["eval_count"] == 24  # the Modelfile's num_predict
    short = api.post("/api/chat", json={**body, "options": {"stop": [], "num_predict": 3}}).json()
    assert short["eval_count"] == 3 and answer.startswith(short["message"]["content"])
    gen = api.post("/api/generate", json={"model": STOPPED, "prompt": SEA, "stream": False}).json()
    assert gen["response"] == answer[: answer.index(stop)]
    assert gen["prompt_eval_count"] == own["prompt_eval_count"]
    told = api.post("/api/generate", json={"model": STOPPED, "prompt": SEA, "system": "Be brief.", "stream": False}).json()
    starter = api.post("/api/generate", json={"model": STARTER, "prompt": SEA, "system": "Be brief.", "stream": False,
                                              "options": {"num_predict": 1}}).json()  # fmt: skip
    assert told["prompt_eval_count"] == starter["prompt_eval_count"] != own["prompt_eval_count"]


def test_anthropic_and_responses_requests_take_the_modelfiles_stop(api, greedy):
    answer, stop = greedy
    r = api.post("/v1/messages", json={"model": STOPPED, "max_tokens": 24, "messages": ASK}).json()
    assert r["content"][0]["text"] == answer[: answer.index(stop)]
    assert (r["stop_reason"], r["stop_sequence"]) == ("stop_sequence", stop)
    own = api.post("/v1/messages", json={"model": STOPPED, "max_tokens": 24, "messages": ASK, "stop_sequences": ["\u00a7"]})
    assert own.json()["content"][0]["text"] == answer and own.json()["stop_reason"] == "max_tokens"
    resp = api.post("/v1/responses", json={"model": STOPPED, "input": SEA}).json()
    assert resp["output"][-1]["content"][0]["text"] == answer[: answer.index(stop)]


def test_num_ctx_from_the_modelfile_loads_the_model_under_its_saved_settings(api, greedy):
    manager = api.manager
    for model in (STOPPED, HOT, STARTER):  # each loaded, whatever ran before this test
        chat(api, model, max_tokens=1)
    loaded = {lm.model.name: lm.options.n_ctx for lm in manager.loaded()}
    assert loaded[STOPPED] == 1024 and loaded[HOT] == 1024 and loaded[STARTER] == 512
    manager.load_settings.put(HOT, ModelLoadSettings(n_ctx=768))  # a saved setting wins over the Modelfile's
    try:
        assert manager.options_for(HOT).n_ctx == 768
        assert manager.options_for(STOPPED).n_ctx == 1024 and manager.options_for(STARTER).n_ctx == 512
    finally:
        manager.load_settings.put(HOT, ModelLoadSettings())


def test_modelfile_values_hearth_cannot_take_are_left_out_and_the_rest_kept():
    from engine.model_defaults import ModelDefaults
    from engine.types import GenerationRequest

    info = {"defaults": {"temperature": -1, "top_k": 40, "stop": "END", "num_predict": -1, "num_ctx": 4,
                         "seed": "x", "mirostat": 2, "system": "  "}}  # fmt: skip
    defaults = ModelDefaults.from_info(info)
    assert defaults == ModelDefaults(sampling=(("top_k", 40), ("stop", ("END",))), system=None, n_ctx=None)
    req = GenerationRequest(model="m", prompt="p", unset=frozenset({"top_k"}))
    assert defaults.apply(req).params.top_k == 40 and defaults.apply(req).params.stop == ()
    assert defaults.apply(req).request_id == req.request_id
    assert ModelDefaults.from_info(None).is_empty and ModelDefaults.from_info({"defaults": "no"}).is_empty


def test_a_modelfiles_messages_come_after_the_system_messages_and_before_the_requests():
    from engine.model_defaults import ModelDefaults
    from engine.types import ChatMessage, GenerationRequest

    info = {"defaults": {"system": "Be Mario.", "messages": [{"role": "user", "content": "Who?"},
                                                             {"role": "assistant", "content": "Mario!"},
                                                             {"role": "tool", "content": "left out"}, "no"]}}  # fmt: skip
    defaults = ModelDefaults.from_info(info)
    assert [m.role for m in defaults.messages] == ["user", "assistant"] and not defaults.is_empty
    asked = GenerationRequest(model="m", messages=(ChatMessage("user", "Hi"),))
    assert [(m.role, m.content) for m in defaults.apply(asked).messages] == [
        ("system", "Be Mario."), ("user", "Who?"), ("assistant", "Mario!"), ("user", "Hi")]  # fmt: skip
    own = GenerationRequest(model="m", messages=(ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")))
    assert [m.content for m in defaults.apply(own).messages] == ["Be brief.", "Who?", "Mario!", "Hi"]
    raw = GenerationRequest(model="m", prompt="p")
    assert defaults.apply(raw).prompt == "p" and defaults.apply(raw).messages is None
    # a turn of /api/generate that goes on from an exchange's ids: they hold the conversation already
    going_on = GenerationRequest(model="m", messages=(ChatMessage("user", "next"),), context=(1, 2, 3))
    assert [m.content for m in defaults.apply(going_on).messages] == ["Be Mario.", "next"]


def test_the_terminal_chat_sends_its_own_sampling_only_where_asked_or_the_model_has_none():
    """`hearth chat`'s 0.7 and 0.95 are for a model without settings of its own: a Modelfile's temperature holds
    (the worker fills what a request leaves out), and a flag or `/set parameter` goes over both."""
    from engine.model_defaults import chat_sampling

    asked = {"temperature": None, "top_p": None, "seed": 5, "max_tokens": None}
    own = {"defaults": {"temperature": 0, "num_predict": 24}}
    assert chat_sampling(asked, None) == {"temperature": 0.7, "top_p": 0.95, "seed": 5}
    assert chat_sampling(asked, own) == {"top_p": 0.95, "seed": 5}
    assert chat_sampling({**asked, "temperature": 1.2, "max_tokens": 3}, own) == {"temperature": 1.2, "top_p": 0.95,
                                                                                  "seed": 5, "max_tokens": 3}  # fmt: skip
    assert chat_sampling(asked, {"defaults": {"temperature": "hot"}}) == {"temperature": 0.7, "top_p": 0.95, "seed": 5}
