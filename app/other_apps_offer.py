"""The first-run question about other apps' models: once the engine is first ready, if Ollama, LM Studio, Jan,
GPT4All or the Hugging Face cache keep models Hearth does not list yet, the app asks once ("Found 14 models
from Ollama and LM Studio (96.0 GB). Use them in Hearth?"). A yes registers them in place (their files stay
where they are, and Hearth keeps in step with those apps); either answer is remembered."""

from __future__ import annotations

import logging
from dataclasses import replace

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from app.net.api import HearthApi
from app.net.catalog_types import OtherAppsFound
from app.net.client import ApiError
from app.net.engine import EngineController, EngineState
from app.net.local_models import LocalModels
from app.store.settings_store import SettingsStore

log = logging.getLogger(__name__)

DETAIL = "Hearth reads their files where they are and never moves or deletes them."


class OtherAppsOffer(QObject):
    """Asks once, over ``window``, whether to use the models other apps keep.

    Signals:
        added: the names registered after a yes.
    """

    added = Signal(list)

    def __init__(
        self, api: HearthApi, engine: EngineController, models: LocalModels, settings: SettingsStore, window: QWidget
    ) -> None:
        super().__init__(window)
        self.api = api
        self.models = models
        self.settings = settings
        self.window = window
        self.box: QMessageBox | None = None
        self._checked = settings.load().other_apps_offered
        engine.state_changed.connect(self._on_engine_state)
        self._on_engine_state(engine.state)

    def _on_engine_state(self, state: EngineState) -> None:
        if state.ready and not self._checked:
            self._checked = True  # once per launch at most, and never again once answered
            call = self.api.other_apps()
            call.succeeded.connect(self._found)
            call.failed.connect(lambda error: log.info("could not look for other apps' models: %s", error.message))

    def _found(self, found: OtherAppsFound) -> None:
        if not found.models:
            return  # nothing to ask about yet: asked on a later launch, once there is
        box = QMessageBox(QMessageBox.Icon.Question, "Models from other apps", f"{found.summary} Use them in Hearth?", parent=self.window)
        box.setInformativeText(DETAIL)
        box.setDetailedText("\n".join(f"{m.name} ({m.origin_label}, {m.size_bytes / 1e9:.1f} GB)" for m in found.models))
        use = box.addButton("Use them", QMessageBox.ButtonRole.AcceptRole)
        box.addButton("Not now", QMessageBox.ButtonRole.RejectRole)
        box.setDefaultButton(use)
        box.finished.connect(lambda _result: self._answered(box.clickedButton() is use))
        self.box = box
        box.open()

    def _answered(self, yes: bool) -> None:
        self.settings.save(replace(self.settings.load(), other_apps_offered=True))
        self.box = None
        if not yes:
            return
        call = self.api.accept_other_apps()
        call.succeeded.connect(self._accepted)
        call.failed.connect(self._failed)

    def _accepted(self, names: list[str]) -> None:
        self.models.refresh()
        self.added.emit(names)

    def _failed(self, error: ApiError) -> None:
        box = QMessageBox(
            QMessageBox.Icon.Warning, "Models from other apps",
            f"{error.message} Run `hearth models --scan` in a terminal to try again.", parent=self.window,
        )  # fmt: skip
        self.box = box
        box.open()
