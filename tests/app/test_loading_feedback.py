"""While the chat's model is being loaded, its answer says "Loading <model>…" in place of "Generating…", until
something of the answer arrives. Whether the model is loaded is the worker's model list's word."""

from __future__ import annotations

from PySide6.QtCore import QObject

from app.chat.answer_run import AnswerRun
from app.chat.conversation_model import ConversationModel
from app.net.client import ApiCall
from app.net.types import ModelInfo
from app.store import AnswerStats, ChatSettings
from app.theme import LIGHT
from app.widgets.chat_view import ChatView

MODEL = "smollm2-135m-instruct"


class ModelsOnly(QObject):
    """The worker's API as far as the question "is it loaded" goes: each models() call is kept, to answer."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[ApiCall] = []

    def models(self) -> ApiCall:
        call = ApiCall("/api/models", lambda d: d, self)
        self.calls.append(call)
        return call


def _run(qtbot, chat_store):
    chat = chat_store.create_chat(ChatSettings(model=MODEL))
    chat_store.add_message(chat.id, "user", "Hello")
    answer = chat_store.add_message(chat.id, "assistant", "", AnswerStats(model=MODEL))
    model = ConversationModel(chat.id, chat_store.messages(chat.id)[:1])
    model.append(answer, streaming=True)
    view = ChatView(LIGHT)
    qtbot.addWidget(view)
    view.set_model(model)
    api = ModelsOnly()
    run = AnswerRun(api=api, store=chat_store, conversation=model, chat=chat, answer=answer, history=[],
                    context_length=2048)  # fmt: skip
    run._watch_loading()  # what start() asks, beside the request itself
    return run, api, view


def _footer(view: ChatView) -> str:
    view._render_dirty()
    return view.bubbles[-1].stats.text()


def test_an_answer_whose_model_is_not_loaded_says_it_is_loading_until_its_first_token(qtbot, chat_store):
    run, api, view = _run(qtbot, chat_store)
    assert _footer(view) == "Generating…"
    api.calls[0].succeeded.emit([ModelInfo(name="other", state="loaded"), ModelInfo(name=MODEL, state="not-loaded")])
    assert _footer(view) == f"Loading {MODEL}…"
    run._on_content("Hi")
    assert _footer(view) == "Generating…"


def test_a_loaded_model_or_one_that_already_answers_says_generating(qtbot, chat_store):
    run, api, view = _run(qtbot, chat_store)
    api.calls[0].succeeded.emit([ModelInfo(name=MODEL, state="loaded")])
    assert _footer(view) == "Generating…"

    run, api, view = _run(qtbot, chat_store)
    run._on_content("Hi")  # the first token came before the list
    api.calls[0].succeeded.emit([ModelInfo(name=MODEL, state="loading")])
    assert _footer(view) == "Generating…"


def test_a_stop_while_loading_ends_the_loading_text(qtbot, chat_store):
    run, api, view = _run(qtbot, chat_store)
    api.calls[0].succeeded.emit([ModelInfo(name=MODEL, state="loading")])
    assert _footer(view) == f"Loading {MODEL}…"
    model = view.model
    model.replace(model.message(1), streaming=False)  # the answer ended (stopped)
    assert model.waiting_text(model.message(1).id) == "" and "Loading" not in _footer(view)
