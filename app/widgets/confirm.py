"""A question before something that cannot be undone (deleting a chat or a model, removing a provider)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QMessageBox, QWidget


def confirm(
    parent: QWidget,
    title: str,
    text: str,
    action: str,
    on_confirm: Callable[[], None],
    *,
    icon: QMessageBox.Icon = QMessageBox.Icon.Question,
) -> QMessageBox:
    """Open a window-modal box with Cancel and ``action``; ``on_confirm`` runs when ``action`` is chosen."""
    box = QMessageBox(icon, title, text, parent=parent)
    box.setStandardButtons(QMessageBox.StandardButton.Cancel | QMessageBox.StandardButton.Yes)
    box.button(QMessageBox.StandardButton.Yes).setText(action)
    box.accepted.connect(on_confirm)
    box.open()
    return box
