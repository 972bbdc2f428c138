"""Sockets and addresses of the worker, kept light: the app's supervisor imports this."""

from __future__ import annotations

import socket
import sys

from engine.settings import WILDCARD_HOSTS

#: Connections the kernel holds for the worker to accept (uvicorn's own default when it binds; the system's
#: ``somaxconn`` caps it): a burst of clients connecting while the event loop is busy is not turned away.
LISTEN_BACKLOG = 2048

__all__ = ["WILDCARD_HOSTS", "base_url", "bind_socket", "free_port", "listen_options", "local_url"]


def listen_options(
    platform: str = sys.platform, exclusive: int | None = getattr(socket, "SO_EXCLUSIVEADDRUSE", None)
) -> tuple[tuple[int, int, int], ...]:
    """The ``setsockopt`` calls (level, option, value) for the worker's listening socket.

    On Windows, SO_REUSEADDR would let another program bind the same port and take the worker's
    connections; SO_EXCLUSIVEADDRUSE forbids that (the two cannot be combined). Elsewhere SO_REUSEADDR
    only lets a restarted worker bind its port while old connections sit in TIME_WAIT.
    """
    if platform == "win32":
        return ((socket.SOL_SOCKET, exclusive, 1),) if exclusive is not None else ()
    return ((socket.SOL_SOCKET, socket.SO_REUSEADDR, 1),)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one).

    Raises:
        OSError: the address is in use or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        for level, option, value in listen_options():
            sock.setsockopt(level, option, value)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def base_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"


def local_url(host: str, port: int) -> str:
    """The base URL this machine reaches the worker at (loopback for a wildcard bind)."""
    if host in WILDCARD_HOSTS:
        host = "::1" if host == "::" else "127.0.0.1"
    return base_url(host, port)


def free_port(host: str = "127.0.0.1") -> int:
    with bind_socket(host, 0) as sock:
        return sock.getsockname()[1]
