"""Python's cycle collector, run on the GUI thread only.

The collector runs in whichever thread happens to allocate when a generation's threshold is crossed. A
window, a dialog or a network reply held only by a reference cycle is then destroyed there: its C++ side is
torn down off the GUI thread while the GUI thread may be delivering an event to it (a reply's ``finished``
reaching a slot that reads the reply), which crashes the process. The app has threads of its own (starting
the worker, watching it), so while it runs the automatic collection is off and a timer on the GUI thread
collects each generation whenever its threshold has been crossed, as the automatic collection would, with a
full collection (tens of milliseconds on the GUI thread) at most once a minute.
"""

from __future__ import annotations

import gc
from time import monotonic

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QTimer

CHECK_MS = 200
FULL_EVERY_S = 60.0


class GuiThreadCollector(QObject):
    """While started, the cycle collector runs only from a timer on the GUI thread."""

    def __init__(self, parent: QObject | None = None, *, interval_ms: int = CHECK_MS) -> None:
        super().__init__(parent)
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.check)
        self._was_enabled = False
        self._last_full = monotonic()
        self.collections = [0, 0, 0]  # by generation, for tests and logs

    def start(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._timer.start()

    def stop(self, *, full: bool = True) -> None:
        """Delete the widgets already closed with ``deleteLater`` and collect (everything, or as the automatic
        collector would now), here; then give collection back to Python as it was before."""
        self._timer.stop()
        if full:
            self.collect_now()
        else:
            QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
            self.check()
        if self._was_enabled:
            gc.enable()

    def check(self) -> None:
        """Collect the oldest generation whose threshold has been crossed, as the automatic collector does (the
        oldest at most once every FULL_EVERY_S; the middle one in its place until then)."""
        counts, thresholds = gc.get_count(), gc.get_threshold()
        generation = -1
        for g in range(3):
            if thresholds[g] and counts[g] > thresholds[g]:
                generation = g
        if generation == 2:
            if monotonic() - self._last_full < FULL_EVERY_S:
                generation = 1
            else:
                self._last_full = monotonic()
        if generation >= 0:
            gc.collect(generation)
            self.collections[generation] += 1

    def collect_now(self) -> None:
        """Delete the widgets already closed with ``deleteLater`` and collect every generation, here."""
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        gc.collect()
        self._last_full = monotonic()
        self.collections[2] += 1
