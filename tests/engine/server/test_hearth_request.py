"""A chat request's ``hearth`` object is read by the shared model (api_models.HearthRequest) that the app
builds it with: each shape it refuses gets the sentence naming the field, and what the app sends is read back."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from engine.errors import InvalidRequest
from engine.server.api_models import HearthRequest
from engine.server.docs_chat import DocumentsAsked, documents_asked

LIST = "'hearth.collections' must be a list of collection names, such as {\"collections\": [\"notes\"]}."


class _Chat(BaseModel):
    model_config = ConfigDict(extra="allow")


def asked(hearth) -> DocumentsAsked | None:
    return documents_asked(_Chat.model_validate({"hearth": hearth}))


@pytest.mark.parametrize(
    ("hearth", "param", "said"),
    [
        ("notes", "hearth", "'hearth' must be an object, such as {\"collections\": [\"notes\"]}."),
        ({"collections": "notes"}, "hearth.collections", LIST),
        ({"collections": ["notes", " "]}, "hearth.collections", LIST),
        ({"collections": [3]}, "hearth.collections", LIST),
        ({"collections": ["notes"], "budget_tokens": 99}, "hearth.budget_tokens",
         "'hearth.budget_tokens' must be a whole number from 100 to 200000."),
        ({"collections": ["notes"], "budget_tokens": "500"}, "hearth.budget_tokens",
         "'hearth.budget_tokens' must be a whole number from 100 to 200000."),
        ({"collections": ["notes"], "k": True}, "hearth.k", "'hearth.k' must be a whole number from 1 to 50."),
        ({"collections": ["notes"], "k": 8.0}, "hearth.k", "'hearth.k' must be a whole number from 1 to 50."),
        ({"collections": ["notes"], "budget_tokens": 0, "k": 0}, "hearth.budget_tokens",
         "'hearth.budget_tokens' must be a whole number from 100 to 200000."),
    ],
)  # fmt: skip
def test_each_wrong_shape_is_refused_with_the_sentence_that_names_it(hearth, param, said):
    with pytest.raises(InvalidRequest) as refused:
        asked(hearth)
    assert str(refused.value) == said and refused.value.param == param


def test_no_collections_is_no_documents_and_null_is_the_default():
    assert asked(None) is None and asked({}) is None and asked({"collections": None}) is None
    assert asked({"collections": [], "k": "not read"}) is None
    assert asked({"collections": ["notes", "notes", "home"], "budget_tokens": None, "k": None}) == DocumentsAsked(
        ("notes", "home"), budget_tokens=1500, k=8
    )
    assert asked({"collections": ["notes"], "budget_tokens": 800, "k": 3, "later": 1}) == DocumentsAsked(
        ("notes",), budget_tokens=800, k=3
    )


def test_the_apps_hearth_object_is_what_it_always_sent_and_the_worker_reads_it():
    from app.chat.producer import ChatRequestBody

    body = ChatRequestBody(model="m", messages=[{"role": "user", "content": "hi"}])
    assert "hearth" not in body.to_json()
    body.hearth = HearthRequest(collections=["home", "notes"])
    assert body.to_json()["hearth"] == {"collections": ["home", "notes"]}
    assert asked(body.to_json()["hearth"]) == DocumentsAsked(("home", "notes"))
