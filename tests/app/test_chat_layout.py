"""The chat page in a narrow column: messages re-wrap to the width there is, code scrolls sideways inside its
block, and the header keeps its controls whole (the title goes above them). No worker: nothing is answered."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from app.chat.conversation_model import ConversationModel
from app.store import AnswerStats, ChatStore
from app.theme import LIGHT
from app.widgets.chat_view import ChatView

CODE = "```python\ndef quicksort_helper(arr, left, right):\n    return quicksort_helper(arr, left, right) + [x for x in range(100000000)]\n```"  # fmt: skip
ANSWER = f"Here it is:\n\n{CODE}\n\nThe `quicksort` function takes a list of integers and sorts it with the helper."
STATS = AnswerStats(model="m", tokens=499, tokens_per_second=63.7, ttft=2.8, finish_reason="cancelled")


def _chat(store: ChatStore) -> int:
    chat = store.create_chat()
    store.add_message(chat.id, "user", "Write quicksort in Python, please, and explain how it works.")
    store.add_message(chat.id, "assistant", ANSWER, STATS)
    return chat.id


def _settle(qtbot) -> None:
    qtbot.wait(50)  # the layouts run from the event loop


def _inside(widget: QWidget, outer: QWidget) -> bool:
    """Whether ``widget`` lies wholly within ``outer``'s width."""
    left = widget.mapTo(outer, widget.rect().topLeft()).x()
    return left >= 0 and left + widget.width() <= outer.width()


def test_a_narrow_column_rewraps_the_messages_and_code_scrolls_inside_its_block(qtbot, chat_store):
    chat_id = _chat(chat_store)
    view = ChatView(LIGHT)
    qtbot.addWidget(view)
    view.set_model(ConversationModel(chat_id, chat_store.messages(chat_id)))
    view.resize(320, 600)
    view.show()
    _settle(qtbot)
    assert view.widget().width() <= view.viewport().width()  # nothing wider than what shows
    answer = view.bubbles[1]
    for part in (answer.body, answer.stats, answer.copy_button, answer.fork_button):
        assert _inside(part, view.viewport()), part
    (block,) = answer.body.code_blocks()
    assert _inside(block, view.viewport())
    assert block.scroll.horizontalScrollBar().maximum() > 0  # the long line scrolls, inside the block
    assert block.scroll.height() >= block.code.height()  # every line of the code shows
    view.resize(900, 600)  # room again: the numbers under the answer take one line
    _settle(qtbot)
    assert answer.stats.height() < 2 * answer.stats.fontMetrics().lineSpacing()


def test_the_header_keeps_its_controls_whole_beside_open_panels(qtbot, idle_window, chat_store):
    page = idle_window.chats
    page.open_chat(_chat(chat_store))
    page.rename_chat(page.chat_id, "Write quicksort in Python, please, and explain how it works")
    idle_window.resize(1024, 700)
    page.settings_button.setChecked(True)
    _settle(qtbot)
    header = page.model_combo.parentWidget()
    controls = [page.model_combo, page.split_button, page.export_button, page.settings_button]
    for control in controls:
        assert _inside(control, header), control
    edges = sorted((c.mapTo(header, c.rect().topLeft()).x(), c.width()) for c in controls)
    assert all(left + width <= after for (left, width), (after, _w) in zip(edges, edges[1:], strict=False))  # none overlaps
    assert page.title.isVisible() and page.title.width() >= 100
    assert _inside(page.composer.frame, page.composer)
    assert page.view.widget().width() <= page.view.viewport().width()

    page.settings_button.setChecked(False)  # room again: the title goes back beside the controls
    _settle(qtbot)
    assert page.title.geometry().center().y() == page.model_combo.geometry().center().y()
    assert page.composer.frame.width() == min(860, page.composer.width() - 48)  # as wide as the column


def test_the_chat_settings_fit_the_window_at_its_least_size(qtbot, idle_window, chat_store):
    page = idle_window.chats
    page.open_chat(_chat(chat_store))
    try:
        # the least size on a large screen (the chat list narrows), and on a screen 800 wide (it folds away)
        for width, chat_list in ((idle_window.MINIMUM[0], "narrower"), (784, "folded")):
            idle_window.resize(width, 600)
            page.settings_button.setChecked(True)
            _settle(qtbot)
            assert _inside(page.settings_panel, idle_window), width  # the panel's fields are not cut off at the window's edge
            assert page.model_combo.width() >= page.model_combo.minimumSizeHint().width(), width  # the model's name shows
            assert _inside(page.model_combo, page.header) and _inside(page.settings_button, page.header)
            if chat_list == "narrower":
                assert page.sidebar.isVisible() and page.sidebar.width() < page.sidebar.WIDTH
            else:
                assert not page.sidebar.isVisible()
            page.settings_button.setChecked(False)  # closed, the chat list comes back whole
            _settle(qtbot)
            assert page.sidebar.isVisible() and page.sidebar.width() == page.sidebar.WIDTH
    finally:
        page.settings_button.setChecked(False)


def test_the_title_is_never_squeezed_beside_the_controls(qtbot, idle_window, chat_store):
    page = idle_window.chats
    page.open_chat(_chat(chat_store))
    page.rename_chat(page.chat_id, "Write quicksort in Python, please, and explain how it works")
    for width in (idle_window.MINIMUM[0], 1100, 1500):  # beside the controls, or on a row of its own above them
        idle_window.resize(width, 600)
        _settle(qtbot)
        assert page.title.width() >= page.header.TITLE_ROOM - 10, width  # was "This…" at the least size
        assert _inside(page.model_combo, page.header) and _inside(page.settings_button, page.header)


def test_side_panels_that_do_not_fit_together_take_turns_and_the_window_keeps_its_size(qtbot, idle_window, chat_store):
    page, docs = idle_window.chats, idle_window.docs
    page.open_chat(_chat(chat_store))
    try:
        idle_window.resize(784, 600)  # a screen 800 wide: the settings or the documents, one at a time
        _settle(qtbot)
        page.settings_button.setChecked(True)
        _settle(qtbot)
        docs.button.setChecked(True)
        _settle(qtbot)
        assert docs.panel.isVisible() and not page.settings_panel.isVisible() and not page.settings_button.isChecked()
        assert idle_window.width() == 784 and _inside(docs.panel, idle_window)
        page.settings_button.setChecked(True)  # and back: the one opened last stays
        _settle(qtbot)
        assert page.settings_panel.isVisible() and not docs.panel.isVisible() and not docs.button.isChecked()
        assert idle_window.width() == 784 and _inside(page.settings_panel, idle_window)
        idle_window.resize(1400, 800)  # room for both beside the chat
        _settle(qtbot)
        docs.button.setChecked(True)
        _settle(qtbot)
        assert docs.panel.isVisible() and page.settings_panel.isVisible() and page.settings_button.isChecked()
        assert _inside(docs.panel, idle_window) and _inside(page.settings_panel, idle_window)
    finally:
        docs.button.setChecked(False)
        page.settings_button.setChecked(False)
