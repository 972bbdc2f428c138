"""Pictures in the chats: attach by button, drag and drop or paste; thumbnails in the composer until sent;
the preparer that puts a conversation's pictures into its request for a model that sees.

It plugs into the page's places (a composer attachment row, an attachment source) and the controller's
preparers; the pictures themselves are kept by the chat store (app.store.images), by content hash.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMimeData, QObject, QSize, Qt
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QToolButton, QWidget

from app.chat.controller import ChatController
from app.chat.preparers import AnswerRequest
from app.net.local_models import LocalModels
from app.pages.chats_page import ChatsPage
from app.store.images import EXTENSIONS, MAX_IMAGE_BYTES, ImageRef, ImageStore

log = logging.getLogger(__name__)

THUMB = 64
FORMATS = {"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "webp": "image/webp", "gif": "image/gif", "bmp": "image/bmp"}


@dataclass(frozen=True, slots=True)
class PendingPicture:
    """A picture attached to the message being written (kept in memory until it is sent)."""

    data: bytes
    mime: str
    width: int
    height: int
    name: str


def picture_from_bytes(data: bytes, name: str = "") -> PendingPicture:
    """``data`` checked as a picture (a type Hearth keeps; anything else Qt reads becomes PNG).

    Raises:
        ValueError: not a picture, or too large (the message says what to do).
    """
    if len(data) > MAX_IMAGE_BYTES:
        raise ValueError(f"{name or 'The picture'} is {len(data) / 1e6:.0f} MB; attach one under {MAX_IMAGE_BYTES // 2**20} MB.")
    image = QImage()
    if not image.loadFromData(data):
        raise ValueError(f"{name or 'This'} is not a picture Hearth can read; attach a PNG, JPEG, WebP, GIF or BMP file.")
    suffix = Path(name).suffix.lower().lstrip(".")
    mime = FORMATS.get(suffix)
    if mime is None or mime not in EXTENSIONS:
        data, mime = png_bytes(image), "image/png"
    return PendingPicture(data, mime, image.width(), image.height(), name)


def png_bytes(image: QImage) -> bytes:
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(buffer.data().data())


def thumbnail(data: bytes, size: int = THUMB) -> QPixmap:
    pixmap = QPixmap()
    pixmap.loadFromData(QByteArray(data))
    return pixmap.scaled(QSize(size, size), Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation)


class PicturesPreparer:
    """A conversation's pictures go to a model that sees them as ``image_url`` parts (data URLs); a model that
    cannot see gets the text, and the answer says the pictures were left out."""

    name = "attachments"
    order = 40  # last: it rewrites messages into parts, once everything else has its text

    def __init__(self, images: ImageStore, sees: Callable[[str], bool]) -> None:
        self.images = images
        self.sees = sees

    def prepare(self, request: AnswerRequest) -> None:
        with_pictures = [(i, r) for i, r in enumerate(request.records) if r is not None and r.images]
        if not with_pictures:
            return
        model = request.chat.settings.model
        if not self.sees(model):
            request.added.append(f"Pictures left out: {model} cannot see them")
            return
        sent = 0
        messages = request.body.messages
        for index, record in with_pictures:
            parts: list[dict] = [{"type": "text", "text": messages[index]["content"]}]
            for ref in record.images:
                url = self.images.data_url(ref)
                if url is not None:
                    parts.append({"type": "image_url", "image_url": {"url": url}})
                    sent += 1
            messages[index] = {**messages[index], "content": parts}
        request.added.append("1 picture" if sent == 1 else f"{sent} pictures")


class PicturesFeature(QObject):
    """Attach, show and send pictures (tests call :meth:`attach_files` and :meth:`receive`)."""

    def __init__(self, page: ChatsPage, controller: ChatController, models: LocalModels, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.page = page
        self.controller = controller
        self.models = models
        self.images = controller.store.images
        self._pending: dict[int, list[PendingPicture]] = {}
        self.row = QWidget()  # the composer's attachments: the button, then a thumbnail per picture
        self.row.setObjectName("pictureRow")
        layout = QHBoxLayout(self.row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        self.attach_button = QToolButton()
        self.attach_button.setObjectName("attachPictureButton")
        self.attach_button.setText("+ Picture")
        self.attach_button.clicked.connect(self.choose_files)
        layout.addWidget(self.attach_button)
        self.thumbs = QHBoxLayout()
        self.thumbs.setSpacing(4)
        layout.addLayout(self.thumbs)
        self.message = QLabel()
        self.message.setObjectName("Muted")
        self.message.setWordWrap(True)
        layout.addWidget(self.message, 1)
        page.add_attachment(self.row)
        page.add_attachment_source(self)
        controller.add_preparer(PicturesPreparer(self.images, self.sees))
        page.pictures_received.connect(self.receive)
        page.chat_opened.connect(lambda _id: self.refresh())
        page.chat_model_changed.connect(lambda _id, _m: self.refresh())
        models.changed.connect(lambda _m: self.refresh())
        self.refresh()

    # -- what the chat's model can take ---------------------------------------------------------
    def sees(self, model: str) -> bool:
        """Whether ``model`` takes pictures: a local one with a projector that sees; a provider's decides itself."""
        info = self.models.get(model)
        if info is None:
            return True  # a provider's model (or one not listed yet): the worker or the provider says
        return "vision" in info.capabilities

    def _model(self) -> str | None:
        chat = self.controller.chat(self.page.chat_id) if self.page.chat_id is not None else None
        return chat.settings.model if chat is not None else None

    def refresh(self) -> None:
        """The button and thumbnails for the chat on screen."""
        model = self._model()
        can = model is not None and self.sees(model)
        self.attach_button.setEnabled(can)
        self.attach_button.setToolTip(
            "Attach pictures (or paste or drop them on the message box)"
            if can
            else f"{model} cannot see pictures; pick a model marked “vision” to attach them."
        )
        while self.thumbs.count():
            item = self.thumbs.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        for index, picture in enumerate(self._pending.get(self.page.chat_id, [])):
            self.thumbs.addWidget(self._thumb(index, picture))
        if can and self.message.text().startswith(f"{model} cannot"):
            self.message.clear()

    def _thumb(self, index: int, picture: PendingPicture) -> QWidget:
        button = QToolButton()
        button.setObjectName("pendingPicture")
        button.setIcon(thumbnail(picture.data))
        button.setIconSize(QSize(THUMB, THUMB))
        button.setToolTip(f"{picture.name or 'Picture'} ({picture.width}×{picture.height}); click to remove")
        button.clicked.connect(lambda _c=False, i=index: self.remove(i))
        return button

    # -- attaching ------------------------------------------------------------------------------
    def choose_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self.page, "Attach pictures", "", "Pictures (*.png *.jpg *.jpeg *.webp *.gif *.bmp)")
        self.attach_files([Path(p) for p in paths])

    def attach_files(self, paths: list[Path]) -> None:
        for path in paths:
            try:
                data = path.read_bytes()
            except OSError as exc:
                self._say(f"{path.name} cannot be read ({exc.strerror}); attach another file.")
                continue
            self._attach(data, path.name)

    def receive(self, source: QMimeData) -> None:
        """Pictures pasted or dropped on the message box."""
        files = [Path(u.toLocalFile()) for u in source.urls() if u.isLocalFile()]
        if files:
            self.attach_files(files)
        elif source.hasImage():
            image = QImage(source.imageData())
            if not image.isNull():
                self._attach(png_bytes(image), "pasted.png")

    def _attach(self, data: bytes, name: str) -> None:
        model = self._model()
        if self.page.chat_id is None or model is None:
            return
        if not self.sees(model):
            self._say(f"{model} cannot see pictures; pick a model marked “vision” to attach them.")
            return
        try:
            picture = picture_from_bytes(data, name)
        except ValueError as exc:
            self._say(str(exc))
            return
        self._pending.setdefault(self.page.chat_id, []).append(picture)
        self.message.clear()
        self.refresh()

    def remove(self, index: int) -> None:
        pending = self._pending.get(self.page.chat_id, [])
        if 0 <= index < len(pending):
            del pending[index]
        self.refresh()

    def _say(self, text: str) -> None:
        self.message.setText(text)

    # -- sending (the page's attachment source) -------------------------------------------------
    def pending(self, chat_id: int) -> tuple[ImageRef, ...]:
        refs = []
        for p in self._pending.get(chat_id, []):
            try:
                refs.append(self.images.put(p.data, p.mime, width=p.width, height=p.height, name=p.name))
            except (OSError, ValueError) as exc:
                log.warning("a picture could not be kept: %s", exc)
                self._say(f"{p.name or 'A picture'} could not be kept ({exc}); it was not sent.")
        return tuple(refs)

    def sent(self, chat_id: int) -> None:
        self._pending.pop(chat_id, None)
        self.refresh()


__all__ = ["PendingPicture", "PicturesFeature", "PicturesPreparer", "picture_from_bytes"]
