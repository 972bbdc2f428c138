"""Anthropic's Messages API on Hearth's port, driven by the official `anthropic` client."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from tests.engine.server.conftest import MODEL

QUESTION = [{"role": "user", "content": "Name three colours."}]
# This SDK no longer has sampling arguments (newer Claude models drop them); older clients send them in the body.
GREEDY = {"extra_body": {"temperature": 0}}


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.root, api_key=server.api_key, max_retries=0, timeout=600)


def test_create_answers_with_text_and_usage_that_count_tokens_agrees_with(claude):
    msg = claude.messages.create(model=MODEL, max_tokens=12, messages=QUESTION, **GREEDY, system="Be brief.")
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    assert msg._request_id and msg._request_id.startswith("req_")  # Anthropic's request-id header
    assert msg.model == MODEL
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert 0 < msg.usage.output_tokens <= 12
    counted = claude.messages.count_tokens(model=MODEL, messages=QUESTION, system="Be brief.").input_tokens
    assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens == counted
    longer = claude.messages.count_tokens(model=MODEL, messages=QUESTION, system="Be brief, and answer in English.")
    assert longer.input_tokens > counted


def test_stream_text_matches_the_plain_answer_and_the_final_message(claude):
    plain = claude.messages.create(model=MODEL, max_tokens=12, messages=QUESTION, **GREEDY)
    with claude.messages.stream(model=MODEL, max_tokens=12, messages=QUESTION, **GREEDY) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1
    assert "".join(pieces) == plain.content[0].text == final.content[0].text
    assert final.stop_reason == plain.stop_reason
    assert final.usage.output_tokens == plain.usage.output_tokens
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == plain.usage.input_tokens + (
        plain.usage.cache_read_input_tokens or 0
    )


def test_raw_event_sequence_is_anthropics(server):
    body = {"model": MODEL, "max_tokens": 4, "messages": QUESTION, "stream": True, "temperature": 0}
    names = []
    with httpx.stream("POST", f"{server.root}/v1/messages", json=body, headers={"x-api-key": server.api_key}, timeout=300) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        names = [line[7:] for line in r.iter_lines() if line.startswith("event: ")]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]


def test_message_start_splits_the_prompt_as_message_delta_does(server):
    """Anthropic's message_start already names the prompt tokens read from the cache (clients take the input usage
    from it); the same request twice: the second reads most of its prompt from the cache."""
    import json

    body = {"model": MODEL, "max_tokens": 3, "messages": QUESTION, "stream": True, "temperature": 0}
    for _ in range(2):
        with httpx.stream("POST", f"{server.root}/v1/messages", json=body, headers={"x-api-key": server.api_key},
                          timeout=300) as r:  # fmt: skip
            data = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    start = data[0]["message"]["usage"]
    end = next(d for d in data if d["type"] == "message_delta")["usage"]
    assert start["cache_read_input_tokens"] == end["cache_read_input_tokens"] > 0
    assert start["input_tokens"] == end["input_tokens"]


def test_stop_sequence_ends_the_answer_and_is_named(claude):
    plain = claude.messages.create(model=MODEL, max_tokens=16, messages=QUESTION, **GREEDY).content[0].text
    words = plain.split()
    assert len(words) >= 3, plain
    stop = words[2]
    msg = claude.messages.create(model=MODEL, max_tokens=16, messages=QUESTION, **GREEDY, stop_sequences=[stop, "@@@"])
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == stop
    assert msg.content[0].text == plain[: plain.index(stop)]


def test_sampling_and_content_blocks(claude):
    kw = dict(model=MODEL, max_tokens=10, extra_body={"temperature": 1.0, "top_p": 0.9, "top_k": 40})
    blocks = [{"role": "user", "content": [{"type": "text", "text": "Name three"}, {"type": "text", "text": "colours."}]}]
    msg = claude.messages.create(messages=blocks, system=[{"type": "text", "text": "Be brief."}], **kw)
    assert msg.content[0].text


def test_ignore_eos_generates_past_the_end_of_the_turn_to_max_tokens(claude):
    # room to end the turn: greedy, the answer (47 tokens) can still change at a near-tie where the batch or the
    # cached prefix it is computed with differs, and run on
    plain = claude.messages.create(model=MODEL, max_tokens=256, messages=QUESTION, **GREEDY)
    assert plain.stop_reason == "end_turn" and plain.usage.output_tokens < 256
    past = plain.usage.output_tokens + 16
    msg = claude.messages.create(model=MODEL, max_tokens=past, messages=QUESTION, extra_body={"temperature": 0, "ignore_eos": True})
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == past


WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_tool_choice_any_forces_a_tool_use_whose_input_fits_the_schema(claude):
    import jsonschema

    # Greedy: a sampled call from the starter model now and then writes a string until max_tokens.
    greedy = {"extra_body": {"temperature": 0}}
    msg = claude.messages.create(model=MODEL, max_tokens=60, messages=ASK, tools=[WEATHER], tool_choice={"type": "any"},
                                 **greedy)  # fmt: skip
    assert msg.stop_reason == "tool_use"
    (use,) = [b for b in msg.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.id.startswith("toolu_")  # Anthropic's own form of id
    jsonschema.validate(use.input, WEATHER["input_schema"])

    with claude.messages.stream(model=MODEL, max_tokens=60, messages=ASK, tools=[WEATHER],
                                tool_choice={"type": "tool", "name": "get_weather"}, **greedy) as stream:  # fmt: skip
        final = stream.get_final_message()
    (streamed,) = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and streamed.name == "get_weather" and streamed.id.startswith("toolu_")
    jsonschema.validate(streamed.input, WEATHER["input_schema"])  # assembled from input_json_delta pieces

    none = claude.messages.create(model=MODEL, max_tokens=4, messages=ASK, tools=[WEATHER], tool_choice={"type": "none"}, **GREEDY)
    assert [b.type for b in none.content] == ["text"] and none.stop_reason != "tool_use"


def test_a_tool_result_turn_is_answered(claude):
    turn = [
        *ASK,
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 24 C."}]},
    ]
    msg = claude.messages.create(model=MODEL, max_tokens=6, messages=turn, tools=[WEATHER], tool_choice={"type": "none"}, **GREEDY)
    assert msg.content and msg.stop_reason in ("end_turn", "max_tokens", "tool_use")
    bare = claude.messages.count_tokens(model=MODEL, messages=ASK, tools=[WEATHER]).input_tokens
    assert claude.messages.count_tokens(model=MODEL, messages=turn, tools=[WEATHER]).input_tokens > bare + 5


def test_models_list_in_anthropics_shape(claude, server):
    models = list(claude.models.list())
    assert MODEL in [m.id for m in models] and all(m.type == "model" for m in models)
    assert claude.models.retrieve(MODEL).id == MODEL
    # paged as Anthropic pages it: the SDK's pages of one, followed to the end, are the whole list
    assert [m.id for m in claude.models.list(limit=1)] == [m.id for m in models]
    last = claude.models.list(after_id=models[-1].id)
    assert last.data == [] and not last.has_more
    assert [m.id for m in claude.models.list(before_id=models[-1].id).data] == [m.id for m in models[:-1]]
    with pytest.raises(anthropic.BadRequestError, match="limit"):
        claude.models.list(limit=0)
    openai_shape = httpx.get(f"{server.base_url}/models", headers=server.headers).json()
    assert openai_shape["object"] == "list"  # the same path without anthropic-version stays OpenAI's


def test_x_api_key_is_required_and_refusals_are_anthropic_shaped(server):
    no_key = anthropic.Anthropic(base_url=server.root, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as err:
        no_key.messages.create(model=MODEL, max_tokens=4, messages=QUESTION)
    assert err.value.status_code == 401
    assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "authentication_error"
    for ask in (no_key.models.list, lambda: no_key.models.retrieve(MODEL)):  # /v1/models, the SDK's: Anthropic's too
        with pytest.raises(anthropic.AuthenticationError) as err:
            ask()
        assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "authentication_error"
    assert "type" not in httpx.get(f"{server.root}/v1/models").json()  # an OpenAI client's: OpenAI's shape
    r = httpx.post(f"{server.root}/v1/messages", json={"model": MODEL, "max_tokens": 4, "messages": QUESTION})
    assert r.status_code == 401 and r.json()["type"] == "error"
    bearer = httpx.post(
        f"{server.root}/v1/messages/count_tokens",
        json={"model": MODEL, "messages": QUESTION},
        headers={"Authorization": f"Bearer {server.api_key}"},
    )
    assert bearer.status_code == 200 and bearer.json()["input_tokens"] > 0


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        ({"model": MODEL, "messages": QUESTION}, 400, "invalid_request_error"),  # max_tokens is required
        ({"model": MODEL, "max_tokens": 4, "messages": "hello"}, 400, "invalid_request_error"),
        ({"model": MODEL, "max_tokens": 4, "messages": QUESTION, "temperature": 1.5}, 400, "invalid_request_error"),
        ({"model": MODEL, "max_tokens": -1, "messages": QUESTION}, 400, "invalid_request_error"),
        ({"model": MODEL, "max_tokens": 4, "messages": [{"role": "tool", "content": "x"}]}, 400, "invalid_request_error"),
        ({"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]}, 400, "invalid_request_error"),
        ({"model": "no-such-model", "max_tokens": 4, "messages": QUESTION}, 404, "not_found_error"),
        ({"model": MODEL, "max_tokens": 4, "messages": QUESTION, "tools": [{"name": "x", "input_schema": {"type": "string"}}]},
         400, "invalid_request_error"),
        ({"model": MODEL, "max_tokens": 4, "messages": QUESTION, "tools": [{"type": "web_search_20250305", "name": "web"}]},
         400, "invalid_request_error"),
        ({"model": MODEL, "max_tokens": 4, "messages": QUESTION, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}},
         400, "invalid_request_error"),
        ({"model": MODEL, "max_tokens": 4, "messages": QUESTION, "tool_choice": {"type": "any"}}, 400, "invalid_request_error"),
        # thinking.budget_tokens: a whole number of tokens
        ({"model": MODEL, "max_tokens": 4096, "messages": QUESTION, "thinking": {"type": "enabled", "budget_tokens": "lots"}},
         400, "invalid_request_error"),
        ({"model": MODEL, "max_tokens": 4096, "messages": QUESTION, "thinking": {"type": "enabled", "budget_tokens": 2048.5}},
         400, "invalid_request_error"),
        ({"model": MODEL, "max_tokens": 4096, "messages": QUESTION, "thinking": {"type": "enabled", "budget_tokens": -5}},
         400, "invalid_request_error"),
    ],
)
def test_bad_requests_get_anthropic_errors_never_a_500(server, body, status, kind):
    r = httpx.post(f"{server.root}/v1/messages", json=body, headers={"x-api-key": server.api_key}, timeout=300)
    assert r.status_code == status, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == kind and err["error"]["message"].endswith(".")


def test_thinking_budget_tokens_is_a_count_of_tokens(claude):
    with pytest.raises(anthropic.BadRequestError, match="'thinking.budget_tokens' must be a whole number of tokens"):
        claude.messages.count_tokens(model=MODEL, messages=QUESTION, thinking={"type": "enabled", "budget_tokens": "lots"})  # type: ignore[arg-type]
    # count_tokens has no max_tokens: one sent beside it is no bound
    assert claude.messages.count_tokens(model=MODEL, messages=QUESTION, thinking={"type": "enabled", "budget_tokens": 2048},
                                        extra_body={"max_tokens": "x"}).input_tokens > 0  # fmt: skip
    # Anthropic's lower bound and its rule against a budget over max_tokens bind no local model
    for budget in (100, 4096):
        msg = claude.messages.create(model=MODEL, max_tokens=2048, messages=QUESTION, stop_sequences=["."],
                                     thinking={"type": "enabled", "budget_tokens": budget}, **GREEDY)  # fmt: skip
        assert msg.content and msg.stop_reason in ("end_turn", "stop_sequence")


def test_not_json_is_a_400_in_anthropics_shape(server):
    r = httpx.post(
        f"{server.root}/v1/messages", content=b"{nope", headers={"x-api-key": server.api_key, "content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_an_endpoint_hearth_lacks_answers_in_anthropics_shape(claude):
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.messages.batches.list()
    body = missing.value.body
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
    assert body["error"]["message"] == "Invalid URL (GET /v1/messages/batches): Hearth has no such endpoint."


def test_a_text_document_block_is_read_as_its_text_and_a_pdf_is_a_400_saying_so(claude, server):
    """Anthropic's ``document`` block with a ``text`` or ``content`` source: its title, context and text in the
    prompt, as the same words sent as text."""
    fact = "The lighthouse on Harrow Point was painted green in 1931."
    as_text = claude.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": [
        {"type": "text", "text": "Harbour notes\n\n" + fact}, {"type": "text", "text": "What colour is the lighthouse?"}]}])  # fmt: skip
    for source in ({"type": "text", "media_type": "text/plain", "data": fact},
                   {"type": "content", "content": [{"type": "text", "text": fact}]}):  # fmt: skip
        doc = {"type": "document", "source": source, "title": "Harbour notes"}
        asked = [{"role": "user", "content": [doc, {"type": "text", "text": "What colour is the lighthouse?"}]}]
        assert claude.messages.count_tokens(model=MODEL, messages=asked).input_tokens == as_text.input_tokens
        answer = claude.messages.create(model=MODEL, max_tokens=4, messages=asked, **GREEDY)
        assert answer.usage.output_tokens > 0
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}
    r = httpx.post(f"{server.root}/v1/messages", json={"model": MODEL, "max_tokens": 4, "messages": [
        {"role": "user", "content": [pdf]}]}, headers={"x-api-key": server.api_key}, timeout=60)  # fmt: skip
    assert r.status_code == 400 and "document block that is not text" in r.json()["error"]["message"]


def test_max_tokens_0_reads_the_prompt_into_the_cache_and_answers_nothing(claude, server):
    """Anthropic's pre-warming: ``max_tokens: 0`` gives no content, and the same prompt next reads from the cache."""
    system = "You are a careful assistant for a harbour office. " * 12
    asked = [{"role": "user", "content": "Which boats leave at dawn?"}]
    warm = claude.messages.create(model=MODEL, max_tokens=0, system=system, messages=asked)
    assert warm.content == [] and warm.stop_reason == "max_tokens" and warm.usage.output_tokens == 0
    assert warm.usage.input_tokens + warm.usage.cache_read_input_tokens > 100
    answer = claude.messages.create(model=MODEL, max_tokens=4, system=system, messages=asked, **GREEDY)
    assert answer.usage.cache_read_input_tokens > 100 and answer.content
    body = {"model": MODEL, "max_tokens": 0, "system": system, "messages": asked, "stream": True}
    with httpx.stream("POST", f"{server.root}/v1/messages", json=body, headers={"x-api-key": server.api_key}, timeout=300) as r:
        kinds = [line[7:] for line in r.iter_lines() if line.startswith("event: ")]
    assert kinds == ["message_start", "ping", "message_delta", "message_stop"]


def test_a_system_message_between_turns_is_read_where_it_stands(claude):
    """Claude Code sends reminders as ``{"role": "system"}`` messages after the user's: read as system messages there
    (every such request was a 400)."""
    asked = [{"role": "user", "content": "Name three colours."},
             {"role": "system", "content": [{"type": "text", "text": "Answer in one short line."}]}]  # fmt: skip
    msg = claude.messages.create(model=MODEL, max_tokens=4, messages=asked, **GREEDY)
    assert msg.content and msg.usage.output_tokens > 0
    plain = claude.messages.count_tokens(model=MODEL, messages=asked[:1]).input_tokens
    assert claude.messages.count_tokens(model=MODEL, messages=asked).input_tokens > plain


def test_a_prompt_past_the_context_is_refused_in_the_words_claude_code_reads(server):
    """Claude Code finds an overflow (to compact the conversation) by Anthropic's words for it."""
    import re

    body = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "sea " * 3000}]}
    r = httpx.post(f"{server.root}/v1/messages", json=body, headers={"x-api-key": server.api_key}, timeout=300)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    message = r.json()["error"]["message"]
    found = re.search(r"prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)", message)  # Claude Code's own pattern
    assert found and int(found.group(1)) > int(found.group(2)) == 2048 and "--ctx" in message


def test_a_last_assistant_turn_is_gone_on_with_as_claude_does(claude):
    story = [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}]
    whole = claude.messages.create(model=MODEL, max_tokens=16, messages=story, **GREEDY)
    first = claude.messages.create(model=MODEL, max_tokens=8, messages=story, **GREEDY)
    assert first.stop_reason == "max_tokens"
    begun = first.content[0].text
    went_on = claude.messages.create(
        model=MODEL, max_tokens=8, messages=[*story, {"role": "assistant", "content": begun}], **GREEDY
    )
    # the answer holds only what follows the prefill, and reads on from it as the uncut answer does: no new turn
    assert begun + went_on.content[0].text == whole.content[0].text
    counted = claude.messages.count_tokens(model=MODEL, messages=[*story, {"role": "assistant", "content": begun}])
    assert went_on.usage.input_tokens + (went_on.usage.cache_read_input_tokens or 0) == counted.input_tokens
    with pytest.raises(anthropic.BadRequestError, match="ends with whitespace"):  # as Anthropic refuses it
        claude.messages.create(model=MODEL, max_tokens=8, messages=[*story, {"role": "assistant", "content": "Once "}])


def test_a_system_message_alone_is_a_400_that_says_a_user_message_is_missing(claude):
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "system", "content": "Be brief."}])
    assert "user or assistant message" in str(caught.value)


def test_context_editing_clears_old_tool_results_and_thinking_and_says_what_it_cleared(claude, server):
    """The context-management beta's edits, made before the model reads the conversation: all but the newest tool
    use's results (and inputs) become a note, older turns' thinking goes, and the answer says what was cleared."""
    tool = {"name": "read_file", "description": "Read a file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
    turns: list = [{"role": "user", "content": "Read the four files and tell me what they say."}]
    for i in range(4):
        turns.append({"role": "assistant", "content": [{"type": "thinking", "thinking": f"File {i} next.", "signature": ""},
                      {"type": "tool_use", "id": f"toolu_{i}", "name": "read_file", "input": {"path": f"f{i}.txt"}}]})  # fmt: skip
        turns.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}",
                                                   "content": f"File {i}: " + "the tide comes in and goes out. " * 12}]})  # fmt: skip
    edits = {"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 2},
                        "keep": {"type": "tool_uses", "value": 1}, "clear_tool_inputs": True},
                       {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}},
                       {"type": "compact_20260112"}]}  # fmt: skip
    beta = {"context_management": edits, "betas": ["context-management-2025-06-27"], "tools": [tool]}
    whole = claude.messages.count_tokens(model=MODEL, messages=turns, tools=[tool]).input_tokens
    counted = claude.beta.messages.count_tokens(model=MODEL, messages=turns, **beta)
    assert counted.context_management is not None and counted.context_management.original_input_tokens == whole
    assert counted.input_tokens < whole - 3 * 60  # three results of about 80 tokens each are a short note now

    msg = claude.beta.messages.create(model=MODEL, max_tokens=1, messages=turns, **beta, **GREEDY)
    assert msg.context_management is not None
    cleared, thinking = msg.context_management.applied_edits
    assert (cleared.type, cleared.cleared_tool_uses) == ("clear_tool_uses_20250919", 3)
    assert cleared.cleared_input_tokens == whole - counted.input_tokens - thinking.cleared_input_tokens
    assert (thinking.type, thinking.cleared_thinking_turns) == ("clear_thinking_20251015", 3)
    assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens == counted.input_tokens
    with claude.beta.messages.stream(model=MODEL, max_tokens=1, messages=turns, **beta, **GREEDY) as stream:
        deltas = [e.context_management for e in stream if e.type == "message_delta"]
    assert deltas == [msg.context_management]

    def edited(edit: dict) -> int:  # the prompt's tokens with one clear_tool_uses edit made
        got = claude.beta.messages.count_tokens(model=MODEL, messages=turns, tools=[tool], betas=beta["betas"],
                                                context_management={"edits": [{"type": "clear_tool_uses_20250919", **edit}]})  # fmt: skip
        assert got.context_management is not None and got.context_management.original_input_tokens == whole
        return got.input_tokens

    assert edited({"trigger": {"type": "input_tokens", "value": whole - 1}}) < whole  # past it: all but the 3 newest
    # nothing is cleared below the trigger (100,000 tokens when left out), or where less than clear_at_least would be
    for edit in ({}, {"trigger": {"type": "input_tokens", "value": whole}}, {"trigger": {"type": "tool_uses", "value": 4}},
                 {"trigger": {"type": "tool_uses", "value": 2}, "clear_at_least": {"type": "input_tokens", "value": 100_000}}):  # fmt: skip
        assert edited(edit) == whole, edit
    refused = httpx.post(server.root + "/v1/messages", headers={"x-api-key": server.api_key}, timeout=60, json={
        "model": MODEL, "max_tokens": 4, "messages": turns[:1], "context_management": {"edits": [{"type": "shrink"}]}})  # fmt: skip
    assert refused.status_code == 400 and refused.json()["error"]["message"] == (
        "context_management.edits[0] has type 'shrink', which Hearth does not know; use clear_tool_uses_20250919, "
        "clear_thinking_20251015 or compact_20260112, or leave it out.")  # fmt: skip


def test_a_compaction_block_stands_for_the_conversation_before_it(claude, server):
    """Anthropic's compaction blocks (the compact-2026-01-12 beta) given back: what came before one is read as its
    summary alone; one whose content is null (a compaction that failed) changes nothing."""
    history = [{"role": "user", "content": "Tell me about otters. " * 40},
               {"role": "assistant", "content": "Otters are playful swimmers. " * 40}]  # fmt: skip
    ask = {"role": "user", "content": "And beavers?"}
    block = {"type": "compaction", "content": "We talked about otters."}

    def counted(messages: list[dict]) -> int:
        r = httpx.post(f"{server.root}/v1/messages/count_tokens", headers=server.headers, timeout=60,
                       json={"model": MODEL, "messages": messages})  # fmt: skip
        assert r.status_code == 200, r.text
        return r.json()["input_tokens"]

    whole = counted([*history, ask])
    compacted = counted([*history, {"role": "assistant", "content": [block]}, ask])
    alone = counted([{"role": "user", "content": "A summary"}, ask])
    assert compacted < whole // 4 and abs(compacted - alone) < 40
    failed = counted([*history, {"role": "assistant", "content": [{"type": "compaction", "content": None}, {"type": "text", "text": "Yes."}]}, ask])
    assert failed > whole  # nothing was dropped
    answer = claude.messages.create(model=MODEL, max_tokens=4,
                                    messages=[*history, {"role": "assistant", "content": [block, {"type": "text", "text": "Sure."}]}, ask])  # type: ignore[list-item]  # fmt: skip
    assert answer.content[0].type == "text"
    r = httpx.post(f"{server.root}/v1/messages/count_tokens", headers=server.headers, timeout=60,
                   json={"model": MODEL, "messages": [{"role": "assistant", "content": [{"type": "compaction", "content": 5}]}, ask]})  # fmt: skip
    assert r.status_code == 400 and "compaction block" in r.json()["error"]["message"]


def _compact(trigger: int | None = None, **more) -> dict:
    edit = {"type": "compact_20260112", **({"trigger": {"type": "input_tokens", "value": trigger}} if trigger else {}), **more}
    return {"edits": [edit]}


OTTERS = [{"role": "user", "content": "Tell me about otters. " * 30},
          {"role": "assistant", "content": "Otters are playful swimmers that hold hands. " * 20},
          {"role": "user", "content": "And where do they live?"}]  # fmt: skip


def test_compact_edit_summarises_a_conversation_past_its_trigger_and_the_block_goes_on_from_there(server):
    """compact_20260112: past the trigger the answer begins with a compaction block holding the model's summary; given
    back, the next request reads the summary in place of everything before it."""
    body = {"model": MODEL, "max_tokens": 8, "temperature": 0, "messages": OTTERS, "context_management": _compact(100)}
    r = httpx.post(f"{server.root}/v1/messages", headers=server.headers, json=body, timeout=300)
    assert r.status_code == 200, r.text
    message = r.json()
    block = message["content"][0]
    assert block["type"] == "compaction" and block["content"].strip() and message["content"][1]["type"] == "text"
    compaction, answer = message["usage"]["iterations"]
    assert compaction["type"] == "compaction" and compaction["output_tokens"] > 0 and answer["type"] == "message"
    assert message["usage"]["input_tokens"] == answer["input_tokens"]  # the summary's tokens are its own iteration's
    # streamed: the same block first, then the answer's blocks after it
    with httpx.stream("POST", f"{server.root}/v1/messages", headers=server.headers, json={**body, "stream": True},
                      timeout=300) as s:  # fmt: skip
        events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts[0] == "compaction" and starts[1] == "text"
    delta = next(e for e in events if e["type"] == "content_block_delta")["delta"]
    assert delta["type"] == "compaction_delta" and delta["content"].strip()  # (the summary is sampled as the model's defaults say)
    assert next(e for e in events if e["type"] == "message_delta")["usage"]["iterations"][0]["type"] == "compaction"
    # given back with the answer, it stands for the conversation before it
    later = [*OTTERS, {"role": "assistant", "content": message["content"]}, {"role": "user", "content": "Thanks!"}]
    r = httpx.post(f"{server.root}/v1/messages/count_tokens", headers=server.headers, json={"model": MODEL, "messages": later}, timeout=60)
    whole = httpx.post(f"{server.root}/v1/messages/count_tokens", headers=server.headers, json={"model": MODEL, "messages": OTTERS}, timeout=60)
    assert r.json()["input_tokens"] < whole.json()["input_tokens"] // 2


def test_compact_edit_pauses_after_the_compaction_and_leaves_a_short_conversation_alone(server):
    body = {"model": MODEL, "max_tokens": 8, "temperature": 0, "messages": OTTERS,
            "context_management": _compact(100, pause_after_compaction=True)}  # fmt: skip
    paused = httpx.post(f"{server.root}/v1/messages", headers=server.headers, json=body, timeout=300).json()
    assert paused["stop_reason"] == "compaction" and [b["type"] for b in paused["content"]] == ["compaction"]
    body["context_management"] = _compact()  # 150,000 tokens: far past this conversation
    whole = httpx.post(f"{server.root}/v1/messages", headers=server.headers, json=body, timeout=300).json()
    assert [b["type"] for b in whole["content"]] == ["text"] and "iterations" not in whole["usage"]
    body["context_management"] = {"edits": [{"type": "compact_20260112", "trigger": {"type": "tool_uses", "value": 3}}]}
    r = httpx.post(f"{server.root}/v1/messages", headers=server.headers, json=body, timeout=60)
    assert r.status_code == 400 and "input_tokens" in r.json()["error"]["message"]


def test_a_compaction_request_answers_with_its_block_alone_streamed_and_not(server):
    """The beta's top-level ``compaction`` (the SDK's ``compaction={"type": "summarize"}``): the conversation
    summarised now, however short, and the block the whole answer; a later request sends it first."""
    claude = anthropic.Anthropic(base_url=server.root, api_key=server.api_key, max_retries=0)
    asked = {"model": MODEL, "max_tokens": 8, "messages": OTTERS, "betas": ["compact-2026-01-12"],
             "compaction": {"type": "summarize", "instructions": "  "}, "extra_body": {"temperature": 0}}  # fmt: skip
    message = claude.beta.messages.create(**asked)
    assert message.stop_reason == "compaction" and [b.type for b in message.content] == ["compaction"]
    assert message.content[0].content and [i.type for i in message.usage.iterations] == ["compaction"]
    with claude.beta.messages.stream(**asked) as stream:
        streamed = stream.get_final_message()
    assert streamed.stop_reason == "compaction" and [b.type for b in streamed.content] == ["compaction"]
    assert streamed.content[0].content == message.content[0].content  # sampled as asked: greedy, the same summary
    later = claude.beta.messages.create(**{**asked, "compaction": None, "max_tokens": 4, "messages": [
        {"role": "assistant", "content": [message.content[0].model_dump()]}, {"role": "user", "content": "And then?"}]})
    assert later.stop_reason in ("end_turn", "max_tokens") and later.content[0].type == "text"
    for wrong, param in (({"type": "clear"}, "compaction.type"), ({"type": "summarize", "instructions": 5},
                                                                  "compaction.instructions")):  # fmt: skip
        with pytest.raises(anthropic.BadRequestError) as refused:
            claude.beta.messages.create(**{**asked, "compaction": wrong})
        assert param in str(refused.value)
    with pytest.raises(anthropic.BadRequestError, match="cannot be combined"):
        claude.beta.messages.create(**asked, context_management=_compact())


def test_compact_edit_compacts_a_conversation_longer_than_a_local_models_context(small_server):
    """The default trigger (150,000 tokens) is far past a local model's context: a conversation that does not fit is
    compacted as well, where without the edit it is refused."""
    s = small_server  # a context of 512 tokens
    long = [{"role": "user", "content": "Tell me about otters. " * 80},
            {"role": "assistant", "content": "Otters are playful swimmers that hold hands. " * 40},
            {"role": "user", "content": "And where do they live?"}]  # fmt: skip
    body = {"model": MODEL, "max_tokens": 8, "temperature": 0, "messages": long}
    refused = httpx.post(f"{s.root}/v1/messages", headers=s.headers, json=body, timeout=300)
    assert refused.status_code == 400 and "prompt is too long" in refused.json()["error"]["message"]
    r = httpx.post(f"{s.root}/v1/messages", headers=s.headers, json={**body, "context_management": _compact()}, timeout=300)
    assert r.status_code == 200, r.text
    assert [b["type"] for b in r.json()["content"]][:2] == ["compaction", "text"]


def test_a_compacted_answer_reads_the_last_step_with_its_calls_and_never_a_result_without_its_call():
    from engine.server.anthropic_routes import _last_step
    from engine.server.compaction import SUMMARY_LEAD
    from engine.tools import ToolCall
    from engine.types import ChatMessage

    ask, system = ChatMessage("user", "Fix the bug."), ChatMessage("system", "Be brief.")
    call = ChatMessage("assistant", "", tool_calls=(ToolCall("read", "{}", id="a"),))
    result = ChatMessage("tool", "x = 1", tool_call_id="a")
    said = ChatMessage("assistant", "Done.")
    # a question: itself; the results of the calls just made: those calls too, and a reminder after them
    assert _last_step((system, ask, said, ChatMessage("user", "Thanks?"))) == (ChatMessage("user", "Thanks?"),)
    assert _last_step((system, ask, call, result)) == (call, result)
    assert _last_step((ask, call, result, system)) == (call, result, system)
    # results whose call is in an earlier summary are left out (the summary holds them)
    summary = ChatMessage("user", SUMMARY_LEAD + "We read a file.")
    assert _last_step((system, summary, result)) == ()
    assert _last_step((system, summary, result, ask)) == (ask,)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_answer_the_context_ends_says_so_and_one_max_tokens_ends_says_that(small_server, stream):
    s = small_server  # a context of 512 tokens
    claude = anthropic.Anthropic(base_url=s.root, api_key=s.api_key, max_retries=0, timeout=300)
    long = [{"role": "user", "content": "Tell me about otters. " * 90}]  # most of the context

    def ask(max_tokens: int):
        kw = {"model": MODEL, "max_tokens": max_tokens, "messages": long, "extra_body": {"temperature": 0, "ignore_eos": True}}
        if not stream:
            return claude.messages.create(**kw)
        with claude.messages.stream(**kw) as st:
            return st.get_final_message()

    filled = ask(400)
    assert filled.stop_reason == "model_context_window_exceeded" and 0 < filled.usage.output_tokens < 400
    cut = ask(4)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 4
