"""Cycles of Qt objects are collected on the GUI thread, never on a thread that happens to allocate."""

from __future__ import annotations

import gc
import threading

from PySide6.QtCore import QObject

from app.gc_guard import GuiThreadCollector


class Held(QObject):
    """A Python-owned QObject kept alive only by a reference cycle, as a closed dialog with a lambda can be."""

    def __init__(self, deaths: list[int]) -> None:
        super().__init__()
        self.me = self
        self.destroyed.connect(lambda *_: deaths.append(threading.get_ident()))


def churn() -> None:
    """Allocate as a busy server thread does: survivors reach the oldest generation, so that, with automatic
    collection on, full collections would run on this thread."""
    keep = []
    for _ in range(60):
        for _ in range(3000):
            a: list = []
            a.append(a)
            keep.append(a)
        keep = keep[-20000:]


def test_a_cycle_dropped_while_another_thread_allocates_is_collected_on_the_gui_thread(qtbot, qapp):
    collector = GuiThreadCollector(qapp, interval_ms=20)
    collector.start()
    try:
        assert not gc.isenabled()
        deaths: list[int] = []
        Held(deaths)  # dropped at once: only its cycle holds it
        worker = threading.Thread(target=churn)
        worker.start()
        worker.join()
        assert deaths == []  # the allocating thread collected nothing
        qtbot.waitUntil(lambda: deaths != [], timeout=10_000)  # the timer's collections reach it
        assert deaths == [threading.get_ident()]
        assert sum(collector.collections) >= 1
    finally:
        collector.stop()


def test_stopping_collects_what_is_left_and_gives_automatic_collection_back(qapp):
    was = gc.isenabled()
    gc.enable()
    try:
        collector = GuiThreadCollector(qapp, interval_ms=60_000)
        collector.start()
        deaths: list[int] = []
        Held(deaths)
        assert deaths == [] and not gc.isenabled()
        collector.stop()
        assert deaths == [threading.get_ident()] and gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_a_full_collection_runs_at_most_once_a_minute_and_the_middle_generation_in_its_place(
    qapp, monkeypatch
):
    import app.gc_guard as gc_guard

    thresholds = gc.get_threshold()
    collector = GuiThreadCollector(qapp, interval_ms=60_000)
    collector.start()
    try:
        gc.set_threshold(10, 1, 1)  # every generation's threshold crossed by a few allocations
        now = [1000.0]
        monkeypatch.setattr(gc_guard, "monotonic", lambda: now[0])
        collector._last_full = 0.0
        for _ in range(3):
            churn_a_little()
            collector.check()
        assert collector.collections[2] == 1 and collector.collections[1] == 2
        now[0] += gc_guard.FULL_EVERY_S
        churn_a_little()
        collector.check()
        assert collector.collections[2] == 2
    finally:
        gc.set_threshold(*thresholds)
        collector.stop(full=False)


def churn_a_little() -> None:
    """Cross every generation's threshold: each young collection counts toward the middle one's, each middle one
    toward the oldest's."""
    for _ in range(3):
        gc.collect(0)
        gc.collect(1)
