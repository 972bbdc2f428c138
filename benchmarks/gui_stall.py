"""How long the app's GUI thread stalls while answers stream: one chat alone, then split side by side.

The real window (offscreen unless ``--show``) over a real worker with the starter model, in a data folder of
its own. A 2 ms timer on the GUI thread records the gap between its ticks while the answers stream; a gap
is the longest the window could not react (render, scroll, a key). Each round sends the same question, to
one chat, then to a chat split side by side (two answers at once, two columns rendering). Printed: the
longest gap and the 99th percentile of each, and their ratio.

Goal (issue 30): the longest stall under 50 ms while two answers stream side by side.

    .venv/bin/python benchmarks/gui_stall.py [--rounds 3] [--tokens 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TICK_MS = 2
QUESTION = "Write a short story about a lighthouse keeper and a storm, with a title and three paragraphs."


class StallMeter:
    """Gaps between the ticks of a timer on the GUI thread."""

    def __init__(self) -> None:
        from PySide6.QtCore import QTimer

        self.gaps: list[float] = []
        self._last = 0.0
        self._timer = QTimer()
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self._tick)

    def start(self) -> None:
        self.gaps.clear()
        self._last = time.perf_counter()
        self._timer.start()

    def stop(self) -> list[float]:
        self._timer.stop()
        return list(self.gaps)

    def _tick(self) -> None:
        now = time.perf_counter()
        self.gaps.append((now - self._last) * 1000)
        self._last = now


def wait(app, predicate, timeout: float) -> None:
    """Run the event loop (deleting what was deleted later too, as the app's loop does) until ``predicate()``."""
    from PySide6.QtTest import QTest

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("timed out")
        QTest.qWait(1)


def one_round(app, window, meter: StallMeter, *, split: bool, tokens: int) -> list[float]:
    from dataclasses import replace

    page = window.chats
    page.new_chat()
    chat_id = page.chat_id
    settings = window.store.get_chat(chat_id).settings
    sampling = replace(settings.sampling, temperature=0.0, max_tokens=tokens)
    window.controller.update_settings(chat_id, replace(settings, sampling=sampling))
    page.open_chat(chat_id)
    if split:
        page.set_split(True)
    finished: list = []
    window.controller.answer_finished.connect(finished.append)
    meter.start()
    page.composer.input.setPlainText(QUESTION)
    page.composer.button.click()
    wait(app, lambda: len(finished) == (2 if split else 1), 600)
    gaps = meter.stop()
    window.controller.answer_finished.disconnect(finished.append)
    if split:
        page.set_split(False)
    return gaps


def summary(gaps: list[float]) -> tuple[float, float]:
    ordered = sorted(gaps)
    return ordered[-1], ordered[int(len(ordered) * 0.99) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--show", action="store_true", help="on the real display, not offscreen")
    args = parser.parse_args()
    if not args.show:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    home = Path(tempfile.mkdtemp(prefix="hearth-gui-stall-"))
    os.environ["HEARTH_HOME"] = str(home)

    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.net.engine import EngineConfig, EngineController
    from app.store import ChatStore
    from app.theme import ThemeManager

    app = QApplication([])
    theme = ThemeManager("light", app)
    theme.apply()
    engine = EngineController(log_path=home / "worker.log")
    engine.start(EngineConfig(extra_args=("--parallel", "4", "--ctx", "2048")))
    wait(app, lambda: engine.state.ready or engine.state.kind == "failed", 240)
    if not engine.state.ready:
        raise SystemExit(f"the worker did not start: {engine.state.detail}")
    store = ChatStore(home)
    window = MainWindow(store=store, engine=engine, theme=theme)
    window.show()
    meter = StallMeter()
    try:
        one_round(app, window, meter, split=False, tokens=8)  # the model loads
        alone, side = [], []
        for r in range(args.rounds):
            alone.append(summary(one_round(app, window, meter, split=False, tokens=args.tokens)))
            side.append(summary(one_round(app, window, meter, split=True, tokens=args.tokens)))
            print(f"round {r + 1}: alone longest {alone[-1][0]:.1f} ms (p99 {alone[-1][1]:.1f}); "
                  f"side by side longest {side[-1][0]:.1f} ms (p99 {side[-1][1]:.1f})")  # fmt: skip
        worst_alone = max(a for a, _p in alone)
        worst_side = max(s for s, _p in side)
        print(f"longest GUI stall: alone {worst_alone:.1f} ms, side by side {worst_side:.1f} ms "
              f"({worst_side / worst_alone:.2f}x); p99 side by side {statistics.median(p for _s, p in side):.1f} ms; "
              f"goal under 50 ms: {'met' if worst_side < 50 else 'NOT met'}")  # fmt: skip
    finally:
        window.controller.stop_all()
        window.close()
        store.close()
        engine.stop()


if __name__ == "__main__":
    main()
