"""OpenAI's compaction of a conversation (``POST /v1/responses/compact``), as the openai SDK and Codex use it: the
user messages, then one compaction item holding the model's summary, which reads as that summary when the client
gives the list back in its next request."""

from __future__ import annotations

import base64
import re
import time

import openai
import pytest

from engine.server import compaction
from engine.server.compaction import PREFIX as COMPACTION_PREFIX
from engine.server.compaction import WHOLE_PREFIX
from tests.engine.server.conftest import MODEL

HISTORY = [
    {"role": "user", "content": "My name is Ada and I am building a bird feeder."},
    {"type": "message", "role": "assistant", "status": "completed", "id": "msg_1",
     "content": [{"type": "output_text", "text": "Nice! Wood or metal?", "annotations": []}]},
    {"role": "user", "content": "Wood. It must hold 2 kg of seed."},
]  # fmt: skip


SHORT = {"max_output_tokens": 48}  # an extension: the summary's longest (4,096 tokens when left out)


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=120)


def test_a_conversation_compacts_to_its_user_messages_and_a_summary_the_next_request_reads(server, openai_schemas):
    client = _client(server)
    reply = client.responses.with_raw_response.compact(model=MODEL, input=HISTORY, instructions="You are a woodworking "
                                                       "helper.", extra_body=SHORT)  # fmt: skip
    raw = reply.http_response.json()
    openai_schemas("CompactResource", raw)
    compacted = reply.parse()
    assert compacted.object == "response.compaction" and compacted.id.startswith("resp_")
    *users, item = compacted.output
    assert [u.role for u in users] == ["user", "user"]
    assert [u.content[0].text for u in users] == ["My name is Ada and I am building a bird feeder.",
                                                  "Wood. It must hold 2 kg of seed."]  # fmt: skip
    assert item.type == "compaction" and item.id.startswith("cmp_")
    summary = base64.b64decode(item.encrypted_content.removeprefix(COMPACTION_PREFIX)).decode()
    assert summary.strip() and compacted.usage.output_tokens > 0 and compacted.usage.input_tokens > 0

    # the list replaces the conversation: the item reads as the summary (its tokens are in the prompt)
    items = raw["output"]
    with_summary = client.responses.input_tokens.count(model=MODEL, input=items).input_tokens
    without = client.responses.input_tokens.count(model=MODEL, input=items[:-1]).input_tokens
    assert with_summary > without
    answer = client.responses.create(model=MODEL, input=[*items, {"role": "user", "content": "What is my name?"}],
                                     temperature=0, max_output_tokens=16)  # fmt: skip
    assert answer.status in ("completed", "incomplete") and answer.output_text.strip()


def test_a_stored_response_compacts_from_its_id(server):
    client = _client(server)
    first = client.responses.create(model=MODEL, input="Remember the word 'walnut'.", temperature=0, max_output_tokens=8)
    compacted = client.responses.compact(model=MODEL, previous_response_id=first.id, input="And now?", extra_body=SHORT)
    assert [x.type for x in compacted.output] == ["message", "message", "compaction"]
    assert compacted.output[0].content[0].text == "Remember the word 'walnut'."


@pytest.mark.parametrize(("content", "said"), [
    ("gAAAAABpM0Yj-abc=", "input[1] is a compaction item this server did not make"),
    (COMPACTION_PREFIX + "not base64!", "input[1].encrypted_content was changed and cannot be read"),
])  # fmt: skip
def test_a_compaction_item_hearth_did_not_make_is_one_clear_error(server, content, said):
    item = {"type": "compaction", "id": "cmp_x", "encrypted_content": content}
    with pytest.raises(openai.BadRequestError, match=re.escape(said)):
        _client(server).responses.create(model=MODEL, input=[HISTORY[0], item], max_output_tokens=4)


# -- server-side compaction: context_management on POST /v1/responses ------------------------------------------------

#: A threshold the conversation above is past (about 80 tokens rendered); its summary is then at most 32 tokens.
COMPACT_AT = [{"type": "compaction", "compact_threshold": 40}]


def _dumped(response) -> list[dict]:
    return [o.model_dump(exclude_none=True) for o in response.output]


def test_a_conversation_past_the_threshold_is_compacted_first_and_the_next_turns_read_only_what_follows(server, openai_schemas):
    client = _client(server)
    reply = client.responses.with_raw_response.create(model=MODEL, input=HISTORY, temperature=0, max_output_tokens=8,
                                                      context_management=COMPACT_AT)  # fmt: skip
    openai_schemas("Response", reply.http_response.json())
    first = reply.parse()
    assert [o.type for o in first.output] == ["compaction", "message"] and first.output_text.strip()
    item = first.output[0]
    assert item.id.startswith("cmp_") and item.encrypted_content.startswith(WHOLE_PREFIX)
    held = compaction.read(item.encrypted_content, "item")
    assert held.users == (HISTORY[0]["content"], HISTORY[2]["content"]) and held.summary.strip()
    # the usage counts the summary's generation and the answer's
    assert first.usage.output_tokens > 8 and first.usage.total_tokens == first.usage.input_tokens + first.usage.output_tokens

    # the client appends the output and goes on: what came before the item is in it, and is read no more
    later = [*HISTORY, *_dumped(first), {"role": "user", "content": "What is my name?"}]
    count = client.responses.input_tokens.count
    assert count(model=MODEL, input=later).input_tokens == count(model=MODEL, input=later[len(HISTORY):]).input_tokens
    assert count(model=MODEL, input=later).input_tokens > count(model=MODEL, input=later[len(HISTORY) + 1:]).input_tokens
    # under the threshold: nothing is compacted
    below = client.responses.create(model=MODEL, input=later, temperature=0, max_output_tokens=4,
                                    context_management=[{"type": "compaction", "compact_threshold": 100_000}])  # fmt: skip
    assert [o.type for o in below.output] == ["message"]
    # previous_response_id goes on from the compacted conversation, as the stored response holds it
    chained = count(model=MODEL, previous_response_id=first.id, input="What is my name?").input_tokens
    assert chained == count(model=MODEL, input=[item.model_dump(exclude_none=True), first.output[1].model_dump(exclude_none=True),
                                                {"role": "user", "content": "What is my name?"}]).input_tokens  # fmt: skip


def test_a_streamed_compaction_comes_first_in_the_stream_and_in_a_background_response(server):
    client = _client(server)
    with client.responses.stream(model=MODEL, input=HISTORY, temperature=0, max_output_tokens=4,
                                 context_management=COMPACT_AT) as stream:  # fmt: skip
        events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert events[2].item.type == "compaction" and events[2].output_index == 0
    done = kinds.index("response.output_item.done")
    assert set(kinds[3:done]) == {"response.compaction.compacting"}
    assert events[done].item.encrypted_content.startswith(WHOLE_PREFIX) and events[done].item.id == events[2].item.id
    assert events[done + 1].type == "response.output_item.added" and events[done + 1].output_index == 1
    last = events[-1].response
    assert kinds[-1] in ("response.completed", "response.incomplete") and [o.type for o in last.output] == ["compaction", "message"]
    stored = client.responses.retrieve(last.id)
    assert _dumped(stored) == _dumped(last)

    background = client.responses.create(model=MODEL, input=HISTORY, temperature=0, max_output_tokens=4, background=True,
                                         context_management=COMPACT_AT)  # fmt: skip
    for _ in range(600):
        if background.status not in ("queued", "in_progress"):
            break
        time.sleep(0.1)
        background = client.responses.retrieve(background.id)
    assert [o.type for o in background.output] == ["compaction", "message"]
    replayed = [e.type for e in client.responses.retrieve(background.id, stream=True)]  # as its stream went
    done = replayed.index("response.output_item.done")
    assert replayed[1:3] == ["response.in_progress", "response.output_item.added"]
    assert set(replayed[3:done]) == {"response.compaction.compacting"}


def test_a_conversation_longer_than_the_context_is_compacted_to_fit_where_compaction_is_on(server):
    client = _client(server)
    long_answer = "The seed tray sits under the roof and the perch runs along the front. " * 160  # over 2,048 tokens
    history = [HISTORY[0], {"role": "assistant", "content": long_answer}, {"role": "user", "content": "And the roof?"}]
    with pytest.raises(openai.BadRequestError, match="context"):
        client.responses.create(model=MODEL, input=history, max_output_tokens=4)
    fitted = client.responses.create(model=MODEL, input=history, temperature=0, max_output_tokens=4,
                                     context_management=[{"type": "compaction"}])  # fmt: skip
    assert [o.type for o in fitted.output] == ["compaction", "message"]
    # the summary stays within an eighth of the context
    assert compaction.read(fitted.output[0].encrypted_content, "item").users == (HISTORY[0]["content"], "And the roof?")


@pytest.mark.parametrize(("value", "said"), [
    ("compaction", "'context_management' must be a list"),
    ([{"type": "truncation"}], "context_management[0] must have type 'compaction'"),
    ([{"type": "compaction", "compact_threshold": 0}], "context_management[0].compact_threshold must be a whole number"),
    ([{"type": "compaction", "compact_threshold": "1000"}], "context_management[0].compact_threshold must be a whole number"),
])  # fmt: skip
def test_context_management_that_is_not_compaction_is_one_clear_error(server, value, said):
    with pytest.raises(openai.BadRequestError, match=re.escape(said)):
        _client(server).responses.create(model=MODEL, input="Hi", max_output_tokens=4, context_management=value)


# -- compaction_trigger: the last input item asks for the compaction alone, as newer Codex compacts a session ------------


def test_a_compaction_trigger_gives_one_compaction_item_and_the_stored_response_goes_on_from_it(server):
    client = _client(server)
    trigger = [*HISTORY, {"type": "compaction_trigger"}]
    with client.responses.stream(model=MODEL, input=trigger, temperature=0, max_output_tokens=24, store=False,
                                 instructions="You are a woodworking helper.") as stream:  # fmt: skip
        events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-2] == "response.output_item.done" and set(kinds[3:-2]) == {"response.compaction.compacting"}
    final = events[-1].response
    assert [o.type for o in final.output] == ["compaction"]
    held = compaction.read(final.output[0].encrypted_content, "item")
    assert held.users == (HISTORY[0]["content"], HISTORY[2]["content"]) and held.summary.strip()
    # max_output_tokens bounds the summary, the whole output here; a summary it cut says so, as an answer would
    assert final.usage is not None and 0 < final.usage.output_tokens <= 24
    cut = final.usage.output_tokens == 24
    assert (kinds[-1], final.status) == (("response.incomplete", "incomplete") if cut else ("response.completed", "completed"))

    stored = client.responses.create(model=MODEL, input=trigger, temperature=0, max_output_tokens=24)
    assert [o.type for o in stored.output] == ["compaction"]
    assert [i.type for i in client.responses.input_items.list(stored.id).data] == ["message"] * 3  # the trigger is not kept
    count = client.responses.input_tokens.count
    go_on = {"role": "user", "content": "And the roof?"}
    chained = count(model=MODEL, previous_response_id=stored.id, input=[go_on]).input_tokens
    assert chained == count(model=MODEL, input=[stored.output[0].model_dump(exclude_none=True), go_on]).input_tokens

    with pytest.raises(openai.BadRequestError, match=re.escape("input[0] is a compaction_trigger, which must be the last")):
        client.responses.create(model=MODEL, input=[{"type": "compaction_trigger"}, *HISTORY], max_output_tokens=4)


def test_a_compaction_keeps_the_newest_user_messages_that_fit_and_the_newest_always():
    texts = ["a" * 30, "b" * 30, "c" * 30, "d" * 300]
    assert compaction.newest_within(texts, 10) == ["d" * 300]  # the newest, even past the room
    assert compaction.newest_within(texts[:3], 20) == ["b" * 30, "c" * 30]  # 60 characters fit, 90 do not
    assert compaction.newest_within(texts[:3], 1000) == texts[:3]
    assert compaction.users_tokens(100_000) == 25_000 and compaction.users_tokens(None, 2048) == 512
    assert compaction.summary_tokens(100_000, 8192) == 1024 and compaction.summary_tokens(40) == compaction.MIN_TOKENS
