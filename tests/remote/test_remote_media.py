"""A chat with pictures and sounds sent on to a remote provider keeps them, as OpenAI content parts in place."""

from __future__ import annotations

import base64

from engine.remote.chat import request_body
from engine.types import MEDIA_MARKER, ChatMessage, GenerationRequest, MediaInput
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
