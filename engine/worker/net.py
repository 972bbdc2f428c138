"""Sockets and addresses of the worker, kept light: the app's supervisor imports this."""

from __future__ import annotations

import socket

WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one).

    Raises:
        OSError: the address is in use or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
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
