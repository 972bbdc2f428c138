"""A streamed piece of text is encoded as the whole event would be, only faster."""

from __future__ import annotations

import json

import pytest

from engine.server.openai_routes import _sse, _TextEvents

TEXTS = ["Hello", ' "quoted"\n\ttab', "ünïcödé ✓ 🙂", "\\back\\slash", "\x00\x1f control", "</script>", "\ue000"]


@pytest.mark.parametrize("text", TEXTS)
def test_a_text_event_is_the_same_bytes_as_the_whole_event_encoded(text):
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": 'm "q" ü', "usage": None}
    shape = lambda index, t: {**base, "choices": [{"index": index, "delta": {"content": t}, "finish_reason": None}]}  # noqa: E731
    events = _TextEvents(shape)
    for index in (0, 3, 0):
        assert events(index, text) == _sse(shape(index, text))
        assert json.loads(events(index, text)[6:])["choices"][0]["delta"]["content"] == text
