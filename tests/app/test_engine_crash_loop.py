"""What the app says while the worker crash-loops: the wait before each restart, then, when the
supervisor gives up, a failed state carrying the worker's last log lines."""

from __future__ import annotations

from app.net.engine import EngineController
from engine.worker.supervisor import WorkerEvent, WorkerSupervisor


def test_the_app_says_how_long_until_a_restart_and_shows_the_last_log_lines_when_it_gives_up(qapp, tmp_path):
    controller = EngineController(log_path=tmp_path / "worker.log")
    generation = controller._generation
    controller._on_worker_event(WorkerSupervisor(log_path=tmp_path / "worker.log"), generation)  # as a launch does

    controller._on_worker_event(WorkerEvent("crashed", "exit code -9", exit_code=-9, restart_in=4.0), generation)
    assert controller.state.kind == "crashed" and "restarting in 4 s" in controller.state.detail

    tail = ("Hearth API listening on http://127.0.0.1:5/v1", "Fatal Python error: Segmentation fault")
    gave_up = WorkerEvent("gave_up", "The engine crashed 5 times in a row …", exit_code=-11, log_tail=tail)
    controller._on_worker_event(gave_up, generation)
    assert controller.state.kind == "failed" and not controller.state.ready
    assert controller.state.detail.splitlines() == [gave_up.detail, *tail]
