"""Light and dark themes that follow the system (QStyleHints.colorScheme), or a fixed choice.

One palette of named colours per theme; the style sheet and the Markdown renderer both read
from it, so a scheme change re-styles widgets and re-renders chat bubbles alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from app.icons import icon_file


@dataclass(frozen=True, slots=True)
class ThemeColors:
    dark: bool
    window: str
    sidebar: str
    rail: str
    surface: str
    raised: str
    border: str
    text: str
    muted: str
    accent: str
    accent_text: str
    user_bubble: str
    code_bg: str
    code_header: str
    warning_bg: str
    warning_text: str
    error_text: str
    success: str
    pygments_style: str


LIGHT = ThemeColors(
    dark=False, window="#ffffff", sidebar="#f5f6f9", rail="#eceef3", surface="#ffffff", raised="#f0f2f7",
    border="#e1e4ec", text="#1c1f2b", muted="#6a7084", accent="#4f5bd5", accent_text="#ffffff",
    user_bubble="#eceefe", code_bg="#f6f8fa", code_header="#eaedf2", warning_bg="#fff4d6",
    warning_text="#6b4e00", error_text="#c0392b", success="#2e9d5b", pygments_style="default",
)  # fmt: skip
DARK = ThemeColors(
    dark=True, window="#17181e", sidebar="#1d1f27", rail="#14151a", surface="#22242d", raised="#2a2d38",
    border="#2f3240", text="#e7e8ef", muted="#9a9eb2", accent="#7b87ff", accent_text="#ffffff",
    user_bubble="#2c3150", code_bg="#1b1d24", code_header="#262934", warning_bg="#4a3b12",
    warning_text="#ffe7a3", error_text="#ff7b6b", success="#4cc38a", pygments_style="monokai",
)  # fmt: skip


def style_sheet(c: ThemeColors) -> str:
    return f"""
QWidget {{ color: {c.text}; font-size: 10pt; }}
QMainWindow, QDialog, #Page {{ background: {c.window}; }}
#NavRail {{ background: {c.rail}; border-right: 1px solid {c.border}; }}
#NavRail QToolButton {{ border: none; border-radius: 10px; padding: 8px 4px; color: {c.muted}; font-size: 8pt; }}
#NavRail QToolButton:hover {{ background: {c.raised}; }}
#NavRail QToolButton:checked {{ background: {c.raised}; color: {c.text}; }}
#Sidebar {{ background: {c.sidebar}; border-right: 1px solid {c.border}; }}
#Sidebar QListView {{ background: transparent; border: none; outline: none; }}
#Sidebar QListView::item {{ padding: 8px 10px; border-radius: 8px; margin: 1px 0; }}
#Sidebar QListView::item:hover {{ background: {c.raised}; }}
#Sidebar QListView::item:selected {{ background: {c.raised}; color: {c.text}; font-weight: 600; }}
QLineEdit, QPlainTextEdit, QTextEdit, QSpinBox, QDoubleSpinBox, QComboBox {{
    background: {c.surface}; border: 1px solid {c.border}; border-radius: 8px; padding: 6px 8px;
    selection-background-color: {c.accent}; selection-color: {c.accent_text}; }}
QLineEdit:focus, QPlainTextEdit:focus, QSpinBox:focus, QDoubleSpinBox:focus, QComboBox:focus {{ border-color: {c.accent}; }}
QComboBox {{ padding-right: 26px; }}
QComboBox::drop-down {{ subcontrol-origin: padding; subcontrol-position: center right; border: none; width: 22px; }}
QComboBox::down-arrow {{ image: url("{icon_file("chevron-down", c.muted)}"); width: 12px; height: 12px; }}
QComboBox QAbstractItemView {{ background: {c.surface}; border: 1px solid {c.border}; selection-background-color: {c.raised}; }}
QPushButton {{ background: {c.raised}; border: 1px solid {c.border}; border-radius: 8px; padding: 6px 14px; }}
QPushButton:hover {{ border-color: {c.accent}; }}
QPushButton:disabled {{ color: {c.muted}; }}
QPushButton[primary="true"] {{ background: {c.accent}; color: {c.accent_text}; border: 1px solid {c.accent}; font-weight: 600; }}
QPushButton[primary="true"]:disabled {{ background: {c.raised}; color: {c.muted}; border-color: {c.border}; }}
QPushButton[danger="true"] {{ color: {c.error_text}; }}
QPushButton[danger="true"]:disabled {{ color: {c.muted}; }}
QToolButton {{ background: transparent; border: none; border-radius: 6px; padding: 4px; color: {c.muted}; }}
QToolButton:hover {{ background: {c.raised}; color: {c.text}; }}
#Composer {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 14px; }}
#Composer QPlainTextEdit {{ border: none; background: transparent; padding: 4px; }}
#UserBubble {{ background: {c.user_bubble}; border-radius: 14px; }}
#AnswerBubble {{ background: transparent; }}
#CodeBlock {{ background: {c.code_bg}; border: 1px solid {c.border}; border-radius: 10px; }}
#CodeHeader {{ background: {c.code_header}; border-top-left-radius: 10px; border-top-right-radius: 10px; }}
#CodeHeader QToolButton {{ font-size: 9pt; padding: 2px 6px; }}
#CodeScroll, #CodeScroll > QWidget, #CodeScroll QLabel {{ background: transparent; }}
#Muted, QLabel[muted="true"] {{ color: {c.muted}; }}
#Notice {{ color: {c.muted}; background: {c.raised}; border-radius: 8px; padding: 4px 10px; }}
#Banner {{ background: {c.warning_bg}; border-bottom: 1px solid {c.border}; }}
#Banner QLabel {{ color: {c.warning_text}; font-weight: 600; }}
#Banner[level="error"] {{ background: {c.warning_bg}; }}
#Card {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 12px; }}
#PageTitle {{ font-size: 16pt; font-weight: 700; }}
#SectionTitle {{ font-size: 11pt; font-weight: 700; }}
#ChatHeader {{ border-bottom: 1px solid {c.border}; }}
#ChatTitle {{ font-size: 12pt; font-weight: 700; }}
QScrollArea, #ChatCanvas {{ background: {c.window}; border: none; }}
QTableView, QTreeView, QListWidget {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 10px;
    gridline-color: {c.border}; selection-background-color: {c.raised}; selection-color: {c.text}; alternate-background-color: {c.sidebar}; }}
QHeaderView::section {{ background: {c.sidebar}; color: {c.muted}; border: none; border-bottom: 1px solid {c.border}; padding: 6px 8px; font-weight: 600; }}
QProgressBar {{ background: {c.raised}; border: none; border-radius: 5px; height: 10px; text-align: center; color: transparent; }}
QProgressBar::chunk {{ background: {c.accent}; border-radius: 5px; }}
QAbstractSpinBox::up-button, QAbstractSpinBox::down-button {{ width: 0px; border: none; }}
QTabWidget::pane {{ border: none; }}
QTabBar {{ qproperty-drawBase: 0; }}
QTabBar::tab {{ background: transparent; padding: 8px 14px; color: {c.muted}; border-bottom: 2px solid transparent; }}
QTabBar::tab:selected {{ color: {c.text}; border-bottom: 2px solid {c.accent}; font-weight: 600; }}
QScrollBar:vertical {{ background: transparent; width: 10px; margin: 0; }}
QScrollBar::handle:vertical {{ background: {c.border}; border-radius: 5px; min-height: 30px; }}
QScrollBar:horizontal {{ background: transparent; height: 10px; margin: 0; }}
QScrollBar::handle:horizontal {{ background: {c.border}; border-radius: 5px; min-width: 30px; }}
QScrollBar::add-line, QScrollBar::sub-line {{ height: 0; width: 0; }}
QMenu {{ background: {c.surface}; border: 1px solid {c.border}; padding: 4px; }}
QMenu::item {{ padding: 6px 18px; border-radius: 6px; }}
QMenu::item:selected {{ background: {c.raised}; }}
QToolTip {{ background: {c.surface}; color: {c.text}; border: 1px solid {c.border}; }}
"""


def palette(c: ThemeColors) -> QPalette:
    p = QPalette()
    for role, value in (
        (QPalette.ColorRole.Window, c.window),
        (QPalette.ColorRole.Base, c.surface),
        (QPalette.ColorRole.AlternateBase, c.sidebar),
        (QPalette.ColorRole.Text, c.text),
        (QPalette.ColorRole.WindowText, c.text),
        (QPalette.ColorRole.ButtonText, c.text),
        (QPalette.ColorRole.Button, c.raised),
        (QPalette.ColorRole.Highlight, c.accent),
        (QPalette.ColorRole.HighlightedText, c.accent_text),
        (QPalette.ColorRole.Link, c.accent),
        (QPalette.ColorRole.PlaceholderText, c.muted),
        (QPalette.ColorRole.ToolTipBase, c.surface),
        (QPalette.ColorRole.ToolTipText, c.text),
    ):
        p.setColor(role, QColor(value))
    return p


class ThemeManager(QObject):
    """Applies the theme to the application and re-applies it when the system scheme changes.

    Args:
        choice: "system", "light" or "dark".
    """

    changed = Signal(ThemeColors)

    def __init__(self, choice: str = "system", parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.choice = choice
        self.colors = LIGHT
        QGuiApplication.styleHints().colorSchemeChanged.connect(lambda _scheme: self.apply())

    def system_is_dark(self) -> bool:
        return QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark

    def resolve(self) -> ThemeColors:
        if self.choice == "dark" or (self.choice == "system" and self.system_is_dark()):
            return DARK
        return LIGHT

    def set_choice(self, choice: str) -> None:
        self.choice = choice
        self.apply()

    def apply(self) -> ThemeColors:
        colors = self.resolve()
        app = QApplication.instance()
        if app is not None:
            app.setStyle("Fusion")
            app.setPalette(palette(colors))
            app.setStyleSheet(style_sheet(colors))
        changed = colors is not self.colors
        self.colors = colors
        if changed:
            self.changed.emit(colors)
        return colors
