"""One Hearth app per user and data folder: a second launch brings the first one's window forward.

The first launch takes a lock file in the data folder and listens on a local socket (a Unix domain
socket, a named pipe on Windows) named after the user and the data folder. A later launch finds the
lock taken, connects, sends ``activate`` and exits once the first answers ``ok``; the first raises
its window. A lock left behind by a Hearth that crashed names a process that no longer runs, and
QLockFile takes it over.
"""

from __future__ import annotations

import getpass
import hashlib
import logging
import time
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, Qt, QThread, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket
from PySide6.QtWidgets import QWidget

log = logging.getLogger(__name__)

LOCK_NAME = "app.lock"
ACTIVATE = b"activate\n"
ACK = b"ok\n"


def server_name(home: Path) -> str:
    """The local socket's name for ``home``: one per user and data folder."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name (a container with an unnamed uid)
        user = "user"
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]
    return f"hearth-{user}-{digest}"


def bring_to_front(window: QWidget) -> None:
    """Show ``window`` un-minimized, raised and focused (as far as the window manager allows)."""
    window.setWindowState(window.windowState() & ~Qt.WindowState.WindowMinimized)
    window.show()
    window.raise_()
    window.activateWindow()


class SingleInstance(QObject):
    """The running app's claim on a data folder, and a later launch's message to it.

    Args:
        home: The data folder (the lock file goes there).
        parent: The QObject that owns the local server.
    """

    activated = Signal()

    def __init__(self, home: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = server_name(home)
        self._lock = QLockFile(str(home / LOCK_NAME))
        self._lock.setStaleLockTime(0)  # stale only when its process is gone, never by age
        self._server: QLocalServer | None = None

    @property
    def holder_pid(self) -> int | None:
        """The process that holds the lock, when it is another one."""
        pid, _host, _app = self._lock.getLockInfo()  # PySide returns (0, "", "") when there is none
        return pid or None

    @property
    def address(self) -> str:
        """Where this app listens (a socket file's path, or a pipe's name); "" when it does not."""
        return self._server.fullServerName() if self._server is not None else ""

    def claim(self) -> bool:
        """Become the running app for this data folder; False when another Hearth already is."""
        if not self._lock.tryLock(0):
            if self._lock.error() == QLockFile.LockError.LockFailedError:
                return False
            # Not another Hearth but a folder we cannot lock (permissions): run rather than refuse.
            log.warning("cannot lock the data folder (%s); starting without the one-app check", self._lock.error())
            return True
        QLocalServer.removeServer(self.name)  # a socket file that a crashed Hearth left behind
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        if not server.listen(self.name):
            # We still hold the lock, so this stays the only app; a later launch just can't reach us.
            log.warning("cannot listen for later launches on %s: %s", self.name, server.errorString())
            return True
        server.newConnection.connect(self._accept)
        self._server = server
        return True

    def notify_running(self, timeout: float = 10.0) -> bool:
        """Ask the running app to bring its window forward; whether it answered within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            socket = QLocalSocket()
            socket.connectToServer(self.name)
            if socket.waitForConnected(500):
                socket.write(ACTIVATE)
                answered = socket.waitForBytesWritten(1000) and self._read_ack(socket, deadline)
                socket.disconnectFromServer()
                if answered:
                    return True
            if time.monotonic() >= deadline:
                return False
            QThread.msleep(100)  # the first app may be between taking the lock and listening

    @staticmethod
    def _read_ack(socket: QLocalSocket, deadline: float) -> bool:
        received = b""
        while ACK not in received:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 or not socket.waitForReadyRead(left_ms):
                return False
            received += bytes(socket.readAll().data())
        return True

    def release(self) -> None:
        """Stop listening and free the lock (at quit)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self._lock.unlock()

    def _accept(self) -> None:
        while (connection := self._server.nextPendingConnection()) is not None:
            connection.readyRead.connect(lambda c=connection: self._read(c))
            connection.disconnected.connect(connection.deleteLater)

    def _read(self, connection: QLocalSocket) -> None:
        data = bytes(connection.readAll().data())
        if ACTIVATE.strip() in data:
            log.info("a second launch asked for the window")
            self.activated.emit()
            connection.write(ACK)
            connection.flush()
