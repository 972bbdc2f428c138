"""OpenAI's Conversations API on Hearth's port: the official client's conversations and their items, a response
that reads a conversation and adds to it, and the openai-agents SDK keeping its turns in one; every object
validated against OpenAI's spec."""

from __future__ import annotations

import httpx
import openai
import pytest

from engine.server.conversation_store import ConversationFull, ConversationStore
from tests.engine.server.conftest import MODEL


def sdk(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=600)


def user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_a_conversation_and_its_items_as_the_sdk_reads_them(server, openai_schemas):
    client = sdk(server)
    conv = client.conversations.create(items=[user("My cat is called Tom.")], metadata={"topic": "pets"})
    raw = httpx.get(f"{server.base_url}/conversations/{conv.id}", headers=server.headers).json()
    openai_schemas("ConversationResource", raw)
    assert conv.id.startswith("conv_") and raw["metadata"] == {"topic": "pets"} and raw["object"] == "conversation"

    added = client.conversations.items.create(conv.id, items=[user("And my dog is Rex."), user("Tell me a story.")])
    assert [i.type for i in added.data] == ["message", "message"] and added.first_id == added.data[0].id
    listing = httpx.get(f"{server.base_url}/conversations/{conv.id}/items", headers=server.headers).json()
    openai_schemas("ConversationItemList", listing)
    texts = [item["content"][0]["text"] for item in listing["data"]]
    assert texts == ["Tell me a story.", "And my dog is Rex.", "My cat is called Tom."]  # newest first by default
    first = client.conversations.items.list(conv.id, order="asc", limit=2)
    assert [i.content[0].text for i in first.data] == ["My cat is called Tom.", "And my dog is Rex."]
    assert first.has_more
    rest = client.conversations.items.list(conv.id, order="asc", after=first.data[-1].id)
    assert [i.content[0].text for i in rest.data] == ["Tell me a story."] and not rest.has_more
    assert [i.content[0].text for i in client.conversations.items.list(conv.id, order="asc")] == [
        "My cat is called Tom.", "And my dog is Rex.", "Tell me a story."]  # fmt: skip  (the SDK pages through them)

    one = client.conversations.items.retrieve(first.data[1].id, conversation_id=conv.id)
    assert one.id == first.data[1].id and one.content[0].text == "And my dog is Rex."
    left = client.conversations.items.delete(first.data[1].id, conversation_id=conv.id)
    assert left.id == conv.id
    assert [i.content[0].text for i in client.conversations.items.list(conv.id, order="asc")] == [
        "My cat is called Tom.", "Tell me a story."]  # fmt: skip

    updated = client.conversations.update(conv.id, metadata={"topic": "animals"})
    assert updated.metadata == {"topic": "animals"} and client.conversations.retrieve(conv.id).metadata == {"topic": "animals"}
    gone = httpx.delete(f"{server.base_url}/conversations/{conv.id}", headers=server.headers).json()
    openai_schemas("DeletedConversationResource", gone)
    assert gone == {"id": conv.id, "object": "conversation.deleted", "deleted": True}
    with pytest.raises(openai.NotFoundError, match="not found"):
        client.conversations.retrieve(conv.id)


def test_a_response_reads_its_conversation_then_adds_its_input_and_output(server, openai_schemas):
    client = sdk(server)
    history = [user("My name is Ada."), {"type": "message", "role": "assistant", "content": "Hello Ada."}]
    conv = client.conversations.create(items=history)
    ask = "What is my name?"
    resp = client.responses.create(model=MODEL, conversation=conv.id, input=ask, temperature=0, max_output_tokens=12)
    raw = resp.model_dump(mode="json", exclude_unset=True)
    openai_schemas("Response", raw)
    assert raw["conversation"] == {"id": conv.id}
    # the same items sent whole give the same prompt
    whole = client.responses.create(model=MODEL, input=[*history, user(ask)], temperature=0, max_output_tokens=12)
    assert resp.usage is not None and whole.usage is not None and resp.usage.input_tokens == whole.usage.input_tokens
    assert getattr(whole, "conversation", None) is None

    items = client.conversations.items.list(conv.id, order="asc").data
    for item in items:
        openai_schemas("ConversationItem", item.model_dump(mode="json", exclude_unset=True))
    assert [(i.type, i.role) for i in items] == [("message", "user"), ("message", "assistant"), ("message", "user"),
                                                 ("message", "assistant")]  # fmt: skip
    assert items[2].content[0].text == ask and items[3].content[0].text == resp.output_text
    assert items[3].id == resp.output[0].id

    # the object form, streamed: the next turn reads all four items
    with client.responses.stream(model=MODEL, conversation={"id": conv.id}, input="Thanks.", temperature=0,
                                 max_output_tokens=4) as stream:  # fmt: skip
        final = [e.response for e in stream if e.type in ("response.completed", "response.incomplete")][-1]
    assert final.usage is not None and resp.usage is not None and final.usage.input_tokens > resp.usage.input_tokens
    assert len(client.conversations.items.list(conv.id).data) == 6


def test_what_cannot_be_done_with_a_conversation_is_one_clear_error(server):
    client = sdk(server)
    conv = client.conversations.create()
    with pytest.raises(openai.NotFoundError, match="conv_missing"):
        client.responses.create(model=MODEL, conversation="conv_missing", input="Hi.", max_output_tokens=2)
    first = client.responses.create(model=MODEL, input="Hi.", max_output_tokens=2, temperature=0)
    with pytest.raises(openai.BadRequestError, match="cannot be used together"):
        client.responses.create(model=MODEL, conversation=conv.id, previous_response_id=first.id, input="Hi.", max_output_tokens=2)
    for field, value in [("prompt", {"id": "pmpt_123"}), ("prompt", "pmpt_123"), ("conversation", 7), ("conversation", {})]:
        r = httpx.post(f"{server.base_url}/responses", headers=server.headers, timeout=60,
                       json={"model": MODEL, field: value, "input": "Hi."})  # fmt: skip
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
        assert r.json()["error"]["message"].startswith(("Stored prompts", "'conversation' must be"))

    too_many = [user(str(i)) for i in range(21)]
    with pytest.raises(openai.BadRequestError, match="At most 20 items"):
        client.conversations.items.create(conv.id, items=too_many)
    for bad, needle in [({"type": "message", "role": "robot", "content": "x"}, "items[0].role"),
                        ({"type": "web_search_call"}, "items[0] has type"), ("text", "items[0] must be an item"),
                        ({**user("x"), "id": 5}, "items[0].id must be text"),
                        ({"type": "message", "role": "user", "content": [{"type": "input_text", "text": 5}]},
                         "items[0].content[0].text must be text"),
                        ({"type": "function_call_output", "call_id": "c", "output": {"a": 1}}, "items[0].output must be")]:  # fmt: skip
        r = httpx.post(f"{server.base_url}/conversations/{conv.id}/items", headers=server.headers, json={"items": [bad]})
        assert r.status_code == 400 and needle in r.json()["error"]["message"] and r.json()["error"]["param"] == "items"
    r = httpx.post(f"{server.base_url}/conversations", headers=server.headers, json={"metadata": {str(i): "v" for i in range(17)}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "metadata"
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.create("conv_missing", items=[user("Hi.")])
    with pytest.raises(openai.NotFoundError, match="no item"):
        client.conversations.items.retrieve("msg_missing", conversation_id=conv.id)
    assert client.conversations.items.list(conv.id).data == []  # nothing refused was kept
    # a call's arguments given as an object are kept as JSON text, as OpenAI's are
    call = {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": {"a": 1}}
    kept = client.conversations.items.create(conv.id, items=[call]).data[0]
    assert kept.type == "function_call" and kept.arguments == '{"a": 1}' and kept.status == "completed"


def _one_word_agent(agents, server):
    """An openai-agents Agent on the Responses API of ``server`` that answers in a word (greedy), and its client."""
    agents.set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=600)
    agent = agents.Agent(name="helper", instructions="Answer in one word.",
                         model=agents.OpenAIResponsesModel(model=MODEL, openai_client=client),
                         model_settings=agents.ModelSettings(temperature=0, max_tokens=100))  # fmt: skip
    return agent, client


def test_the_openai_agents_sdk_keeps_its_turns_in_a_conversation(server):
    agents = pytest.importorskip("agents")
    agent, _ = _one_word_agent(agents, server)
    conv = sdk(server).conversations.create()
    first = agents.Runner.run_sync(agent, "What colour is the sky?", conversation_id=conv.id)
    second = agents.Runner.run_sync(agent, "And the grass?", conversation_id=conv.id)
    assert isinstance(second.final_output, str) and second.final_output.strip()
    said = [i.content[0].text for i in sdk(server).conversations.items.list(conv.id, order="asc").data]
    assert said == ["What colour is the sky?", first.final_output, "And the grass?", second.final_output]


def test_the_store_is_bounded_the_least_recently_used_going_first():
    store = ConversationStore(max_conversations=2, max_chars=10_000)
    a = store.create([], {})["id"]
    b = store.create([], {})["id"]
    assert store.items(a) == []  # a is now the most recently used
    c = store.create([], {})["id"]
    assert store.get(b) is None and store.get(a) is not None and store.get(c) is not None
    big = {"id": "msg_1", "type": "message", "role": "user", "content": "x" * 6_000}
    assert store.add(a, [big])
    assert store.add(c, [dict(big, id="msg_2")])  # together past the bound: a goes
    assert store.get(a) is None and len(store) == 1
    with pytest.raises(ConversationFull):
        store.add(c, [dict(big, id="msg_3")])  # one conversation alone past it is refused, not kept
    assert [i["id"] for i in store.items(c) or ()] == ["msg_2"]


def test_the_openai_agents_sdk_keeps_a_session_in_a_conversations_items(server):
    """OpenAIConversationsSession: the SDK keeps the turns itself, through the items routes (list, add, delete)."""
    agents = pytest.importorskip("agents")
    import asyncio

    agent, client = _one_word_agent(agents, server)

    cid = sdk(server).conversations.create().id

    async def turns() -> tuple[list, list, dict | None]:
        session = agents.OpenAIConversationsSession(conversation_id=cid, openai_client=client)
        await agents.Runner.run(agent, "What colour is the sky?", session=session)
        await agents.Runner.run(agent, "And the grass?", session=session)
        before = await session.get_items()
        popped = await session.pop_item()
        after = await session.get_items()
        await session.clear_session()
        return before, after, popped

    before, after, popped = asyncio.run(turns())
    assert [i.get("role") for i in before] == ["user", "assistant", "user", "assistant"]
    assert popped is not None and popped["role"] == "assistant" and len(after) == 3
    assert httpx.get(f"{server.base_url}/conversations/{cid}", headers=server.headers).status_code == 404
