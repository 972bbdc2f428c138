"""The supervisor against a real `hearth serve` that keeps dying right after it became healthy."""

from __future__ import annotations

import os
import signal
import threading

from engine.worker.supervisor import WorkerEvent, WorkerSupervisor


def test_a_crash_loop_backs_off_on_uptime_and_stops_with_the_last_log_lines(tmp_path):
    """Each start is SIGKILLed as soon as it is healthy, except the third, which stays up past
    ``stable_after``: the wait doubles (capped) on fast crashes, starts over after the stable run,
    and the third fast crash in a row leaves the worker stopped with its last log lines."""
    events: list[WorkerEvent] = []
    gave_up = threading.Event()
    readies = 0
    log_path = tmp_path / "worker.log"

    def on_event(event: WorkerEvent) -> None:
        nonlocal readies
        events.append(event)
        if event.kind == "ready":
            readies += 1
            pid = sup.pid
            delay = 10.0 if readies == 3 else 0.0  # the third run outlives stable_after by 5 s
            threading.Timer(delay, os.kill, (pid, signal.SIGKILL)).start()
        elif event.kind == "gave_up":
            gave_up.set()

    sup = WorkerSupervisor(
        env={"HEARTH_HOME": str(tmp_path / "home")},
        log_path=log_path,
        on_event=on_event,
        startup_timeout=120,
        initial_backoff=0.1,
        max_backoff=0.15,
        stable_after=5.0,  # wide margins both ways: a loaded machine notices a death late
        max_fast_crashes=3,
    )
    sup.start()
    try:
        assert gave_up.wait(240), [e.kind for e in events]
        waits = [e.restart_in for e in events if e.kind == "crashed"]
        assert waits == [0.1, 0.15, 0.1, 0.15]  # doubled, capped, reset by the stable run
        assert all(e.exit_code == -signal.SIGKILL for e in events if e.kind in ("crashed", "gave_up"))
        last = events[-1]
        assert last.kind == "gave_up" and "crashed 3 times in a row" in last.detail and str(log_path) in last.detail
        assert any("Hearth API listening on" in line for line in last.log_tail)
        assert sup.gave_up and not sup.is_running and sup.restarts == 4
    finally:
        sup.stop()
