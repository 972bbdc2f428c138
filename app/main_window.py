"""MainWindow: the navigation rail, the four pages, and the banner for the engine's troubles."""

from __future__ import annotations

import logging
from dataclasses import replace

from PySide6.QtCore import QTimer
from PySide6.QtGui import QCloseEvent, QGuiApplication
from PySide6.QtWidgets import QHBoxLayout, QMainWindow, QStackedWidget, QVBoxLayout, QWidget

from app.agent.service import AgentService
from app.agent.steps import import_legacy_steps
from app.agent.turn_client import QtTurnClient
from app.chat.controller import ChatController
from app.disk_full import DiskFullNotice
from app.features import DocumentsFeature, PicturesFeature, ToolsFeature
from app.icons import app_icon
from app.net.api import HearthApi
from app.net.engine import EngineController, EngineState
from app.net.local_models import LocalModels
from app.other_apps_offer import OtherAppsOffer
from app.pages.api_page import ApiPage
from app.pages.chats_page import ChatsPage
from app.pages.hardware_page import HardwarePage
from app.pages.models_page import ModelsPage
from app.store.chat_store import ChatStore
from app.store.settings_store import SettingsStore
from app.theme import ThemeColors, ThemeManager
from app.widgets.banner import Banner
from app.widgets.nav_rail import NavRail

log = logging.getLogger(__name__)

CRASH_TEXT = "The engine stopped; restarting…"
FRAME = (16, 40)  # room left for a window manager's frame around the window (width, height)


class MainWindow(QMainWindow):
    """The app's window over a store and a running (or starting) engine; owns neither."""

    SIZE = (1280, 820)  # the first size, on a screen with room for it
    MINIMUM = (900, 600)

    def _fit_to_screen(self) -> None:
        """The first size and the least, each held to the screen's room (a 1024 x 700 screen, a large scale), so the
        window never opens wider or taller than the screen; centred on it."""
        screen = self.screen() or QGuiApplication.primaryScreen()
        room = screen.availableGeometry() if screen is not None else None
        if room is None or room.width() <= 0 or room.height() <= 0:
            self.resize(*self.SIZE)
            self.setMinimumSize(*self.MINIMUM)
            return
        fits_w, fits_h = room.width() - FRAME[0], room.height() - FRAME[1]  # the frame's title bar and borders too
        self.setMinimumSize(min(self.MINIMUM[0], fits_w), min(self.MINIMUM[1], fits_h))
        width, height = min(self.SIZE[0], fits_w), min(self.SIZE[1], fits_h)
        self.resize(width, height)
        self.move(room.x() + (room.width() - width) // 2, room.y() + (room.height() - height - FRAME[1]) // 2)

    def __init__(self, *, store: ChatStore, engine: EngineController, theme: ThemeManager) -> None:
        super().__init__()
        self.setWindowTitle("Hearth")
        self.setWindowIcon(app_icon())
        self._fit_to_screen()
        self.store = store
        self.engine = engine
        self.theme = theme
        self.settings_store = SettingsStore(store)
        self.api = HearthApi(engine, self)
        self.models = LocalModels(self.api, self)
        self.controller = ChatController(store, self.api, self)
        colors = theme.colors
        self.banner = Banner(colors)
        self.nav = NavRail(colors)
        self.chats = ChatsPage(self.controller, self.models, colors)
        self.models_page = ModelsPage(self.api, self.models, colors, settings=self.settings_store)
        self.hardware = HardwarePage(self.api, self.models, colors)
        self.api_page = ApiPage(self.api, engine, self.settings_store, colors)
        self.pages = QStackedWidget()
        for page in (self.chats, self.models_page, self.hardware, self.api_page):
            self.pages.addWidget(page)
        central = QWidget()
        row = QHBoxLayout(central)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(0)
        row.addWidget(self.nav)
        column = QVBoxLayout()
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(self.banner)
        column.addWidget(self.pages, 1)
        row.addLayout(column, 1)
        self.setCentralWidget(central)
        self.nav.page_selected.connect(self.pages.setCurrentIndex)
        self.nav.theme_chosen.connect(self.choose_theme)
        self.controller.answer_finished.connect(self._answer_finished)
        engine.state_changed.connect(self.on_engine_state)
        theme.changed.connect(self.set_colors)
        self.on_engine_state(engine.state)
        if store.problem:
            self.banner.show_message(store.problem, level="error")
        self.disk_full = DiskFullNotice(store, self.banner, self)
        self.other_apps = OtherAppsOffer(self.api, engine, self.models, self.settings_store, self)
        self.docs = DocumentsFeature(self.chats, self.controller, self.api, parent=self)
        import_legacy_steps(store.path.parent, store)
        self.agent = AgentService(store.path.parent, parent=self)
        self.pictures = PicturesFeature(self.chats, self.controller, self.models, parent=self)
        self.tools = ToolsFeature(self.chats, self.controller, self.agent, QtTurnClient(self.api, self), parent=self)

    # -- engine -------------------------------------------------------------------------------
    def on_engine_state(self, state: EngineState) -> None:
        self.chats.set_engine_ready(state.ready, state.detail)
        if state.kind in ("crashed", "restarting"):
            self.banner.show_message(CRASH_TEXT)
        elif state.kind == "failed":
            self.banner.show_message(
                f"{state.detail} The log is in {self.engine.log_path}." if self.engine.log_path else state.detail,
                level="error",
                action="Try again",
                on_action=lambda: self.engine.start(self.engine.config),
            )
        elif state.ready:
            if self.banner.text == CRASH_TEXT:
                self.banner.show_message("The engine restarted. Answers that were cut off are kept as far as they got.", level="info")
                QTimer.singleShot(6000, self.banner, self._hide_restart_notice)  # dropped if the window goes first
            elif self.store.problem:  # the chat database was locked or damaged: still worth knowing
                self.banner.show_message(self.store.problem, level="error")
            else:
                self.banner.hide()
            self.models_page.engine_ready()
            self.hardware.refresh()

    def _hide_restart_notice(self) -> None:
        if self.banner.text != CRASH_TEXT:
            self.banner.hide()

    def _answer_finished(self, outcome) -> None:
        if outcome.error is not None and outcome.error.status == 0 and not self.engine.state.ready:
            self.banner.show_message(CRASH_TEXT)

    # -- theme and closing --------------------------------------------------------------------
    def choose_theme(self, choice: str) -> None:
        """Use ``choice`` (system, light or dark) now and at every later launch."""
        settings = self.settings_store.load()
        self.settings_store.save(replace(settings, theme=choice))
        self.theme.set_choice(choice)

    def set_colors(self, colors: ThemeColors) -> None:
        self.nav.set_colors(colors)
        self.chats.set_colors(colors)
        self.models_page.set_colors(colors)
        self.hardware.set_colors(colors)
        self.api_page.set_colors(colors)
        self.banner.colors = colors

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self.chats.apply_pending_edits()
        self.controller.stop_all()  # each answer keeps its text, saved now
        self.api.cancel_all()  # nothing answers a page that is going
        self.agent.close()
        self.disk_full.close()
        super().closeEvent(event)
