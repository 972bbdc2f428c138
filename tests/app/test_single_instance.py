"""One app per user and data folder: a second `hearth gui` brings the first window forward and exits,
without starting a second worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PySide6.QtNetwork import QLocalSocket
from PySide6.QtWidgets import QMainWindow

from app.single_instance import LOCK_NAME, SingleInstance, bring_to_front, server_name

ROOT = Path(__file__).resolve().parents[2]


def hearth(home: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "HEARTH_HOME": str(home), "QT_QPA_PLATFORM": "offscreen"}
    return subprocess.Popen(
        [sys.executable, "-m", "engine.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def holder(home: Path, *, listen: bool) -> subprocess.Popen:
    """Another process that holds ``home``'s lock (and, with ``listen``, its socket), until killed."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from PySide6.QtCore import QCoreApplication, QLockFile
        from app.single_instance import LOCK_NAME, SingleInstance
        app = QCoreApplication([])
        home = Path({str(home)!r})
        if {listen!r}:
            instance = SingleInstance(home)
            assert instance.claim()
        else:
            lock = QLockFile(str(home / LOCK_NAME))
            assert lock.tryLock(0)
        print("holding", flush=True)
        time.sleep(120)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "holding"
    return proc


def test_a_second_launch_brings_the_running_window_forward_and_starts_no_worker(qtbot, tmp_path):
    first = SingleInstance(tmp_path)
    assert first.claim()
    window = QMainWindow()
    qtbot.addWidget(window)
    window.show()
    window.showMinimized()
    assert window.isMinimized()
    first.activated.connect(lambda: bring_to_front(window))
    try:
        with qtbot.waitSignal(first.activated, timeout=60_000):
            second = hearth(tmp_path, "gui")
        qtbot.waitUntil(lambda: second.poll() is not None, timeout=60_000)  # our loop sends its "ok"
        output = second.stdout.read()
        assert second.returncode == 0, output
        assert window.isVisible() and not window.isMinimized()
        assert not (tmp_path / "logs" / "worker.log").exists()  # no second worker was started
        assert not (tmp_path / "chats.db").exists()
    finally:
        first.release()


def test_one_claim_per_data_folder_until_released(qapp, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second, other = (
        SingleInstance(tmp_path / "a"),
        SingleInstance(tmp_path / "a"),
        SingleInstance(tmp_path / "b"),
    )
    assert first.claim()
    assert not second.claim()
    assert other.claim()  # another data folder is another app
    assert first.name != other.name and first.name == server_name(tmp_path / "a")
    first.release()
    assert second.claim()
    second.release()
    other.release()


def test_a_lock_and_socket_left_by_a_crashed_hearth_are_taken_over(qapp, tmp_path):
    crashed = holder(tmp_path, listen=True)
    crashed.send_signal(signal.SIGKILL)
    crashed.wait()
    assert (tmp_path / LOCK_NAME).exists()
    instance = SingleInstance(tmp_path)
    assert instance.claim()
    socket = QLocalSocket()
    socket.connectToServer(instance.name)
    assert socket.waitForConnected(2000), socket.errorString()  # listening again, not refused
    socket.disconnectFromServer()
    instance.release()


def test_a_running_hearth_that_does_not_answer_is_reported_with_its_process(qapp, tmp_path):
    hung = holder(tmp_path, listen=False)
    try:
        instance = SingleInstance(tmp_path)
        assert not instance.claim()
        assert not instance.notify_running(timeout=1.0)
        assert instance.holder_pid == hung.pid
    finally:
        hung.kill()
        hung.wait()


@pytest.mark.skipif(sys.platform == "win32", reason="a Unix socket file")
def test_other_users_cannot_connect(qapp, tmp_path):
    instance = SingleInstance(tmp_path)
    assert instance.claim()
    try:
        mode = Path(instance.address).stat().st_mode & 0o777
        assert mode & 0o077 == 0, oct(mode)
    finally:
        instance.release()
