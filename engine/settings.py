"""How the worker's HTTP server listens and whom it serves (shared by the worker, which binds, and the server)."""

from __future__ import annotations

from dataclasses import dataclass

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """How the worker's HTTP server behaves.

    Attributes:
        host: Address to bind; loopback unless the user says otherwise.
        port: TCP port; 0 picks a free one.
        api_keys: Bearer tokens accepted; empty means no authentication.
        cors_origins: Origins allowed by CORS; empty turns CORS off.
        max_body_bytes: Largest request body accepted.
        max_n: Largest ``n`` (choices per request) accepted.
        ollama_port: A second port on the same host serving the same API, for clients that assume
            Ollama's (11434); None for none.
    """

    host: str = "127.0.0.1"
    port: int = 8765
    api_keys: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = 8 * 1024 * 1024
    max_n: int = 8
    ollama_port: int | None = None

    @property
    def is_loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS
