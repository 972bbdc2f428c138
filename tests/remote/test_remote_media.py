"""A chat sent on to a remote provider keeps its pictures and sounds, as OpenAI content parts in place, and its
output format where the provider can take it."""

from __future__ import annotations

import base64

import pytest

from engine.errors import InvalidRequest
from engine.remote.chat import request_body
from engine.types import MEDIA_MARKER, ChatMessage, GenerationRequest, MediaInput, ResponseFormat
from tests.engine.server.vision_fixtures import checkerboard, wav


def test_pictures_and_sounds_go_on_as_content_parts_where_their_markers_are():
    picture, sound = checkerboard(), wav("tone")
    message = ChatMessage(
        "user", f"Look:{MEDIA_MARKER}and listen:{MEDIA_MARKER}",
        media=(MediaInput("image", picture, "messages[0].content[1]"), MediaInput("audio", sound, "messages[0].content[3]")),
    )  # fmt: skip
    body = request_body(GenerationRequest(model="p/m", messages=(ChatMessage("system", "Be brief."), message)), "m")
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Look:"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(picture).decode()}},
        {"type": "text", "text": "and listen:"},
        {"type": "input_audio", "input_audio": {"data": base64.b64encode(sound).decode(), "format": "wav"}},
    ]


def test_a_json_format_goes_to_the_provider_and_a_grammar_is_refused_naming_its_field():
    """A provider takes OpenAI's response formats; a grammar (vLLM's or llama-server's) it has no way to take is a
    400 naming the field the request gave it in, not a request sent without it."""
    ask = (ChatMessage("user", "Answer."),)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    body = request_body(GenerationRequest(model="p/m", messages=ask, response_format=ResponseFormat("json_schema", schema)), "m")
    assert body["response_format"]["json_schema"]["schema"] == schema
    choice = ResponseFormat.choice(["yes", "no"], param="guided_choice")
    with pytest.raises(InvalidRequest) as refused:
        request_body(GenerationRequest(model="p/m", messages=ask, response_format=choice), "m")
    assert refused.value.param == "guided_choice" and "local models" in str(refused.value)
