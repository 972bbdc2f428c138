"""The Local API page: share the OpenAI-compatible API with other apps, and watch it work.

Applying restarts the worker with the chosen port and key (the app keeps its own token);
answers that are streaming at that moment end where they are, and are kept.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, replace

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.net.api import HearthApi
from app.net.engine import EngineConfig, EngineController, EngineState
from app.net.types import Metrics, StatsSnapshot
from app.pages.hardware_page import card
from app.store.records import AppSettings
from app.store.settings_store import SettingsStore
from app.theme import ThemeColors
from app.units import counted
from app.widgets.example_box import ExampleBox
from app.widgets.toggle import ToggleSwitch

POLL_MS = 1000


def curl_example(base_url: str, key: str, model: str) -> str:
    auth = f' \\\n  -H "Authorization: Bearer {key}"' if key else ""
    return (
        f"curl {base_url}/chat/completions{auth} \\\n"
        '  -H "Content-Type: application/json" \\\n'
        f'  -d \'{{"model": "{model}", "messages": [{{"role": "user", "content": "Hello!"}}], "max_tokens": 256}}\''
    )


@dataclass(frozen=True, slots=True)
class Dialect:
    """One of the APIs the port speaks besides chat completions: who uses it, and a request to copy."""

    name: str
    clients: str
    example: str


def dialect_examples(port: int, key: str, model: str) -> list[Dialect]:
    """The Anthropic, Responses and Ollama dialects with a working curl example each."""
    root = f"http://127.0.0.1:{port}"
    bearer = f' \\\n  -H "Authorization: Bearer {key}"' if key else ""
    hello = '[{"role": "user", "content": "Hello!"}]'
    token = f" ANTHROPIC_AUTH_TOKEN={key}" if key else ""
    anthropic_key = f' -H "x-api-key: {key}"' if key else ""
    return [
        Dialect(
            "Anthropic Messages (/v1/messages)",
            f"Claude Code (ANTHROPIC_BASE_URL={root}{token} claude) and other apps on Anthropic's SDK",
            f"curl {root}/v1/messages{anthropic_key} -H \"anthropic-version: 2023-06-01\" \\\n"
            '  -H "Content-Type: application/json" \\\n'
            f'  -d \'{{"model": "{model}", "max_tokens": 256, "messages": {hello}}}\'',
        ),
        Dialect(
            "OpenAI Responses (/v1/responses)",
            f"Codex and apps on OpenAI's newer SDKs (client.responses, base URL {root}/v1)",
            f"curl {root}/v1/responses{bearer} \\\n"
            '  -H "Content-Type: application/json" \\\n'
            f'  -d \'{{"model": "{model}", "input": "Hello!", "max_output_tokens": 256}}\'',
        ),
        Dialect(
            "Ollama (/api/chat, /api/tags, ...)",
            f"Open WebUI, VS Code Copilot Chat's Ollama provider, Page Assist, Continue and Aider: Ollama address {root}",
            f"curl {root}/api/chat{bearer} \\\n"
            f'  -d \'{{"model": "{model}", "messages": {hello}, "options": {{"num_predict": 256}}}}\'',
        ),
    ]


class ApiPage(QWidget):
    applied = Signal(AppSettings)

    def __init__(
        self, api: HearthApi, engine: EngineController, settings: SettingsStore, colors: ThemeColors, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("Page")
        self.api = api
        self.engine = engine
        self.settings_store = settings
        self.colors = colors
        self.model_name = "smollm2-135m-instruct"
        self._last: tuple[float, int] | None = None
        scroll = QScrollArea(self)
        scroll.setWidgetResizable(True)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)
        body = QWidget()
        body.setObjectName("Page")
        scroll.setWidget(body)
        column = QVBoxLayout(body)
        column.setContentsMargins(28, 22, 28, 22)
        column.setSpacing(14)
        title = QLabel("Local API")
        title.setObjectName("PageTitle")
        column.addWidget(title)
        column.addWidget(self._share_card())
        column.addWidget(self._connect_card())
        column.addWidget(self._dialects_card())
        column.addWidget(self._live_card())
        column.addStretch(1)
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        self._restarting = False  # Apply restarted the engine and it has not said how that went yet
        engine.state_changed.connect(self._on_engine_state)
        self.load(settings.load())

    # -- building -----------------------------------------------------------------------------
    def _share_card(self):
        frame, col = card("Share with other apps")
        self.expose = ToggleSwitch("Let other apps on this computer use Hearth's OpenAI-compatible API", self.colors)
        self.expose.setObjectName("exposeSwitch")
        col.addWidget(self.expose)
        grid = QGridLayout()
        grid.setHorizontalSpacing(12)
        self.port = QSpinBox()
        self.port.setObjectName("apiPort")
        self.port.setRange(1024, 65535)
        self.port.setMaximumWidth(140)
        self.key = QLineEdit()
        self.key.setObjectName("apiKey")
        self.key.setPlaceholderText("none: any app may connect")
        generate = QPushButton("Generate")
        generate.clicked.connect(lambda: self.key.setText("sk-hearth-" + secrets.token_urlsafe(18)))
        self.cors = QLineEdit()
        self.cors.setObjectName("corsOrigins")
        self.cors.setPlaceholderText("e.g. http://localhost:3000, https://my.app (for web pages)")
        self.lan = ToggleSwitch("Also accept other computers on the network", self.colors)
        self.lan.setObjectName("lanSwitch")
        grid.addWidget(QLabel("Port"), 0, 0)
        grid.addWidget(self.port, 0, 1, Qt.AlignmentFlag.AlignLeft)
        grid.addWidget(QLabel("API key"), 1, 0)
        key_row = QHBoxLayout()
        key_row.addWidget(self.key, 1)
        key_row.addWidget(generate)
        grid.addLayout(key_row, 1, 1)
        grid.addWidget(QLabel("CORS origins"), 2, 0)
        grid.addWidget(self.cors, 2, 1)
        grid.setColumnStretch(1, 1)
        col.addLayout(grid)
        col.addWidget(self.lan)
        row = QHBoxLayout()
        self.status = QLabel()
        self.status.setObjectName("Muted")
        self.status.setWordWrap(True)  # why a restart failed can be a sentence or two
        row.addWidget(self.status, 1)
        self.apply_button = QPushButton("Apply")
        self.apply_button.setObjectName("applyApi")
        self.apply_button.setProperty("primary", True)
        self.apply_button.clicked.connect(self.apply)
        row.addWidget(self.apply_button)
        col.addLayout(row)
        # below Apply: the warning comes and goes as sharing is switched, and Apply stays under the pointer
        self.warning = QLabel()
        self.warning.setWordWrap(True)
        col.addWidget(self.warning)
        for signal in (self.expose.toggled, self.lan.toggled, self.key.textChanged, self.port.valueChanged, self.cors.textChanged):
            signal.connect(self._refresh_texts)
        return frame

    def _connect_card(self):
        frame, col = card("Connect")
        row = QHBoxLayout()
        self.base_url = QLabel()
        self.base_url.setObjectName("baseUrl")
        self.base_url.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row.addWidget(QLabel("Base URL"))
        row.addWidget(self.base_url, 1)
        copy_url = QPushButton("Copy")
        copy_url.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.current_base_url()))
        row.addWidget(copy_url)
        col.addLayout(row)
        self.curl = ExampleBox(96)
        self.curl.setObjectName("curlExample")
        col.addWidget(self.curl)
        copy_curl = QPushButton("Copy curl example")
        copy_curl.setObjectName("copyCurl")
        copy_curl.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.curl.toPlainText()))
        col.addWidget(copy_curl, 0, Qt.AlignmentFlag.AlignRight)
        return frame

    def _dialects_card(self):
        frame, col = card("Other APIs on the same port")
        note = QLabel("Apps that do not speak chat completions connect here too, with the same models and key.")
        note.setObjectName("Muted")
        note.setWordWrap(True)
        col.addWidget(note)
        self.dialects: list[tuple[QLabel, QPlainTextEdit, QPushButton]] = []
        for i in range(3):
            title = QLabel()
            title.setWordWrap(True)
            title.setObjectName(f"dialectTitle{i}")
            example = ExampleBox(80)
            example.setObjectName(f"dialectExample{i}")
            copy = QPushButton("Copy example")
            copy.setObjectName(f"copyDialect{i}")
            copy.clicked.connect(lambda _=False, box=example: QGuiApplication.clipboard().setText(box.toPlainText()))
            col.addWidget(title)
            col.addWidget(example)
            col.addWidget(copy, 0, Qt.AlignmentFlag.AlignRight)
            self.dialects.append((title, example, copy))
        return frame

    def _live_card(self):
        frame, col = card("Live")
        self.live = QLabel("—")
        self.live.setObjectName("liveStats")
        self.live.setWordWrap(True)
        col.addWidget(self.live)
        self.loaded = QLabel()
        self.loaded.setObjectName("loadedModels")
        self.loaded.setWordWrap(True)
        col.addWidget(self.loaded)
        return frame

    # -- settings -----------------------------------------------------------------------------
    def load(self, s: AppSettings) -> None:
        self.settings = s
        self.expose.setChecked(s.expose_api)
        self.port.setValue(s.port)
        self.key.setText(s.api_key)
        self.cors.setText(", ".join(s.cors_origins))
        self.lan.setChecked(s.lan)
        self._refresh_texts()

    def edited(self, base: AppSettings | None = None) -> AppSettings:
        """``base`` (the settings the page shows, by default) with this page's fields as edited."""
        origins = tuple(o.strip() for o in self.cors.text().split(",") if o.strip())
        return replace(
            self.settings if base is None else base, expose_api=self.expose.isChecked(), port=self.port.value(),
            api_key=self.key.text().strip(), cors_origins=origins, lan=self.lan.isChecked(),
        )  # fmt: skip

    def current_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port.value()}/v1"

    def _refresh_texts(self, *_args) -> None:
        s = self.edited()
        self.base_url.setText(self.current_base_url() if s.expose_api else f"{self.current_base_url()} (after you share it)")
        self.curl.setPlainText(curl_example(self.current_base_url(), s.api_key, self.model_name))
        for (title, example, _), d in zip(self.dialects, dialect_examples(self.port.value(), s.api_key, self.model_name), strict=True):
            title.setText(f"<b>{d.name}</b> — {d.clients}")
            example.setPlainText(d.example)
        c = self.colors
        if s.expose_api and s.lan and not s.api_key:
            warn = f'<span style="color:{c.error_text};">Anyone on your network could use your models: set an API key.</span>'
        elif s.expose_api and not s.api_key:
            warn = f'<span style="color:{c.muted};">Without a key, any app on this computer can chat with your models (web pages cannot); only Hearth manages them.</span>'
        else:
            warn = ""
        self.warning.setText(warn)
        self.warning.setVisible(bool(warn))
        changed = s != self.settings
        self.apply_button.setEnabled(changed)
        self.status.setText("Apply restarts the engine with these settings." if changed else self._shared_text())

    def _shared_text(self) -> str:
        if not self.settings.expose_api:
            return "Not shared: only this app uses the engine."
        where = "this computer and the network" if self.settings.lan else "this computer"
        return f"Shared with other apps on {where} at {self.current_base_url()}."

    def apply(self) -> None:
        new = self.edited(self.settings_store.load())  # what other pages saved meanwhile (the theme) stays
        self.settings_store.save(new)
        self.settings = new
        old = self.engine.config
        self.engine.apply(
            EngineConfig.from_settings(new, extra_args=old.extra_args, env=old.env, startup_timeout=old.startup_timeout, model=old.model)
        )
        self._refresh_texts()
        self.status.setText("Restarting the engine with the new settings…")
        self._restarting = True
        self.applied.emit(new)

    def _on_engine_state(self, state: EngineState) -> None:
        """The status line follows the restart Apply began: shared once it is ready, why not where it failed."""
        if not self._restarting or state.kind not in ("ready", "failed"):
            return
        self._restarting = False
        if state.kind == "ready":
            self._refresh_texts()
            return
        why = state.detail.splitlines()[0] if state.detail else "it stopped"
        self.status.setText(f"The engine did not start with these settings: {why}")

    # -- live numbers -------------------------------------------------------------------------
    def set_colors(self, colors: ThemeColors) -> None:
        self.colors = colors
        self.expose.set_colors(colors)
        self.lan.set_colors(colors)
        self._refresh_texts()

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        self.timer.start()
        self.poll()
        super().showEvent(event)

    def hideEvent(self, event) -> None:  # noqa: N802 - Qt override
        self.timer.stop()
        super().hideEvent(event)

    def poll(self) -> None:
        if not self.engine.root_url:
            self.live.setText("The engine is not running right now.")
            return
        stats = self.api.stats()
        stats.succeeded.connect(self._stats)
        metrics = self.api.metrics()
        metrics.succeeded.connect(self._metrics)

    def _stats(self, s: StatsSnapshot) -> None:
        now = time.monotonic()
        rate = 0.0
        if self._last is not None and now > self._last[0]:
            rate = max(0, s.generated_tokens - self._last[1]) / (now - self._last[0])
        self._last = (now, s.generated_tokens)
        self.live.setText(f"<b>{s.requests_in_flight}</b> {'request' if s.requests_in_flight == 1 else 'requests'} in flight · <b>{rate:.1f}</b> tokens/s now")
        if s.models:
            names = ", ".join(f"{m.name} ({m.backend}, {m.running} running, {m.waiting} waiting)" for m in s.models)
            self.loaded.setText(f"Loaded: {names}")
            self.model_name = s.models[0].name
        else:
            self.loaded.setText("No model loaded; the first request loads one.")

    def _metrics(self, m: Metrics) -> None:
        if self.edited() != self.settings:
            return  # the status line is telling about unapplied changes
        ttft = f" · mean first token {m.mean_ttft * 1000:.0f} ms" if m.mean_ttft is not None else ""
        self.status.setText(f"{self._shared_text()} {counted(int(m.requests_total), 'request')} served{ttft}.")
