"""NavRail: the narrow strip on the left that switches pages (Chats, Models, Hardware, Local API)."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QButtonGroup, QFrame, QLabel, QMenu, QToolButton, QVBoxLayout, QWidget

from app.icons import app_icon, icon
from app.theme import ThemeColors

PAGES = (("chat", "Chats"), ("models", "Models"), ("hardware", "Hardware"), ("api", "Local API"))
THEMES = (("system", "Follow the system"), ("light", "Light"), ("dark", "Dark"))


class NavRail(QFrame):
    page_selected = Signal(int)
    theme_chosen = Signal(str)  # system | light | dark

    def __init__(self, colors: ThemeColors, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("NavRail")
        self.setFixedWidth(88)
        column = QVBoxLayout(self)
        column.setContentsMargins(8, 12, 8, 12)
        column.setSpacing(6)
        logo = QLabel()
        logo.setPixmap(app_icon().pixmap(QSize(36, 36)))
        logo.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        logo.setToolTip("Hearth")
        column.addWidget(logo)
        column.addSpacing(10)
        self.group = QButtonGroup(self)
        self.group.setExclusive(True)
        self.buttons: list[QToolButton] = []
        for i, (name, label) in enumerate(PAGES):
            button = QToolButton()
            button.setObjectName(f"nav_{name}")
            button.setText(label)
            button.setCheckable(True)
            button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextUnderIcon)
            button.setIconSize(QSize(22, 22))
            button.setFixedWidth(72)
            button.setCursor(Qt.CursorShape.PointingHandCursor)
            self.group.addButton(button, i)
            self.buttons.append(button)
            column.addWidget(button, 0, Qt.AlignmentFlag.AlignHCenter)
        column.addStretch(1)
        self.theme_button = QToolButton()
        self.theme_button.setObjectName("themeButton")
        self.theme_button.setToolTip("Appearance")
        self.theme_button.setIconSize(QSize(20, 20))
        self.theme_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.theme_button)
        for value, label in THEMES:
            menu.addAction(label, lambda v=value: self.theme_chosen.emit(v))
        self.theme_button.setMenu(menu)
        self.theme_button.setStyleSheet("QToolButton::menu-indicator { image: none; width: 0; }")
        column.addWidget(self.theme_button, 0, Qt.AlignmentFlag.AlignHCenter)
        self.group.idClicked.connect(self.page_selected)
        self.buttons[0].setChecked(True)
        self.set_colors(colors)

    def select(self, index: int) -> None:
        self.buttons[index].setChecked(True)
        self.page_selected.emit(index)

    def set_colors(self, colors: ThemeColors) -> None:
        for button, (name, _label) in zip(self.buttons, PAGES, strict=True):
            button.setIcon(icon(name, colors.text if colors.dark else colors.muted))
        self.theme_button.setIcon(icon("theme", colors.muted))
