"""The smoke run behind ``hearth gui --smoke OUT.png``: one message end to end, measured.

It times the window's appearance from process start and watches the GUI thread while the
answer streams: a 5 ms precise timer records the longest gap between its ticks (a stall of
the event loop shows up as a long gap). Each gap is split by the GUI thread's own CPU time:
on a busy machine a gap can be the OS running other processes, not the app's work.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtWidgets import QApplication

from app.chat.answer_run import AnswerOutcome
from app.main_window import MainWindow
from app.net.engine import EngineState
from app.units import counted

log = logging.getLogger(__name__)

PROMPT = "Write a short Python function that reverses a string, then explain it in one sentence."
TICK_MS = 5
BASELINE_MS = 1000  # idle ticking before the message: how much the machine itself delays a timer
TIMEOUT_S = 300


@dataclass(frozen=True, slots=True)
class SmokeReport:
    ok: bool
    shown_after: float
    shown_cpu: float = 0.0  # CPU seconds the process had used by then (its own cost, load aside)
    engine_ready_after: float | None = None
    longest_stall_ms: float | None = None
    idle_stall_ms: float | None = None
    stall_cpu_ms: float | None = None  # the GUI thread's CPU time within the longest stall
    busiest_gap_cpu_ms: float | None = None  # the most CPU the GUI thread spent between two ticks
    tokens: int = 0
    tokens_per_second: float | None = None
    screenshot: str = ""
    error: str = ""

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def text(self) -> str:
        lines = [f"window shown: {self.shown_after:.2f} s after launch ({self.shown_cpu:.2f} s of CPU)"]
        if self.engine_ready_after is not None:
            lines.append(f"engine ready: {self.engine_ready_after:.2f} s after launch")
        if self.longest_stall_ms is not None:
            lines.append(f"longest GUI-thread stall while streaming: {self.longest_stall_ms:.1f} ms")
        if self.stall_cpu_ms is not None:
            lines.append(f"  of which the GUI thread was working: {self.stall_cpu_ms:.1f} ms")
            lines.append(f"longest stretch of GUI-thread work between two ticks: {self.busiest_gap_cpu_ms:.1f} ms")
        if self.idle_stall_ms is not None:
            lines.append(f"longest gap of the same timer before sending, idle (machine's own jitter): {self.idle_stall_ms:.1f} ms")
        if self.tokens:
            tps = f" at {self.tokens_per_second:.1f} tokens/s" if self.tokens_per_second else ""
            lines.append(f"answer: {counted(self.tokens, 'token')}{tps}")
        if self.screenshot:
            lines.append(f"screenshot: {self.screenshot}")
        if self.error:
            lines.append(f"error: {self.error}")
        return "\n".join(lines)


class SmokeRun(QObject):
    def __init__(self, window: MainWindow, *, out: str, shown_after: float, shown_cpu: float, launched_at: float) -> None:
        super().__init__(window)
        self.window = window
        self.out = out
        self.launched_at = launched_at
        self.report = SmokeReport(ok=False, shown_after=shown_after, shown_cpu=shown_cpu)
        self._sent = False
        self._last_tick = 0.0
        self._last_cpu = 0.0
        self._max_gap = 0.0
        self._max_gap_cpu = 0.0
        self._max_cpu = 0.0
        self._ticker = QTimer(self)
        self._ticker.setTimerType(Qt.TimerType.PreciseTimer)
        self._ticker.setInterval(TICK_MS)
        self._ticker.timeout.connect(self._tick)
        self._deadline = QTimer(self)
        self._deadline.setSingleShot(True)
        self._deadline.timeout.connect(lambda: self._fail(f"no answer within {TIMEOUT_S} s"))

    @property
    def exit_code(self) -> int:
        return self.report.exit_code

    def start(self) -> None:
        self.window.engine.state_changed.connect(self._engine)
        self.window.controller.answer_finished.connect(self._finished)
        self._deadline.start(TIMEOUT_S * 1000)
        self._engine(self.window.engine.state)

    def _engine(self, state: EngineState) -> None:
        if state.kind == "failed":
            self._fail(state.detail)
        elif state.ready and not self._sent:
            self._sent = True
            self.report = replace(self.report, engine_ready_after=time.time() - self.launched_at)
            self._last_tick = time.perf_counter()
            self._last_cpu = time.thread_time()
            self._ticker.start()
            QTimer.singleShot(BASELINE_MS, self, self._send)

    def _send(self) -> None:
        self.report = replace(self.report, idle_stall_ms=self._max_gap * 1000)
        self._max_gap = self._max_gap_cpu = self._max_cpu = 0.0
        page = self.window.chats
        page.new_chat()
        page.settings_panel.max_tokens.setValue(200)
        page.settings_panel.apply_now()
        page.composer.input.setPlainText(PROMPT)
        page.composer.button.click()

    def _tick(self) -> None:
        now, cpu = time.perf_counter(), time.thread_time()  # thread_time: this (the GUI) thread's
        gap, used = now - self._last_tick, cpu - self._last_cpu
        if gap > self._max_gap:
            self._max_gap, self._max_gap_cpu = gap, used
        self._max_cpu = max(self._max_cpu, used)
        self._last_tick, self._last_cpu = now, cpu

    def _finished(self, outcome: AnswerOutcome) -> None:
        self._ticker.stop()
        self._tick()
        stats = outcome.message.stats
        self.report = replace(
            self.report,
            longest_stall_ms=self._max_gap * 1000,
            stall_cpu_ms=self._max_gap_cpu * 1000,
            busiest_gap_cpu_ms=self._max_cpu * 1000,
            tokens=stats.tokens if stats else 0,
            tokens_per_second=stats.tokens_per_second if stats else None,
        )
        if outcome.error is not None:
            self._fail(outcome.error.message)
            return
        QTimer.singleShot(100, self, self._screenshot)  # let the final render land first

    def _screenshot(self) -> None:
        # What the screen holds (the X server's copy on X11), not a fresh render: grab() would
        # paint the window anew and hide a widget that changed without repainting.
        shot = self.window.screen().grabWindow(self.window.winId())
        if shot.isNull():
            shot = self.window.grab()  # Wayland gives no app the screen's pixels
        if not shot.save(self.out):
            self._fail(f"could not save the screenshot to {self.out}")
            return
        self.report = replace(self.report, ok=True, screenshot=self.out)
        QApplication.quit()

    def _fail(self, error: str) -> None:
        self._ticker.stop()
        self.report = replace(self.report, ok=False, error=error)
        QApplication.quit()
