"""How the worker's HTTP server listens and whom it serves (shared by the worker, which binds, and the server)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
#: Addresses that mean "every interface" (reached by other machines, by name or address).
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def is_loopback_host(name: str) -> bool:
    """Whether ``name`` (a host name or address, without port or brackets) can only mean this machine:
    ``localhost`` and its subdomains (browsers never send those to DNS), 127.0.0.0/8 and ::1."""
    name = name.strip().lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """How the worker's HTTP server behaves.

    Attributes:
        host: Address to bind; loopback unless the user says otherwise.
        port: TCP port; 0 picks a free one.
        api_keys: Bearer tokens accepted; empty means no authentication. Without ``admin_keys`` they
            open every route; with ``admin_keys`` they only run models (the inference routes).
        admin_keys: Bearer tokens that open every route, the admin routes (documents, downloads,
            import, load, delete, remotes, ...) included; empty: ``api_keys`` do.
        allowed_hosts: Host names (besides loopback and ``host``) a request's ``Host`` header may name.
        cors_origins: Origins allowed by CORS; empty turns CORS off.
        max_body_bytes: Largest request body accepted.
        max_n: Largest ``n`` (choices per request) accepted.
        ollama_port: A second port on the same host serving the same API, for clients that assume
            Ollama's (11434); None for none.
        allow_image_urls: Fetch images that requests give by http(s) URL (a request the server makes on the
            client's behalf); off, such images are refused.
        stream_interval_ms: Least milliseconds between a streamed answer's events, each carrying the tokens
            made since the last (0: every token as it comes); its first text and its end go at once.
        reasoning_budget: Tokens a model may think, for a request that gives no thinking budget of its own
            (None: no cap; engine.tools.thinking_budget).
    """

    host: str = "127.0.0.1"
    port: int = 8765
    api_keys: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = 8 * 1024 * 1024
    max_n: int = 8
    ollama_port: int | None = None
    allow_image_urls: bool = False
    stream_interval_ms: float = 0.0
    reasoning_budget: int | None = None

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)

    @property
    def is_wildcard(self) -> bool:
        """Bound to every interface (0.0.0.0 or ::)."""
        return self.host in WILDCARD_HOSTS

    @property
    def has_key(self) -> bool:
        """Whether any route needs a key."""
        return bool(self.api_keys or self.admin_keys)
