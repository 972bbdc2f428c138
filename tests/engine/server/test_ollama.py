"""Ollama's API on Hearth's port and on --ollama-port, driven by the official `ollama` client.

A worker of its own (own data folder, no API key, as Ollama's clients expect) with the Hub stand-in
behind it for /api/pull.
"""

from __future__ import annotations

import contextlib
import os
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import httpx
import ollama
import pytest

from engine.worker.supervisor import free_port
from tests.engine.server.conftest import MODEL, Server

REPO = "TheOrg/Tiny-Llama-GGUF"
LIBRARY_REPO = "bartowski/Llama-3.2-1B-Instruct-GGUF"  # Hearth's list's model for Ollama's llama3.2:1b
QUESTION = [{"role": "user", "content": "Name three colours."}]
GREEDY = {"temperature": 0, "num_predict": 8}


@pytest.fixture(scope="module")
def fake_hub(tmp_path_factory):
    from tests.engine.catalog.conftest import make_gguf
    from tests.hubserver import FakeHub, HubFile, HubRepo

    folder = tmp_path_factory.mktemp("ollama-hub")
    gguf = make_gguf(folder / "tiny-llama.Q2_K.gguf", label="Q2_K", n_floats=30_000)
    repo = HubRepo(REPO, [HubFile("README.md", b"# Tiny\n", lfs=False), HubFile("tiny-llama.Q2_K.gguf", gguf)], tags=["gguf"])
    listed = make_gguf(folder / "listed.gguf", label="Q8_0", n_floats=20_000)  # the repo Hearth pulls for llama3.2:1b
    library = HubRepo(LIBRARY_REPO, [HubFile("Llama-3.2-1B-Instruct-Q8_0.gguf", listed)], tags=["gguf"])
    with FakeHub([repo, library], chunk=16 * 1024) as hub:
        hub.throttle["tiny-llama.Q2_K.gguf"] = 0.1  # eight chunks: progress lines before the end
        yield hub


@pytest.fixture(scope="module")
def ollama_server(fake_hub, tmp_path_factory):
    saved = {k: os.environ.get(k) for k in ("HF_ENDPOINT", "HEARTH_HOME")}
    os.environ["HF_ENDPOINT"] = fake_hub.url
    os.environ["HEARTH_HOME"] = str(tmp_path_factory.mktemp("ollama-home"))
    port = free_port()
    try:
        s = Server("--ctx", "1024", "--parallel", "2", "--ollama-port", str(port), api_key=None)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    s.ollama_port = port
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(ollama_server):
    return ollama.Client(host=ollama_server.root, timeout=600)


def test_the_root_answers_get_and_head_as_ollama_does(ollama_server):
    # Ollama's clients and Open WebUI check a server with HEAD / or GET / before anything else.
    for method in ("GET", "HEAD"):
        r = httpx.request(method, ollama_server.root + "/", timeout=10)
        assert r.status_code == 200
    assert "running" in httpx.get(ollama_server.root + "/", timeout=10).text
    ids = [op.get("operationId") for path in httpx.get(ollama_server.root + "/openapi.json").json()["paths"].values()
           for op in path.values()]  # fmt: skip
    assert len(ids) == len(set(ids))


def test_list_show_and_ps(client):
    names = [m.model for m in client.list().models]
    assert f"{MODEL}:latest" in names  # as Ollama lists models: LangChain's ChatOllama checks its name against them
    shown = client.show(MODEL + ":latest")  # Ollama's clients add :latest to untagged names
    assert shown.details.format == "gguf" and shown.details.family == "llama" and shown.details.quantization_level
    assert {"completion", "tools"} <= set(shown.capabilities) and "thinking" not in shown.capabilities
    assert shown.modelinfo["general.architecture"] == "llama" and shown.modelinfo["general.parameter_count"] > 1e8
    # as Ollama shows them: the tokenizer's scalars, its arrays as null, never the template (given apart)
    assert shown.modelinfo["tokenizer.ggml.model"] == "gpt2" and shown.modelinfo["tokenizer.ggml.tokens"] is None
    assert "tokenizer.chat_template" not in shown.modelinfo
    assert "<|im_start|>" in shown.template
    assert client.generate(model=MODEL, prompt="").model == MODEL  # an empty prompt loads the model
    running = client.ps().models
    assert [m.model for m in running] == [f"{MODEL}:latest"] and running[0].context_length == 1024
    for asked in (MODEL, f"{MODEL}:latest"):  # an answer names the model as it was asked for, as Ollama's
        assert client.chat(model=asked, messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2}).model == asked
        assert {line.model for line in client.generate(model=asked, prompt="Hi", options={"num_predict": 2}, stream=True)} == {asked}
        assert client.embed(model=asked, input="Hi").model == asked
    assert running[0].size > 0 and running[0].size_vram == 0  # nothing on a GPU here


@pytest.mark.parametrize("think", [True, "high"])
def test_think_on_a_model_that_cannot_think_is_ollamas_400_so_a_client_can_ask_again_without(client, think):
    # the starter's /api/show lists no "thinking"; Ollama refuses such a request, and clients fall back on it
    hi = [{"role": "user", "content": "Hi"}]
    for ask in (lambda: client.chat(model=MODEL, messages=hi, think=think),
                lambda: list(client.chat(model=MODEL, messages=hi, think=think, stream=True)),
                lambda: client.generate(model=MODEL, prompt="Hi", think=think)):  # fmt: skip
        with pytest.raises(ollama.ResponseError) as refused:
            ask()
        assert refused.value.status_code == 400 and "does not support thinking" in refused.value.error
    off = client.chat(model=MODEL, messages=hi, think=False, options={"num_predict": 2})
    assert off.done


def test_ollama_create_and_cp_make_models_that_answer_with_their_own_modelfile(client):
    mario = "You are Mario from Super Mario Bros."
    told = client.chat(model=MODEL, messages=[{"role": "system", "content": mario}, *QUESTION], options={"num_predict": 1})
    progress = list(client.create(model="mario", from_=MODEL, system=mario, parameters={"temperature": 0, "num_predict": 5},
                                  stream=True))  # fmt: skip
    assert progress[-1].status == "success"
    try:
        assert "mario:latest" in [m.model for m in client.list().models]
        shown = client.show("mario")
        assert shown.details.parent_model == MODEL and "num_predict" in shown.parameters
        assert shown.modelfile.splitlines()[1:3] == [f"FROM {MODEL}", "SYSTEM You are Mario from Super Mario Bros."]
        answer = client.chat(model="mario", messages=QUESTION)  # its Modelfile's num_predict, temperature and SYSTEM
        assert answer.eval_count == 5 and answer.model == "mario" and answer.message.content
        assert answer.prompt_eval_count == told.prompt_eval_count  # its SYSTEM in the prompt, as the one sent
        assert client.copy("mario", "luigi").status == "success"
        assert client.chat(model="luigi", messages=QUESTION).message.content == answer.message.content  # each loaded fresh
    finally:
        assert client.delete("mario").status == "success" and client.delete("luigi").status == "success"
    assert client.chat(model=MODEL, messages=QUESTION, options=GREEDY).eval_count == 8  # the files kept
    with pytest.raises(ollama.ResponseError) as refused:
        client.push(MODEL)
    assert refused.value.status_code == 404 and refused.value.error.startswith("Hearth has no /api/push")


def test_ollama_create_from_a_gguf_file_sent_to_the_port(client, starter_path):
    digest = client.create_blob(starter_path)  # what `ollama create -f Modelfile` does for FROM ./model.gguf
    assert client.create(model="uploaded:v1", files={starter_path.name: digest}).status == "success"
    try:
        assert "uploaded:v1" in [m.model for m in client.list().models]
        answer = client.chat(model="uploaded:v1", messages=QUESTION, options=GREEDY)
        assert answer.eval_count == 8 and answer.message.content
        assert answer.prompt_eval_count == client.chat(model=MODEL, messages=QUESTION, options=GREEDY).prompt_eval_count
    finally:
        assert client.delete("uploaded:v1").status == "success"
    assert "uploaded:v1" not in [m.model for m in client.ps().models]
    with pytest.raises(ollama.ResponseError) as gone:
        client.show("uploaded:v1")
    assert gone.value.status_code == 404


def test_chat_streamed_and_not_agree_and_end_with_ollamas_counts(client):
    plain = client.chat(model=MODEL, messages=QUESTION, options=GREEDY)
    assert plain.done and plain.message.role == "assistant" and plain.message.content
    assert plain.eval_count == 8 and plain.done_reason == "length"
    assert plain.prompt_eval_count > 5 and plain.total_duration >= plain.eval_duration > 0
    parts = list(client.chat(model=MODEL, messages=QUESTION, options=GREEDY, stream=True))
    assert len(parts) > 2 and all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content for p in parts) == plain.message.content
    last = parts[-1]
    assert last.eval_count == 8 and last.prompt_eval_count == plain.prompt_eval_count
    assert last.load_duration is not None and last.prompt_eval_duration > 0


def test_generate_with_system_raw_stop_and_seed(client):
    r = client.generate(model=MODEL, prompt="Name three colours.", system="Be brief.", options=GREEDY)
    assert r.response and r.done and r.eval_count <= 8
    raw = client.generate(model=MODEL, prompt="The sky is", raw=True, options={"num_predict": 6, "temperature": 0})
    assert raw.response and raw.prompt_eval_count < r.prompt_eval_count  # no chat template around it
    words = r.response.split()
    if len(words) >= 3:
        cut = client.generate(model=MODEL, prompt="Name three colours.", system="Be brief.", options={**GREEDY, "stop": [words[2]]})
        assert cut.response == r.response[: r.response.index(words[2])]
    seeded = {"temperature": 1.0, "seed": 7, "num_predict": 8, "top_k": 40, "top_p": 0.9, "min_p": 0.05, "repeat_penalty": 1.1}
    a = client.generate(model=MODEL, prompt="Tell me a story.", options=seeded).response
    assert a == client.generate(model=MODEL, prompt="Tell me a story.", options=seeded).response


def test_generate_context_continues_an_exchange_token_for_token(client, ollama_server):
    """Ollama's ``context``: an answer gives its prompt's and its own token ids; sent back, the next prompt goes on
    from them as they are (the model reads its earlier answer token for token), as the same ids sent raw would."""
    first = client.generate(model=MODEL, prompt="My name is Ada.", options=GREEDY)
    ctx = list(first.context or [])
    assert len(ctx) == first.prompt_eval_count + first.eval_count
    tail = httpx.post(f"{ollama_server.root}/detokenize", json={"model": MODEL, "tokens": ctx[first.prompt_eval_count :]})
    assert tail.json()["content"] == first.response
    alone = client.generate(model=MODEL, prompt="What is my name?", options=GREEDY)
    second = client.generate(model=MODEL, prompt="What is my name?", context=ctx, options=GREEDY)
    assert second.prompt_eval_count == len(ctx) + alone.prompt_eval_count  # this model's prompts open with no BOS
    assert list(second.context or [])[: second.prompt_eval_count] == ctx + list(alone.context or [])[: alone.prompt_eval_count]
    lines = list(client.generate(model=MODEL, prompt="What is my name?", context=ctx, options=GREEDY, stream=True))
    assert "".join(x.response for x in lines) == second.response and lines[-1].context == second.context
    assert all(x.context is None for x in lines[:-1])
    same = httpx.post(f"{ollama_server.root}/v1/completions", timeout=120, json={
        "model": MODEL, "prompt": list(second.context or [])[: second.prompt_eval_count], "max_tokens": 8, "temperature": 0})  # fmt: skip
    assert same.json()["choices"][0]["text"] == second.response
    assert client.generate(model=MODEL, prompt="Hi", raw=True, context=ctx, options=GREEDY).context is None  # as Ollama
    words = first.response.split()
    if len(words) >= 2:  # a stop string's tokens stay out of the context, as its text stays out of the answer
        cut = client.generate(model=MODEL, prompt="My name is Ada.", options={**GREEDY, "stop": [words[1]]})
        tail = httpx.post(f"{ollama_server.root}/detokenize", json={"model": MODEL, "tokens": list(cut.context or [])[cut.prompt_eval_count :]})
        assert cut.response and first.response.startswith(tail.json()["content"]) and cut.response.startswith(tail.json()["content"])
    with pytest.raises(ollama.ResponseError) as full:  # the context alone fills the model's: refused before it is read
        client.generate(model=MODEL, prompt="Hi", context=[1] * 1024, options=GREEDY)
    assert full.value.status_code == 400 and "1024" in str(full.value)
    with pytest.raises(ollama.ResponseError) as bad:
        client.generate(model=MODEL, prompt="Hi", context=[10**9], options=GREEDY)
    assert bad.value.status_code == 400 and "'context'" in str(bad.value)


def test_format_json_goes_through_the_grammar(client):
    import json

    schema = {"type": "object", "properties": {"colour": {"type": "string", "enum": ["red", "blue"]}}, "required": ["colour"]}
    r = client.chat(model=MODEL, messages=[{"role": "user", "content": "Pick a colour."}], format=schema,
                    options={"temperature": 0, "num_predict": 40})  # fmt: skip
    assert json.loads(r.message.content)["colour"] in ("red", "blue")


def test_chat_takes_openais_tool_choice_to_force_a_call(ollama_server):
    """Not Ollama's (its model decides): the AI SDK's Ollama provider sends OpenAI's ``tool_choice`` to force one."""
    import json

    weather = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
               "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                              "required": ["city"]}}}  # fmt: skip
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": [weather],
            "tool_choice": {"type": "function", "name": "get_weather"}, "options": {"temperature": 0, "num_predict": 40}}  # fmt: skip
    whole = httpx.post(f"{ollama_server.root}/api/chat", json={**body, "stream": False}, timeout=300).json()
    call = whole["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather" and isinstance(call["arguments"]["city"], str)
    with httpx.stream("POST", f"{ollama_server.root}/api/chat", json={**body, "tool_choice": "required"}, timeout=300) as r:
        lines = [json.loads(x) for x in r.iter_lines() if x]
    calls = [c for x in lines for c in x["message"].get("tool_calls") or ()]
    assert [c["function"]["name"] for c in calls] == ["get_weather"] and lines[-1]["done"]
    bad = httpx.post(f"{ollama_server.root}/api/chat", json={**body, "tool_choice": {"type": "function", "name": "nope"}})
    assert bad.status_code == 400 and "tool_choice" in bad.json()["error"]


def test_sampling_fields_sent_beside_options_are_used_where_options_leave_them_out(ollama_server):
    """The AI SDK's Ollama provider sends ``temperature``, ``top_p`` and ``max_output_tokens`` beside ``options``."""
    ask = {"model": MODEL, "messages": QUESTION, "stream": False}
    plain = httpx.post(f"{ollama_server.root}/api/chat", timeout=300,
                       json={**ask, "options": {"temperature": 0, "num_predict": 5}}).json()  # fmt: skip
    loose = httpx.post(f"{ollama_server.root}/api/chat", timeout=300,
                       json={**ask, "temperature": 0, "top_p": 1, "max_output_tokens": 5}).json()  # fmt: skip
    assert loose["eval_count"] == 5 and loose["message"]["content"] == plain["message"]["content"]
    inner = httpx.post(f"{ollama_server.root}/api/chat", timeout=300,
                       json={**ask, "max_output_tokens": 5, "options": {"temperature": 0, "num_predict": 3}}).json()  # fmt: skip
    assert inner["eval_count"] == 3  # options win


def test_tools_and_a_tool_result_turn(client):
    def get_weather(city: str) -> str:
        """The weather in a city.

        Args:
            city: The city.
        """
        return "Sunny"

    turn = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "Sunny, 24 C.", "tool_name": "get_weather"},
    ]
    r = client.chat(model=MODEL, messages=turn, tools=[get_weather], options=GREEDY, think=False)
    assert r.done and (r.message.content or r.message.tool_calls)
    for call in r.message.tool_calls or ():
        assert call.function.name == "get_weather" and isinstance(call.function.arguments, dict)
    plain = client.chat(model=MODEL, messages=turn[:1], options=GREEDY)
    assert r.prompt_eval_count > plain.prompt_eval_count + 20  # the tools and the earlier call are in the prompt


def test_embed_and_the_older_embeddings(client):
    r = client.embed(model=MODEL, input=["red", "blue"])
    assert len(r.embeddings) == 2 and len(r.embeddings[0]) > 100 and r.prompt_eval_count >= 2
    assert abs(sum(x * x for x in r.embeddings[0]) - 1.0) < 1e-3
    short = client.embed(model=MODEL, input="red", dimensions=64)
    assert len(short.embeddings[0]) == 64 and abs(sum(x * x for x in short.embeddings[0]) - 1.0) < 1e-3
    old = client.embeddings(model=MODEL, prompt="red")
    assert max(abs(a - b) for a, b in zip(old.embedding, r.embeddings[0], strict=True)) < 1e-4


def test_keep_alive_zero_unloads_after_the_answer(client):
    client.chat(model=MODEL, messages=QUESTION, options={"num_predict": 2}, keep_alive=0)
    deadline = time.monotonic() + 15
    while client.ps().models and time.monotonic() < deadline:
        time.sleep(0.2)
    assert client.ps().models == []
    client.generate(model=MODEL, prompt="", keep_alive="10m")
    (entry,) = client.ps().models
    left = entry.expires_at.timestamp() - time.time()
    assert 500 < left <= 600
    unloaded = client.generate(model=MODEL, prompt="", keep_alive=0)
    assert unloaded.done_reason == "unload" and client.ps().models == []


@contextmanager
def _in_process(home: Path):
    """The worker's app in this process on a data folder of its own: (its model manager, a client of it)."""
    from fastapi.testclient import TestClient

    from engine.backends import LoadOptions
    from engine.catalog.registry import ModelRegistry
    from engine.pool import ModelManager
    from engine.server import ServerSettings, create_app

    registry = ModelRegistry(home)
    manager = ModelManager(registry, options=LoadOptions(n_ctx=512, n_seq_max=1))
    try:
        with TestClient(create_app(ServerSettings(), manager), base_url="http://127.0.0.1:8765") as web:
            yield manager, web
    finally:
        manager.close()
        registry.close()


def test_stopping_a_model_that_is_not_loaded_does_not_load_it_first(tmp_path):
    # `ollama stop`: an empty prompt with keep_alive 0; a large model not loaded took its whole load, to be unloaded
    with _in_process(tmp_path) as (manager, web):
        loads = []
        real_load = manager.load
        manager.load = lambda *a, **kw: loads.append(a) or real_load(*a, **kw)  # counted, still the real load
        for path, body in (("/api/generate", {"prompt": ""}), ("/api/chat", {"messages": []})):
            r = web.post(path, json={"model": MODEL, "keep_alive": 0, "stream": False, **body})
            assert r.status_code == 200 and r.json()["done_reason"] == "unload", r.text
        assert loads == [] and manager.loaded() == []
        r = web.post("/api/generate", json={"model": MODEL, "prompt": "", "stream": False})
        assert r.json()["done_reason"] == "load" and len(loads) == 1  # an empty prompt alone loads it, as before


def _expires_in(ollama_server) -> float:
    r = httpx.get(f"{ollama_server.root}/api/ps")
    assert r.status_code == 200, r.text
    (entry,) = r.json()["models"]
    return datetime.fromisoformat(entry["expires_at"].replace("Z", "+00:00")).timestamp() - time.time()


def test_keep_alive_in_every_form_ollama_takes_and_a_huge_one_is_forever(ollama_server):
    """Seconds, Go durations, negative for ever; a number too large for a date is for ever too, and
    /api/ps answers after each (it was a 500 for every client after 1e308)."""
    forever = 200 * 365 * 86_400  # Ollama shows the year 2318
    for value, low, high in [
        (9999999999999, forever, None), (1e308, forever, None), (1e20, forever, None), (-1, forever, None),
        ("-1", forever, None), ("-5m", forever, None), ("1h30m", 5300, 5400), ("5m", 200, 300), (90, 0, 90),
        ("90", 0, 90), (".5h", 1700, 1800),
    ]:  # fmt: skip
        r = httpx.post(f"{ollama_server.root}/api/generate", json={"model": MODEL, "prompt": "", "keep_alive": value})
        assert r.status_code == 200, (value, r.text)
        left = _expires_in(ollama_server)
        assert low < left and (high is None or left <= high), (value, left)
    for raw in (b"NaN", b"Infinity", b"-Infinity", b'"nan"', b'"inf"', b"1e999", b'"soon"', b'""', b'"5 m"'):
        body = b'{"model": "%s", "prompt": "", "keep_alive": %s}' % (MODEL.encode(), raw)
        r = httpx.post(f"{ollama_server.root}/api/generate", content=body)
        assert r.status_code == 400, (raw, r.text)
        message = r.json()["error"]
        assert message.startswith("'keep_alive' must be") and message.endswith(".") and len(message) < 200, message
        assert _expires_in(ollama_server) > 0  # and the model is as it was


def test_create_from_a_hub_model_not_here_pulls_it_first(client):
    lines = list(client.create(model="tiny-brief", from_=f"hf.co/{REPO}:Q2_K", system="Be brief.", stream=True))
    statuses = [line.status for line in lines]
    assert statuses[0] == "pulling manifest" and any(s.startswith("pulling ") and s != "pulling manifest" for s in statuses)
    assert statuses[-2:] == ["writing manifest", "success"] and statuses.count("success") == 1
    try:
        shown = client.show("tiny-brief")
        assert shown.details.parent_model == f"{REPO}:Q2_K" and "SYSTEM Be brief." in shown.modelfile
    finally:
        assert client.delete("tiny-brief").status == "success" and client.delete(f"{REPO}:Q2_K").status == "success"
    with pytest.raises(ollama.ResponseError) as refused:  # a name neither here nor on the Hub: as any unknown model
        client.create(model="nothing", from_="mistral")
    assert refused.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as refused:  # what it asks for is checked before anything is fetched
        client.create(model="nothing", from_=f"hf.co/{REPO}:Q2_K", parameters={"temperature": -1})
    assert refused.value.status_code == 400 and "'parameters.temperature'" in refused.value.error
    assert f"{REPO}:Q2_K" not in [m.model for m in client.list().models]


def test_a_create_from_the_hub_goes_on_when_its_client_leaves(ollama_server, client):
    body = {"model": "left-early", "from": f"hf.co/{REPO}:Q2_K", "system": "Be brief."}
    with httpx.stream("POST", f"{ollama_server.root}/api/create", json=body, timeout=60) as r:
        assert r.status_code == 200
        next(r.iter_lines())  # "pulling manifest", then the client is gone
    deadline = time.monotonic() + 60
    while "left-early:latest" not in [m.model for m in client.list().models] and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        assert client.show("left-early").details.parent_model == f"{REPO}:Q2_K"
    finally:
        client.delete("left-early")
        client.delete(f"{REPO}:Q2_K")


def test_pull_from_the_hub_with_progress_then_delete(client):
    progress = list(client.pull(f"hf.co/{REPO}:Q2_K", stream=True))
    statuses = [p.status for p in progress]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    sized = [p for p in progress if p.total]
    assert sized and sized[-1].completed == sized[-1].total > 100_000 and sized[-1].digest.startswith("sha256:")
    assert any(p.completed < p.total for p in sized), "no progress line before the end"
    name = f"{REPO}:Q2_K"
    assert name in [m.model for m in client.list().models]
    assert client.pull(name).status == "success"  # already here: nothing to fetch
    assert client.show(name).details.quantization_level == "Q2_K"
    assert client.delete(name).status == "success"
    assert name not in [m.model for m in client.list().models]
    with pytest.raises(ollama.ResponseError) as err:
        client.delete(name)
    assert err.value.status_code == 404


def test_a_name_of_ollamas_library_pulls_the_listed_repo_and_then_names_it(client):
    """`ollama pull llama3.2:1b`, as Open WebUI's box and scripts write it (and a Modelfile's FROM): the repo Hearth's
    list has for that model, which then answers to the name it was pulled by (show, pull again, delete), as on
    Ollama."""
    statuses = [line.status for line in client.create(model="lib-brief", from_="llama3.2:1b", system="Be brief.", stream=True)]
    assert statuses[0] == "pulling manifest" and statuses[-2:] == ["writing manifest", "success"]  # a FROM it lacks
    name = f"{LIBRARY_REPO}:Q8_0"
    try:
        assert client.show("lib-brief").details.parent_model == name and client.delete("lib-brief").status == "success"
        assert client.delete("llama3.2:1b").status == "success"
        statuses = [p.status for p in client.pull("llama3.2:1b", stream=True)]
        assert statuses[0] == "pulling manifest" and statuses[-1] == "success" and len(statuses) > 2
        assert name in [m.model for m in client.list().models]
        assert client.show("llama3.2:1b").details.quantization_level == "Q8_0"
        assert client.show("library/llama3.2:1b-instruct-q8_0").details.quantization_level == "Q8_0"
        assert [p.status for p in client.pull("llama3.2:1b", stream=True)] == ["pulling manifest", "success"]  # here
        with pytest.raises(ollama.ResponseError) as err:  # another size of it is another model, not here
            client.show("llama3.2:3b")
        assert err.value.status_code == 404
    finally:
        for left in ("lib-brief", "llama3.2:1b"):
            with contextlib.suppress(ollama.ResponseError):
                client.delete(left)
    assert name not in [m.model for m in client.list().models]


def test_pull_of_what_the_hub_lacks_is_an_ollama_error(client):
    with pytest.raises(ollama.ResponseError) as err:
        client.pull("TheOrg/No-Such-Repo-GGUF:Q4_K_M")
    assert err.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as err:
        client.pull("mistral")  # a name of Ollama's library that Hearth's list has not, and not a Hub repo
    assert err.value.status_code == 400 and "owner/repo" in err.value.error and "Ollama's library" in err.value.error
    # a model Hearth has, by the name /api/tags lists (a script's "make sure it is there"): nothing to fetch
    assert client.pull(MODEL).status == "success" and client.pull(f"{MODEL}:latest").status == "success"
    assert [p.status for p in client.pull(MODEL, stream=True)] == ["pulling manifest", "success"]


def test_the_ollama_port_serves_the_same_api(ollama_server):
    other = ollama.Client(host=f"http://127.0.0.1:{ollama_server.ollama_port}", timeout=300)
    assert f"{MODEL}:latest" in [m.model for m in other.list().models]
    assert httpx.get(f"http://127.0.0.1:{ollama_server.ollama_port}/api/version").json()["version"]
    assert httpx.get(f"http://127.0.0.1:{ollama_server.ollama_port}/").status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/api/chat", {"model": "no-such-model", "messages": QUESTION}, 404),
        ("/api/chat", {"model": MODEL, "messages": QUESTION, "options": {"temperature": "hot"}}, 400),
        ("/api/chat", {"model": MODEL, "messages": QUESTION, "options": {"num_predict": "ten"}}, 400),
        ("/api/generate", {"model": MODEL, "prompt": "hi", "options": {"stop": 5}}, 400),
        ("/api/generate", {"model": MODEL, "prompt": "hi", "options": {"stop": {"a": "b"}}}, 400),
        ("/api/chat", {"model": MODEL, "messages": QUESTION, "keep_alive": "soon"}, 400),
        ("/api/chat", {"model": MODEL, "messages": QUESTION, "format": "yaml"}, 400),
        ("/api/chat", {"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}, 400),
        ("/api/chat", {"model": MODEL, "messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]}, 400),
        ("/api/chat", {"messages": QUESTION}, 400),
        ("/api/generate", {"model": MODEL, "prompt": 5}, 400),
        ("/api/chat", {"model": MODEL, "messages": QUESTION, "tools": [{"type": "function", "function": {}}]}, 400),
        ("/api/chat", {"model": MODEL, "messages": QUESTION, "think": "deeply"}, 400),
        ("/api/embed", {"model": MODEL, "input": []}, 400),
        ("/api/show", {}, 400),
        ("/api/show", {"model": "no-such-model"}, 404),
    ],
)
def test_bad_requests_get_ollamas_error_shape_never_a_500(ollama_server, path, body, status):
    r = httpx.post(f"{ollama_server.root}{path}", json=body, timeout=300)
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error"} and r.json()["error"].endswith(".")


def test_a_body_sent_as_curl_sends_it_is_read_as_json(ollama_server):
    r = httpx.post(f"{ollama_server.root}/api/show", content=b'{"model": "%s"}' % MODEL.encode(),
                   headers={"content-type": "application/x-www-form-urlencoded"})  # fmt: skip
    assert r.status_code == 200 and r.json()["details"]["format"] == "gguf"
    bad = httpx.post(f"{ollama_server.root}/api/show", content=b"{nope")
    assert bad.status_code == 400 and "error" in bad.json()


def test_with_a_key_ollamas_clients_send_it_as_a_bearer_token(server):
    refused = httpx.get(f"{server.root}/api/tags")
    assert refused.status_code == 401 and set(refused.json()) == {"error"}
    keyed = ollama.Client(host=server.root, headers={"Authorization": f"Bearer {server.api_key}"})
    assert f"{MODEL}:latest" in [m.model for m in keyed.list().models]


def test_a_conversation_longer_than_the_context_leaves_out_its_oldest_messages_as_ollama_does(client, ollama_server):
    """Open WebUI and other Ollama clients send the whole chat each turn and rely on Ollama cutting it: the oldest
    messages go (system messages stay, the last always), leaving a quarter of the context (1,024) for the answer, or
    ``num_predict`` tokens if fewer."""
    system = {"role": "system", "content": "You are a helpful assistant who answers briefly."}
    turns = []
    for i in range(40):
        turns.append({"role": "user", "content": f"Tell me fact number {i} about the sea, the tides and the moon."})
        turns.append({"role": "assistant", "content": f"Fact {i}: the moon's pull raises the tides twice a day, everywhere."})
    messages = [system, *turns, QUESTION[0]]
    r = client.chat(model=MODEL, messages=messages, options=GREEDY)
    assert r.done and 950 < r.prompt_eval_count <= 1024 - 8  # as many of the latest messages as fit
    roomy = client.chat(model=MODEL, messages=messages, options={**GREEDY, "num_predict": 300})
    assert 700 < roomy.prompt_eval_count <= 1024 - 256
    streamed = list(client.chat(model=MODEL, messages=messages, options=GREEDY, stream=True))
    assert streamed[-1].prompt_eval_count == r.prompt_eval_count
    # the same request with truncate off is the 400 it was
    body = {"model": MODEL, "messages": messages, "stream": False, "truncate": False, "options": GREEDY}
    refused = httpx.post(ollama_server.root + "/api/chat", json=body, timeout=600)
    assert refused.status_code == 400 and "context" in refused.json()["error"]


def test_a_last_message_longer_than_the_context_loses_its_beginning_as_ollamas_runner_cuts_it(client, ollama_server):
    """A pasted text longer than the context is answered, as Ollama answers it: the prompt keeps its end (the
    question after the text) within the context, room left for the answer; ``truncate`` false is a 400."""
    system = {"role": "system", "content": "You are a helpful assistant who answers briefly."}
    end = " ".join(f"Line {i}: the tide comes in." for i in range(100)) + "\nWhich line came last? Answer with its number."
    answers = []
    for start in ("red blue " * 300, "blue red " * 300):  # lost either way: the answers are the same
        r = client.chat(model=MODEL, messages=[system, {"role": "user", "content": start + end}], options=GREEDY)
        assert r.done and 900 < r.prompt_eval_count <= 1024 - 8, r.prompt_eval_count  # room left for num_predict
        answers.append((r.prompt_eval_count, r.message.content))
    assert answers[0] == answers[1]
    dense = "The quick brown fox jumps over the lazy dog. " * 200 + "これは長い日本語の文章です。猫が窓の外を見ています。" * 60
    said = client.generate(model=MODEL, prompt=dense, options=GREEDY)  # the end holds many more tokens a character
    assert said.done and 900 < said.prompt_eval_count <= 1024 - 8
    for path, body in (("/api/chat", {"messages": [{"role": "user", "content": "sea " * 1500}]}),
                       ("/api/generate", {"prompt": "sea " * 1500})):  # fmt: skip
        refused = httpx.post(ollama_server.root + path, json={"model": MODEL, "stream": False, "truncate": False,
                                                              "options": GREEDY, **body}, timeout=120)  # fmt: skip
        assert refused.status_code == 400 and "context" in refused.json()["error"], path


def test_logprobs_come_with_each_lines_tokens_as_ollama_gives_them(client):
    """``logprobs`` and ``top_logprobs`` (Ollama 0.12.11's): every token of the answer with its log-probability,
    streamed with its line or whole at the end; the same tokens the text is made of."""
    whole = client.chat(model=MODEL, messages=QUESTION, options=GREEDY, logprobs=True, top_logprobs=2)
    assert "".join(lp.token for lp in whole.logprobs) == whole.message.content and len(whole.logprobs) == 8
    assert all(lp.logprob <= 0 and len(lp.top_logprobs) == 2 for lp in whole.logprobs)
    lines = list(client.generate(model=MODEL, prompt="Name three colours.", options=GREEDY, logprobs=True, stream=True))
    tokens = [lp.token for line in lines for lp in (line.logprobs or ())]
    assert "".join(tokens) == "".join(line.response for line in lines) and len(tokens) == 8
    assert client.chat(model=MODEL, messages=QUESTION, options=GREEDY).logprobs is None  # not asked for


def test_a_last_assistant_message_is_gone_on_with_as_ollama_does(client):
    story = [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}]
    whole = client.chat(model=MODEL, messages=story, options={**GREEDY, "num_predict": 16}).message.content
    begun = client.chat(model=MODEL, messages=story, options=GREEDY).message.content
    went_on = client.chat(model=MODEL, messages=[*story, {"role": "assistant", "content": begun}], options=GREEDY)
    assert went_on.message.role == "assistant" and begun + went_on.message.content == whole


def test_a_character_made_of_several_tokens_keeps_every_tokens_logprob(client):
    """An emoji is four bytes, one token each: each token's log-probability comes with the line of its character
    (none was dropped for coming with no text of its own)."""
    emoji = [{"role": "user", "content": "Write three emoji"}]
    options = {"temperature": 0, "num_predict": 12}
    whole = client.chat(model=MODEL, messages=emoji, options=options, logprobs=True)
    assert any(len(ch.encode()) > 1 for ch in whole.message.content)  # the starter writes 🌟 byte by byte
    assert len(whole.logprobs) == whole.eval_count == 12
    lines = list(client.chat(model=MODEL, messages=emoji, options=options, logprobs=True, stream=True))
    assert sum(len(line.logprobs or ()) for line in lines) == 12


def test_what_ollamas_go_decoder_reads_as_left_out_is_read_so_here(client, ollama_server):
    # a JS client or a proxy that passes nulls on: Ollama's Go decoder leaves such a field at its default
    root = ollama_server.root
    nulls = {"stream": None, "truncate": None, "logprobs": None, "format": None, "think": None, "keep_alive": None}
    r = httpx.post(f"{root}/api/chat", json={"model": MODEL, "messages": QUESTION, "options": GREEDY, **nulls}, timeout=120)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")  # streamed
    assert r.text.strip().splitlines()[-1].startswith('{"model"') and '"done":true' in r.text
    r = httpx.post(f"{root}/api/generate", json={"model": MODEL, "prompt": None, "raw": None, "stream": False}, timeout=120)
    assert r.status_code == 200 and r.json()["done_reason"] == "load"
    r = httpx.post(f"{root}/api/show", json={"model": MODEL, "verbose": None}, timeout=60)
    assert r.status_code == 200 and "model_info" in r.json()
    r = httpx.post(f"{root}/api/chat", json={"model": None, "messages": QUESTION}, timeout=60)
    assert r.status_code == 400 and r.json()["error"].startswith("'model'")  # required, and said so
    # Ollama's default options as its clients send them whole: threads 0 and GPU layers -1 leave the runtime to
    # decide (no reload, no refusal)
    answer = client.chat(model=MODEL, messages=QUESTION, options={**GREEDY, "num_thread": 0, "num_gpu": -1})
    assert answer.done and answer.message.content
    answer = client.chat(model=MODEL, messages=QUESTION, options={**GREEDY, "num_thread": 0.0, "num_gpu": -1.0})
    assert answer.done  # as Go reads a whole number written with a point


def test_any_path_under_api_that_is_not_hearths_own_answers_in_ollamas_shape(client, ollama_server):
    for path in ("/api/me", "/api/chat/extra", "/api"):
        r = httpx.get(ollama_server.root + path, timeout=10)
        assert r.status_code in (404, 405) and isinstance(r.json()["error"], str), (path, r.text)
    with pytest.raises(ollama.ResponseError) as missing:
        client._request_raw("POST", "/api/experimental")  # a newer Ollama's endpoint, through the client
    assert missing.value.status_code == 404 and isinstance(missing.value.error, str)
    # Hearth's own routes keep OpenAI's shape, which the app reads
    r = httpx.get(ollama_server.root + "/api/models/x/nothing-here", timeout=10)
    assert r.status_code in (404, 405) and isinstance(r.json()["error"], dict)


def test_an_option_out_of_range_is_named_as_the_client_sent_it(ollama_server):
    for option, value in (("repeat_penalty", 0), ("repeat_last_n", -5), ("temperature", -1)):
        r = httpx.post(f"{ollama_server.root}/api/generate", timeout=60,
                       json={"model": MODEL, "prompt": "hi", "stream": False, "options": {option: value}})  # fmt: skip
        assert r.status_code == 400 and r.json()["error"].startswith(f"'options.{option}' must be"), r.text
    # one sent beside options (the AI SDK's way), as it was sent
    r = httpx.post(f"{ollama_server.root}/api/generate", timeout=60,
                   json={"model": MODEL, "prompt": "hi", "stream": False, "temperature": -1})  # fmt: skip
    assert r.status_code == 400 and r.json()["error"] == "'temperature' must be 0 or more, got -1.", r.text


def test_a_temperature_over_openais_two_is_taken_as_ollama_takes_it(ollama_server):
    # Ollama (and llama-server) put no upper bound on it; a creative preset of a chat front end sends 2.5 or more
    for body in ({"options": {"temperature": 4.5, "seed": 3, "num_predict": 6}},
                 {"temperature": 4.5, "options": {"seed": 3, "num_predict": 6}}):  # fmt: skip
        r = httpx.post(f"{ollama_server.root}/api/generate", timeout=60,
                       json={"model": MODEL, "prompt": "Name a colour.", "stream": False, **body})  # fmt: skip
        assert r.status_code == 200 and r.json()["eval_count"] == 6, r.text


def test_a_value_of_no_type_a_field_takes_is_refused_saying_which_it_takes(ollama_server):
    for path, body, said in (
        ("/api/generate", {"prompt": "", "keep_alive": True}, "'keep_alive' must be a number or a string."),
        ("/api/chat", {"messages": [], "keep_alive": [1]}, "'keep_alive' must be a number or a string."),
        ("/api/embed", {"input": 5}, "'input' must be a string or a list."),
        ("/api/chat", {"messages": [], "think": [1]}, "'think' must be a boolean or a string."),
    ):  # fmt: skip
        r = httpx.post(f"{ollama_server.root}{path}", json={"model": MODEL, **body}, timeout=60)
        assert r.status_code == 400 and r.json()["error"] == said, r.text
    # an object's keys are no member's kinds: the value's own words ('logit_bias' is an object)
    r = httpx.post(f"{ollama_server.root}/v1/chat/completions", timeout=60,
                   json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "logit_bias": {"Foo": "x"}})  # fmt: skip
    assert r.status_code == 400 and "must be an object" not in r.json()["error"]["message"], r.text


def test_malformed_message_parts_are_refused_saying_what_is_wrong(ollama_server):
    for message, said in (({"role": "assistant", "content": "", "tool_calls": "x"}, "messages[0].tool_calls must be a list"),
                          ({"role": "assistant", "content": "", "tool_calls": {}}, "messages[0].tool_calls must be a list"),
                          ({"role": "user", "content": "hi", "images": ["@@@"]}, "messages[0].images[0] is not valid base64")):  # fmt: skip
        r = httpx.post(f"{ollama_server.root}/api/chat", json={"model": MODEL, "messages": [message]}, timeout=60)
        assert r.status_code == 400 and r.json()["error"].startswith(said), r.text


def test_the_starter_removed_is_pulled_back_from_the_package(tmp_path):
    from engine.starter import starter_model_path

    with _in_process(tmp_path) as (_, web):
        assert web.request("DELETE", "/api/delete", json={"model": MODEL}).status_code == 200
        assert starter_model_path().is_file()  # the package's file stays
        assert f"{MODEL}:latest" not in [m["name"] for m in web.get("/api/tags").json()["models"]]
        r = web.post("/api/pull", json={"model": MODEL, "stream": False})
        assert r.status_code == 200 and r.json() == {"status": "success"}, r.text
        assert f"{MODEL}:latest" in [m["name"] for m in web.get("/api/tags").json()["models"]]
        r = web.post("/api/pull", json={"model": "no-such-model", "stream": False})
        assert r.status_code == 400  # another name that is no repo is still refused


def test_the_names_api_tags_lists_are_taken_in_every_dialect(ollama_server):
    # a client that lists models with /api/tags (name:latest) and chats through /v1, as Open WebUI and LiteLLM do
    root, tagged = ollama_server.root, f"{MODEL}:latest"
    hi = [{"role": "user", "content": "Hi"}]
    for path, body in (("/v1/chat/completions", {"messages": hi, "max_tokens": 2}),
                       ("/v1/completions", {"prompt": "Hi", "max_tokens": 2}),
                       ("/v1/messages", {"messages": hi, "max_tokens": 2}),
                       ("/v1/responses", {"input": "Hi", "max_output_tokens": 16}),
                       ("/v1/embeddings", {"input": "Hi"})):  # fmt: skip
        for name in (tagged, f"hf.co/{tagged}", f"HF.CO/{MODEL}:LATEST"):
            r = httpx.post(f"{root}{path}", json={"model": name, "temperature": 0, **body}, timeout=120)
            assert r.status_code == 200, (path, name, r.text)
    assert httpx.get(f"{root}/v1/models/{tagged}", timeout=30).status_code == 200
    r = httpx.post(f"{root}/v1/chat/completions", json={"model": "no-such:latest", "messages": hi}, timeout=30)
    assert r.status_code == 404  # a tag on an unknown name is still unknown
