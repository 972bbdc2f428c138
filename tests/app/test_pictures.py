"""Pictures in the real window with a real worker serving the tiny vision model (`--model … --mmproj …`):
attach by button (file), paste and drop; thumbnails in the composer, then in the message, a click opening the
picture at full size; the model answers about it; the picture kept once by its hash, carried in the JSON
export, deleted with its chat; a model that cannot see says so instead of failing at send."""

from __future__ import annotations

import hashlib
import json

import pytest
from PySide6.QtCore import QMimeData, QUrl
from PySide6.QtGui import QImage

from tests.app.conftest import ANSWER_TIMEOUT_MS, WORKER_ARGS, open_window, start_engine, theme  # noqa: F401
from tests.app.helpers import bubbles, fresh_chat
from tests.engine.fit.speed_figures import keep_figures
from tests.engine.server import tiny_vision
from tests.engine.server.vision_fixtures import VISION, checkerboard, gradient


@pytest.fixture(scope="module")
def vision_engine(qapp, tmp_path_factory):
    """A worker of this module's own serving the tiny vision model beside the starter (text only)."""
    from app.net.engine import EngineConfig

    home = tmp_path_factory.mktemp("pictures-worker-home")
    keep_figures(home)
    config = EngineConfig(
        model=str(tiny_vision.MODEL_PATH),
        extra_args=(*WORKER_ARGS, "--mmproj", str(tiny_vision.MMPROJ_PATH)),
        env=(("HEARTH_HOME", str(home)),),
    )
    controller = start_engine(config, home / "worker.log")
    yield controller
    controller.stop()


@pytest.fixture(scope="module")
def pictures_store(tmp_path_factory):
    from app.store import ChatStore

    chats = ChatStore(tmp_path_factory.mktemp("pictures-chats"))
    yield chats
    chats.close()


@pytest.fixture
def window(qtbot, pictures_store, vision_engine, theme):  # noqa: F811
    win = open_window(qtbot, pictures_store, vision_engine, theme)
    try:
        qtbot.waitUntil(lambda: win.models.get(VISION) is not None, timeout=30_000)
    except Exception:
        raise AssertionError(f"models: {win.models.names()}") from None
    yield win
    win.controller.stop_all()
    qtbot.waitUntil(lambda: not win.controller.answering_chats(), timeout=10_000)


def use_model(window, chat_id: int, name: str) -> None:
    combo = window.chats.model_combo
    index = combo.findData(name)
    assert index >= 0, [combo.itemData(i) for i in range(combo.count())]
    combo.setCurrentIndex(index)
    combo.activated.emit(index)


def test_attach_paste_and_drop_send_and_see_the_picture_kept_exported_and_deleted(qtbot, window, tmp_path):
    chat_id = fresh_chat(window, max_tokens=8)
    use_model(window, chat_id, VISION)
    feature = window.pictures
    folder = window.store.images.folder

    def stored() -> set[str]:
        return {p.stem for p in folder.iterdir()} if folder.exists() else set()

    before = stored()  # the module's other chats keep theirs

    def kept() -> set[str]:  # this test's pictures
        return stored() - before
    combo = window.chats.model_combo
    assert combo.itemText(combo.findData(VISION)).endswith("· vision")  # the picker marks models that see
    from app.widgets.local_models_table import BADGE_ROLE

    table = window.models_page.table
    marks = {table.data(table.index(r, 0)): table.data(table.index(r, 0), BADGE_ROLE) for r in range(table.rowCount())}
    assert marks[VISION] == "vision" and not marks[next(n for n in marks if n != VISION)]  # and so does the Models page
    assert feature.attach_button.isEnabled()

    picture = tmp_path / "board.png"
    picture.write_bytes(checkerboard())
    feature.attach_files([picture])  # the button's file dialog hands over these paths
    pasted = QMimeData()
    pasted.setImageData(QImage.fromData(gradient()))
    window.chats.composer.input.insertFromMimeData(pasted)  # Ctrl+V of a picture
    dropped = QMimeData()
    dropped.setUrls([QUrl.fromLocalFile(str(picture))])
    window.chats.composer.input.insertFromMimeData(dropped)  # a file dropped on the message box
    assert window.chats.composer.input.toPlainText() == ""  # not pasted as text
    thumbs = [feature.thumbs.itemAt(i).widget() for i in range(feature.thumbs.count())]
    assert len(thumbs) == 3 and all(not t.icon().isNull() for t in thumbs)
    thumbs[2].click()  # the dropped copy is removed again
    assert feature.thumbs.count() == 2

    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS) as done:
        window.chats.composer.input.setPlainText("What is in the picture?")
        window.chats.composer.button.click()
    outcome = done.args[0]
    assert outcome.error is None and outcome.message.content.strip()
    assert window.store.steps(outcome.message.id).added == ["2 pictures"]
    assert feature.thumbs.count() == 0  # the composer is empty again
    question = bubbles(window)[0]
    assert [r.sha256 for r in question.message.images] == [hashlib.sha256(checkerboard()).hexdigest(), question.message.images[1].sha256]
    assert len(question.pictures) == 2 and not question.pictures[0].icon().isNull()
    question.pictures[0].click()
    dialog = question.picture_dialog
    assert dialog is not None and dialog.image.pixmap().width() == QImage.fromData(checkerboard()).width()
    dialog.close()
    assert kept() == {r.sha256 for r in question.message.images}
    assert all((folder / f"{r.sha256}.png").is_file() for r in question.message.images)

    # the JSON export carries the pictures themselves
    exported = tmp_path / "chat.json"
    window.chats.write_export(chat_id, exported, "json")
    data = json.loads(exported.read_text())
    images = data["messages"][0]["images"]
    assert len(images) == 2 and images[0]["data_url"].startswith("data:image/png;base64,")

    # the same picture in another chat is kept once; deleting one chat keeps what the other still shows
    other = fresh_chat(window, max_tokens=4)
    use_model(window, other, VISION)
    feature.attach_files([picture])
    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS):
        window.chats.composer.input.setPlainText("And this one?")
        window.chats.composer.button.click()
    assert len(kept()) == 2
    window.chats.delete_chat(chat_id)
    assert kept() == {hashlib.sha256(checkerboard()).hexdigest()}
    window.chats.delete_chat(other)
    assert kept() == set()


def test_a_model_that_cannot_see_says_so_and_its_answers_leave_pictures_out(qtbot, window, tmp_path):
    chat_id = fresh_chat(window, max_tokens=4)
    use_model(window, chat_id, VISION)
    picture = tmp_path / "square.png"
    square = QImage(24, 24, QImage.Format.Format_RGB32)
    square.fill(0x1163C9)  # a picture of this test's own: the other test counts the files of its own
    square.save(str(picture))
    window.pictures.attach_files([picture])
    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS):
        window.chats.composer.input.setPlainText("Describe it.")
        window.chats.composer.button.click()
    # the chat moves to the text-only starter model: the button says why, and the next answer works without the picture
    text_model = next(n for n in window.models.names() if n != VISION)
    use_model(window, chat_id, text_model)
    feature = window.pictures
    assert not feature.attach_button.isEnabled() and "cannot see pictures" in feature.attach_button.toolTip()
    feature.attach_files([picture])
    assert "cannot see pictures" in feature.message.text() and feature.thumbs.count() == 0
    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS) as done:
        window.chats.composer.input.setPlainText("And now?")
        window.chats.composer.button.click()
    assert done.args[0].error is None
    assert window.store.steps(done.args[0].message.id).added == [f"Pictures left out: {text_model} cannot see them"]
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG not really")
    use_model(window, chat_id, VISION)
    feature.attach_files([broken])
    assert "is not a picture Hearth can read" in feature.message.text() and feature.thumbs.count() == 0
