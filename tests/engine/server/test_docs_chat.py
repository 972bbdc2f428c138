"""Chat with documents in one request (the ``hearth`` extension): every dialect, through its official
client, against the session's `hearth serve` with collections indexed by its own /api/docs (the default
all-MiniLM embedding model)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import anthropic
import httpx
import ollama
import openai
import pytest

from engine.server.api_models import ChatDocuments
from tests.engine.server.conftest import MODEL

pytestmark = pytest.mark.slow

QUEEN = "What is the queen of the hive called?"
GREEDY = {"temperature": 0, "max_tokens": 12}
LABELS = ["[1] bees.md, Bees", "[2] boat.md, Boat"]


def _wait(api: httpx.Client, name: str, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = api.get(f"/api/docs/collections/{name}").json()
        progress = body["progress"]
        if progress and progress["phase"] in ("done", "failed", "cancelled"):
            assert progress["phase"] == "done", progress
            return body
        time.sleep(0.2)
    raise AssertionError(f"indexing {name} did not finish")


@pytest.fixture(scope="module")
def api(server):
    with httpx.Client(base_url=server.root, headers=server.headers, timeout=300) as client:
        yield client


def _collection(api: httpx.Client, folder: Path, prefix: str):
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    r = api.post("/api/docs/collections", json={"name": name, "paths": [str(folder)]})
    assert r.status_code == 202, r.text
    _wait(api, name)
    return name


@pytest.fixture(scope="module")
def home(api, tmp_path_factory):
    """A small collection: both files fit the default budget whole, so the sources are known in order."""
    folder = tmp_path_factory.mktemp("docs-chat-home")
    (folder / "bees.md").write_text(
        "# Bees\n\nThe hive is inspected every nine days in swarming season. The queen of the hive is called Marigold.\n"
    )
    (folder / "boat.md").write_text("# Boat\n\nThe sailing boat Pelican is moored at the north jetty.\n")
    name = _collection(api, folder, "chat-home")
    yield name
    api.delete(f"/api/docs/collections/{name}")


def _lighthouses(folder: Path) -> Path:
    """40 sections of about 1,000 characters: 40 chunks, some 10,000 tokens."""
    sections = []
    for i in range(40):
        sentences = " ".join(
            f"Lighthouse {i} stands on rock {i * 7 + j} and its keeper lights lamp {j} at dusk." for j in range(12)
        )
        sections.append(f"## Lighthouse {i}\n\n{sentences}\n")
    (folder / "lighthouses.md").write_text("# Lighthouses\n\n" + "\n".join(sections))
    return folder


@pytest.fixture(scope="module")
def library(api, tmp_path_factory):
    """A collection far larger than the server's 2,048-token context."""
    name = _collection(api, _lighthouses(tmp_path_factory.mktemp("docs-chat-library")), "chat-library")
    yield name
    api.delete(f"/api/docs/collections/{name}")


def _labels(hearth: dict) -> list[str]:
    return [s["label"] for s in hearth["sources"]]


def test_chat_completions_answer_from_a_collection_and_name_the_sources_first(server, home):
    client = server.client()
    asked = {"hearth": {"collections": [home]}}
    messages = [{"role": "user", "content": QUEEN}]
    answer = client.chat.completions.create(model=MODEL, messages=messages, **GREEDY, extra_body=asked)
    hearth = answer.model_extra["hearth"]
    assert hearth["collections"] == [home] and hearth["whole_documents"] is True
    assert ChatDocuments.model_validate(hearth).indexing == []  # the shape the app reads
    assert _labels(hearth) == LABELS
    bees = hearth["sources"][0]
    assert bees["uri"].startswith("file://") and bees["uri"].endswith("bees.md") and "Marigold" in bees["text"]
    assert "Marigold" in answer.choices[0].message.content  # a fact only the document holds

    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, stream=True, **GREEDY, extra_body=asked))
    assert chunks[0].model_extra["hearth"] == hearth  # before any text
    assert not chunks[0].choices[0].delta.content
    assert all("hearth" not in c.model_extra for c in chunks[1:])
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer.choices[0].message.content


def test_the_prompt_holds_the_context_as_the_app_put_it_in_the_system_prompt(server, api, home):
    """The grounded prompt is the one the app built from /api/docs/context: the same tokens and the same
    greedy answer as sending that context by hand, with and without a system prompt of its own."""
    client = server.client()
    plain = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUEEN}], **GREEDY)
    assert "Marigold" not in plain.choices[0].message.content
    for system in (None, "You answer in one sentence."):
        head = [{"role": "system", "content": system}] if system else []
        messages = [*head, {"role": "user", "content": QUEEN}]
        grounded = client.chat.completions.create(
            model=MODEL, messages=messages, **GREEDY, extra_body={"hearth": {"collections": [home]}}
        )
        budget = grounded.model_extra["hearth"]["budget_tokens"]
        ctx = api.post("/api/docs/context", json={"collections": [home], "question": QUEEN, "budget_tokens": budget}).json()
        by_hand = [{"role": "system", "content": f"{system}\n\n{ctx['system']}" if system else ctx["system"]}]
        manual = client.chat.completions.create(model=MODEL, messages=[*by_hand, messages[-1]], **GREEDY)
        assert grounded.usage.prompt_tokens == manual.usage.prompt_tokens > plain.usage.prompt_tokens + 30
        assert grounded.choices[0].message.content == manual.choices[0].message.content


def test_responses_carry_the_sources_on_the_response_object_from_response_created(server, home):
    client = server.client()
    asked = {"extra_body": {"hearth": {"collections": [home]}}}
    resp = client.responses.create(model=MODEL, input=QUEEN, max_output_tokens=12, temperature=0, **asked)
    assert _labels(resp.model_extra["hearth"]) == LABELS
    assert "Marigold" in resp.output_text
    assert resp.instructions is None  # the echo is the client's own, not the context
    assert client.responses.retrieve(resp.id).model_extra["hearth"] == resp.model_extra["hearth"]

    events = list(client.responses.create(model=MODEL, input=QUEEN, max_output_tokens=12, temperature=0, stream=True, **asked))
    assert events[0].type == "response.created"
    assert events[0].response.model_extra["hearth"] == resp.model_extra["hearth"]
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert events[-1].response.output_text == resp.output_text


def test_anthropic_messages_carry_the_sources_on_the_message_from_message_start(server, home):
    claude = anthropic.Anthropic(base_url=server.root, api_key=server.api_key, max_retries=0, timeout=300)
    asked = {"extra_body": {"temperature": 0, "hearth": {"collections": [home]}}}
    messages = [{"role": "user", "content": QUEEN}]
    msg = claude.messages.create(model=MODEL, max_tokens=12, messages=messages, system="Be brief.", **asked)
    assert _labels(msg.model_extra["hearth"]) == LABELS
    assert "Marigold" in msg.content[0].text

    with claude.messages.stream(model=MODEL, max_tokens=12, messages=messages, system="Be brief.", **asked) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert events[0].type == "message_start"
    assert events[0].message.model_extra["hearth"] == msg.model_extra["hearth"]
    assert final.content[0].text == msg.content[0].text


def test_ollama_chat_and_generate_carry_the_sources_on_the_first_line(server, home):
    client = ollama.Client(host=server.root, headers=server.headers, timeout=300)
    asked = {"hearth": {"collections": [home]}}
    options = {"temperature": 0, "num_predict": 12}
    # Ollama's client has no argument for an extension field: its own request path with the body it builds, plus one
    chat = {"model": MODEL, "messages": [{"role": "user", "content": QUEEN}], "options": options, **asked}
    answer = client._request(ollama.ChatResponse, "POST", "/api/chat", json={**chat, "stream": False})
    assert answer.done and "Marigold" in answer.message.content
    parts = list(client._request(ollama.ChatResponse, "POST", "/api/chat", json={**chat, "stream": True}, stream=True))
    assert parts[-1].done and "".join(p.message.content for p in parts) == answer.message.content

    with httpx.stream("POST", f"{server.root}/api/chat", json=chat, headers=server.headers, timeout=300) as r:
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert _labels(lines[0]["hearth"]) == LABELS and lines[0]["message"]["content"] == "" and not lines[0]["done"]
    assert all("hearth" not in line for line in lines[1:])
    whole = httpx.post(f"{server.root}/api/chat", json={**chat, "stream": False}, headers=server.headers, timeout=300)
    assert whole.json()["hearth"] == lines[0]["hearth"] and whole.json()["message"]["content"] == answer.message.content

    generate = {"model": MODEL, "prompt": QUEEN, "options": options, "stream": False, **asked}
    said = client._request(ollama.GenerateResponse, "POST", "/api/generate", json=generate)
    assert "Marigold" in said.response
    raw = httpx.post(f"{server.root}/api/generate", json=generate, headers=server.headers, timeout=300).json()
    assert _labels(raw["hearth"]) == LABELS


def test_an_unknown_collection_is_a_400_that_names_it_in_every_dialect(server, home):
    said = f"There is no document collection named 'nope-{home}'; name one that GET /api/docs/collections lists."
    asked = {"hearth": {"collections": [home, f"nope-{home}"]}}
    messages = [{"role": "user", "content": QUEEN}]
    with pytest.raises(openai.BadRequestError) as chat:
        server.client().chat.completions.create(model=MODEL, messages=messages, max_tokens=4, extra_body=asked)
    assert chat.value.status_code == 400 and chat.value.body["message"] == said
    assert chat.value.body["param"] == "hearth.collections"
    with pytest.raises(openai.BadRequestError) as resp:
        server.client().responses.create(model=MODEL, input=QUEEN, stream=True, extra_body=asked)
    assert resp.value.status_code == 400 and resp.value.body["message"] == said
    claude = anthropic.Anthropic(base_url=server.root, api_key=server.api_key, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as msg:
        claude.messages.create(model=MODEL, max_tokens=4, messages=messages, extra_body=asked)
    assert msg.value.body["error"]["message"] == said
    r = httpx.post(f"{server.root}/api/chat", json={"model": MODEL, "messages": messages, **asked}, headers=server.headers)
    assert r.status_code == 400 and r.json() == {"error": said}

    # a single name where a list belongs: the shape is said
    body = {"model": MODEL, "messages": messages, "hearth": {"collections": home}}
    r = httpx.post(f"{server.base_url}/chat/completions", json=body, headers=server.headers)
    assert r.status_code == 400 and "'hearth.collections' must be a list of collection names" in r.json()["error"]["message"]


def test_the_context_is_cut_to_fit_the_models_context(server, api, library):
    """Far more asked than the 2,048-token context holds beside a long answer: the passages that fit."""
    asked = {"hearth": {"collections": [library], "budget_tokens": 200_000, "k": 50}}
    question = "Which keeper lights lamp 3 on rock 45?"
    # 1,200 tokens kept for the answer leave a few hundred for the context; the first sentence ends it
    answer = server.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": question}], temperature=0, max_tokens=1200, stop=[".", "\n"],
        extra_body=asked,
    )  # fmt: skip
    hearth = answer.model_extra["hearth"]
    assert hearth["whole_documents"] is False
    assert 1 < len(hearth["sources"]) and 100 < hearth["budget_tokens"] < (2048 - 1200) * 0.75
    assert sum(len(s["text"]) for s in hearth["sources"]) // 4 <= hearth["budget_tokens"]
    assert answer.usage.prompt_tokens + 1200 <= 2048
    unbounded = api.post("/api/docs/context", json={"collections": [library], "question": question, "budget_tokens": 200_000, "k": 50})
    assert len(unbounded.json()["sources"]) > len(hearth["sources"])  # what the cap left out


def test_without_collections_the_answer_is_unchanged(server):
    client = server.client()
    messages = [{"role": "user", "content": QUEEN}]
    plain = client.chat.completions.create(model=MODEL, messages=messages, **GREEDY)
    for extension in ({}, {"collections": []}):
        same = client.chat.completions.create(model=MODEL, messages=messages, **GREEDY, extra_body={"hearth": extension})
        assert "hearth" not in same.model_extra
        assert same.choices[0].message.content == plain.choices[0].message.content
        assert same.usage.prompt_tokens == plain.usage.prompt_tokens
    first = next(iter(client.chat.completions.create(model=MODEL, messages=messages, stream=True, **GREEDY)))
    assert "hearth" not in first.model_extra


def test_a_collection_still_indexing_answers_from_what_is_indexed_and_says_so(server, api, tmp_path):
    name = f"chat-indexing-{uuid.uuid4().hex[:8]}"
    r = api.post("/api/docs/collections", json={"name": name, "paths": [str(_lighthouses(tmp_path))]})
    assert r.status_code == 202, r.text
    try:
        assert api.post(f"/api/docs/collections/{name}/pause").status_code == 200  # 40 passages take seconds to embed
        answer = server.client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Which keeper lights lamp 3?"}], temperature=0, max_tokens=4,
            extra_body={"hearth": {"collections": [name]}},
        )  # fmt: skip
        hearth = answer.model_extra["hearth"]
        assert hearth["indexing"] == [name]
        indexed = api.get(f"/api/docs/collections/{name}").json()["chunks"]
        assert len(hearth["sources"]) <= max(indexed, 1) and answer.choices[0].message.content
    finally:
        api.delete(f"/api/docs/collections/{name}")
