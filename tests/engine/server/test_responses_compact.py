"""OpenAI's compaction of a conversation (``POST /v1/responses/compact``), as the openai SDK and Codex use it: the
user messages, then one compaction item holding the model's summary, which reads as that summary when the client
gives the list back in its next request."""

from __future__ import annotations

import base64
import re

import openai
import pytest

from engine.server.responses_routes import COMPACTION_PREFIX
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
