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
