"""How the commands that drive a running worker (`hearth ps`, `load`, `unload`, `log stream`) reach it.

``--url`` (or ``HEARTH_URL``) names a worker, with its key in ``HEARTH_ADMIN_KEY`` (else ``HEARTH_API_KEY``);
without one, the worker of the running daemon (`hearth daemon up`), with the admin key its
``daemon.json`` holds.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from engine.errors import HearthError

if TYPE_CHECKING:
    import httpx


class WorkerUnreachable(HearthError):
    """No worker to talk to, or it did not answer."""


def add_worker_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--url",
        metavar="URL",
        help="the worker's address, e.g. http://127.0.0.1:8765 (default: the running daemon's; also HEARTH_URL); "
        "its key in HEARTH_ADMIN_KEY",
    )
    p.add_argument("--json", action="store_true", help="print JSON")


class WorkerClient:
    """A worker's admin API, answering with its JSON or one clear sentence.

    Args:
        url: The worker's root URL (a ``/v1`` suffix is dropped).
        key: The Bearer key to send (the admin key for admin routes); None sends none.
    """

    def __init__(self, url: str, key: str | None) -> None:
        self.url = url.rstrip("/").removesuffix("/v1")
        self.key = key
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, start: bool = False) -> WorkerClient:
        """The worker ``--url``/``HEARTH_URL`` names, else the running daemon's; with ``start``, a daemon started now
        where none runs (as `hearth chat` starts one: the command's whole point is the worker's).

        Raises:
            WorkerUnreachable: neither is there (and ``start`` is not asked).
            DaemonError: the daemon could not be started.
        """
        url = args.url or os.environ.get("HEARTH_URL")
        if url:
            return cls(url, os.environ.get("HEARTH_ADMIN_KEY") or os.environ.get("HEARTH_API_KEY") or None)
        from engine.worker.daemon import find_daemon

        info = find_daemon()
        if info is None and start:
            from engine.commands.chat_worker import daemon_client

            return daemon_client(f"`hearth {getattr(args, 'command', None) or 'load'}`")
        if info is None:
            raise WorkerUnreachable(
                "No Hearth daemon is running; start one with `hearth daemon up`, or name a worker with --url."
            )
        return cls(info.url, info.admin_key)

    def fail(self, r: httpx.Response) -> HearthError:
        if r.status_code in (401, 403):
            return WorkerUnreachable(
                f"The worker at {self.url} refused the key; set HEARTH_ADMIN_KEY to its admin key."
            )
        code = None
        try:
            error = r.json()["error"]
            message, code = error["message"], error.get("code")
        except (ValueError, KeyError, TypeError, AttributeError):
            message = f"The worker at {self.url} answered {r.status_code}; see its log."
        failed = HearthError(message)
        failed.status, failed.code = r.status_code, code if isinstance(code, str) else None  # as the worker said it
        return failed

    def unreachable(self, exc: Exception) -> WorkerUnreachable:
        return WorkerUnreachable(
            f"Cannot reach the Hearth worker at {self.url} ({type(exc).__name__}); check that it runs "
            "(`hearth daemon status`)."
        )

    def request(self, method: str, path: str, *, body: dict | None = None, timeout: float = 30.0) -> dict:
        """``method path`` with ``body``, answered as JSON.

        Raises:
            WorkerUnreachable: no answer, or the key was refused. HearthError: the worker's own error message.
        """
        import httpx

        try:
            r = httpx.request(method, f"{self.url}{path}", json=body, headers=self.headers, timeout=timeout)
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from exc
        if r.status_code >= 400:
            raise self.fail(r)
        return r.json()

    def events(self, path: str) -> Iterator[dict | None]:
        """The ``data:`` events of a server-sent stream, each as JSON; None first, once subscribed.

        Raises:
            WorkerUnreachable, HearthError: as :meth:`request`; WorkerUnreachable when the stream is cut.
        """
        import httpx

        timeout = httpx.Timeout(10.0, read=None)
        try:
            with httpx.stream("GET", f"{self.url}{path}", headers=self.headers, timeout=timeout) as r:
                if r.status_code >= 400:
                    r.read()
                    raise self.fail(r)
                for line in r.iter_lines():
                    if line.startswith(": subscribed"):
                        yield None
                    elif line.startswith("data:"):
                        yield json.loads(line[5:])
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from exc
        raise WorkerUnreachable(f"The worker at {self.url} closed the stream (it stopped); start it again and retry.")


def print_json(value) -> None:
    print(json.dumps(value, indent=2))


__all__ = ["WorkerClient", "WorkerUnreachable", "add_worker_args", "print_json"]
