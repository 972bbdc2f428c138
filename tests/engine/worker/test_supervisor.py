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
            # the third run outlives stable_after whatever the load (its timer starts after the supervisor marked it
            # ready); a fast one is killed at once, and dies well within stable_after even on a loaded machine
            delay = 3.0 if readies == 3 else 0.0
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
        stable_after=2.5,  # a loaded machine notices a death late: a fast crash has 2.5 s to be seen
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


class _Foreign:
    """Another program's HTTP server on a loopback port, answering /health with ``body``."""

    def __init__(self, body: bytes) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(self.server.body)))  # type: ignore[attr-defined]
                self.end_headers()
                self.wfile.write(self.server.body)  # type: ignore[attr-defined]

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.body = body  # type: ignore[attr-defined]
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_port_another_program_holds_is_refused_in_one_sentence_and_its_health_is_never_the_workers(tmp_path):
    """A port in use: the start fails at once, saying so, with no worker started (the app showed another server's
    figures as its own). And a health answer is the worker's only when it carries its launch's mark."""
    import subprocess
    import sys

    import pytest

    from engine.worker.supervisor import WorkerStartError

    foreign = _Foreign(b'{"status": "ok"}')
    try:
        sup = WorkerSupervisor(port=foreign.port, env={"HEARTH_HOME": str(tmp_path / "home")}, startup_timeout=5)
        with pytest.raises(WorkerStartError, match=f"Port {foreign.port} is in use by another program; choose another"):
            sup.start()
        assert sup.pid is None and not sup.is_running
        sup.port, sup._instance = foreign.port, "a1b2"  # a launch waiting while the other program answers
        sup._proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert not sup._wait_healthy(1.0)
            foreign.server.body = b'{"status": "ok", "instance": "a1b2"}'  # type: ignore[attr-defined]
            assert sup._wait_healthy(5.0)
        finally:
            sup._kill()
    finally:
        foreign.close()
