"""The paged engine runs text models only: a picture is refused with a sentence saying where it can go."""

from __future__ import annotations

import pytest

from engine.errors import InvalidRequest
from engine.types import MEDIA_MARKER, ChatMessage, GenerationRequest, MediaInput, SamplingParams
from tests.engine.server.vision_fixtures import checkerboard


def test_the_paged_backend_refuses_pictures_naming_the_llama_cpp_backend(paged_backend):
    message = ChatMessage("user", "What is this?" + MEDIA_MARKER, media=(MediaInput("image", checkerboard(), "messages[0].content[1]"),))
    req = GenerationRequest(model="m", messages=(message,), params=SamplingParams(temperature=0, max_tokens=2))
    with pytest.raises(InvalidRequest, match="--backend llamacpp") as caught:
        list(paged_backend.stream(req))
    assert caught.value.param == "messages[0].content[1]"
