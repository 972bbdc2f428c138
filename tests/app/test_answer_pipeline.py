"""The chat's one answer pipeline in the real window with a real worker: features add to a request through
the controller's preparers (in their order, each saying what it added), and to the page through its named
places; the app sends every request through one HTTP client."""

from __future__ import annotations

import ast
from pathlib import Path

from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QLabel, QToolButton

from app.chat.preparers import AnswerRequest
from tests.app.helpers import bubbles, fresh_chat, send_and_wait

APP = Path(__file__).resolve().parents[2] / "app"


class ShortAnswers:
    """A feature of this test: answers of one chat stop after two tokens."""

    name = "short answers"
    order = 100  # a feature of its own: after the app's

    def __init__(self, chat_id: int) -> None:
        self.chat_id = chat_id
        self.seen: list[dict] = []

    def prepare(self, request: AnswerRequest) -> None:
        self.seen.append(request.body.to_json())
        if request.chat.id == self.chat_id:
            request.body.max_tokens = 2
            request.added.append("Two tokens at most")


def test_preparers_run_in_order_and_what_they_add_reaches_the_worker_and_the_answer(qtbot, window):
    controller = window.controller
    assert [p.name for p in controller.preparers] == ["documents", "thinking", "tools", "attachments"]
    chat_id = fresh_chat(window, max_tokens=24)
    feature = ShortAnswers(chat_id)
    controller.add_preparer(feature)
    first = ShortAnswers(-1)
    first.name, first.order = "first", 0  # one that declares it runs before the app's, added later
    controller.add_preparer(first)
    assert [p.name for p in controller.preparers] == ["first", "documents", "thinking", "tools", "attachments", "short answers"]
    controller.remove_preparer(first)
    try:
        assert [p.name for p in controller.preparers] == ["documents", "thinking", "tools", "attachments", "short answers"]
        outcome = send_and_wait(qtbot, window, "Count from one to twenty.")
    finally:
        controller.remove_preparer(feature)
    assert outcome.error is None
    stats = outcome.message.stats
    assert stats.finish_reason == "length" and stats.tokens == 2  # the worker got the preparer's body
    assert feature.seen[0]["max_tokens"] == 24 and feature.seen[0]["temperature"] == 0  # the chat's own settings first
    added = bubbles(window)[-1].steps.added
    assert not added.isHidden() and added.text() == "Two tokens at most"  # the answer says what was added
    assert window.store.steps(outcome.message.id).added == ["Two tokens at most"]  # and keeps it

    # without the feature the chat answers as before: nothing added, nothing shown above the answer
    outcome = send_and_wait(qtbot, window, "Say hi.")
    assert outcome.message.stats.tokens > 2 or outcome.message.stats.finish_reason == "stop"
    assert bubbles(window)[-1].steps.isHidden() and window.store.steps(outcome.message.id) is None


def test_features_sit_in_the_pages_named_places(qtbot, window):
    page = window.chats
    header = page.settings_button.parentWidget()
    for button in (window.docs.button, window.tools.tools_button):
        assert button.parentWidget() is header
        assert 0 <= header.row.indexOf(button) < header.row.indexOf(page.settings_button)  # the row of its controls
    # a notice above the conversation, an attachment row in the composer, a side panel at the right
    notice, attachment, panel = QLabel("A notice"), QToolButton(), QLabel("A panel")
    page.add_notice(notice)
    page.add_attachment(attachment)
    page.add_side_panel(panel)
    try:
        window.show()
        qtbot.waitUntil(lambda: notice.isVisible() and panel.isVisible() and attachment.isVisible())
        top = notice.mapTo(page, QPoint(0, 0)).y()
        assert top < page.view.mapTo(page, QPoint(0, 0)).y()
        assert page.composer.isAncestorOf(attachment)
        assert attachment.mapTo(page, QPoint(0, 0)).y() < page.composer.input.mapTo(page, QPoint(0, 0)).y()
        assert panel.mapTo(page, QPoint(0, 0)).x() > page.view.mapTo(page, QPoint(0, 0)).x() + page.view.width() - 1
    finally:
        for widget in (notice, attachment, panel):
            widget.setParent(None)
            widget.deleteLater()


def test_the_app_has_one_http_client():
    """Every request of the app, the agent loop's model turns included, goes through Qt's network stack."""
    other_clients = ("httpx", "requests", "aiohttp", "urllib.request", "http.client", "urllib3")
    offenders = []
    for path in APP.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            offenders += [f"{path.name}: {n}" for n in names if n.startswith(other_clients) or n.endswith(".ChatClient")]
    assert offenders == []


# What a feature may use of the chats page: its named places, its signals and the chat on screen.
PAGE_PLACES = {
    "add_header_button", "add_notice", "add_side_panel", "add_attachment", "add_attachment_source",
    "chat_id", "chat_opened", "chat_model_changed", "pictures_received", "window",
}  # fmt: skip


def test_features_use_only_the_pages_named_places():
    """A feature in app/features reaches nothing of the chats page but its named places (not its composer,
    its settings panel or its views)."""
    used = set()
    for path in (APP / "features").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute):
                owner = node.value
                if (isinstance(owner, ast.Name) and owner.id == "page") or (
                    isinstance(owner, ast.Attribute) and owner.attr == "page"
                ):
                    used.add(f"{path.name}: {node.attr}")
    assert {u for u in used if u.split(": ")[1] not in PAGE_PLACES} == set()
    assert any(u.endswith("add_header_button") for u in used)  # the check still sees the features' calls
