"""Who may use which route: the Host and Origin a request may carry, and the key each route needs.

A web page cannot read the port's answers, but it can make the browser send requests to it: a form
post or a ``no-cors`` fetch (``text/plain`` bodies, which Ollama's routes read as JSON), or, after
rebinding its own name to 127.0.0.1, any request at all, answers included. What the page cannot
choose are the ``Host`` and ``Origin`` headers the browser sends: a rebound page's requests name the
attacker's host, and a cross-site request names the page's origin. So a request is served only when
its Host is this machine's (or a name the user allowed) and its Origin, when it has one, is a
loopback page or one the user allowed with ``--cors-origin``. Clients that are not browsers (curl,
the SDKs) send no Origin and are served as before.

Keys come in two kinds. An inference key runs models in every dialect; the admin key also opens the
routes that read the disk or change state. :data:`ROUTE_ACCESS` classifies every route of the app
(tests/engine/server/test_keys.py fails on one left out); a path in no class needs the admin key.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from enum import Enum
from urllib.parse import urlsplit

from starlette.routing import compile_path

from engine.settings import ServerSettings, is_loopback_host

__all__ = [
    "ADMIN_SCOPE_KEY",
    "LOADS_SCOPE_KEY",
    "Access",
    "HostAllowlist",
    "KeyCheck",
    "KeyRing",
    "OriginAllowlist",
    "ROUTE_ACCESS",
    "holds_admin",
    "host_name",
    "route_access",
]


class Access(Enum):
    """What a route needs: nothing, an inference key, or the admin key."""

    OPEN = "open"
    INFERENCE = "inference"
    ADMIN = "admin"


_OPEN_ROUTES = (("GET", "/health"), ("GET", "/v1/health"))  # the second: llama-server's other path

# Generation in every dialect, and what a client of a dialect reads to use it.
_INFERENCE_ROUTES = (
    # OpenAI
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{model_id:path}"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/embeddings"),
    ("POST", "/v1/responses"),
    ("WEBSOCKET", "/v1/responses"),  # its WebSocket mode (engine.server.responses_socket)
    ("POST", "/v1/responses/input_tokens"),
    ("POST", "/v1/responses/compact"),
    ("GET", "/v1/responses/{rid}"),
    ("DELETE", "/v1/responses/{rid}"),
    ("POST", "/v1/responses/{rid}/cancel"),
    ("GET", "/v1/responses/{rid}/input_items"),
    ("POST", "/v1/conversations"),
    ("GET", "/v1/conversations/{cid}"),
    ("POST", "/v1/conversations/{cid}"),
    ("DELETE", "/v1/conversations/{cid}"),
    ("GET", "/v1/conversations/{cid}/items"),
    ("POST", "/v1/conversations/{cid}/items"),
    ("GET", "/v1/conversations/{cid}/items/{iid}"),
    ("DELETE", "/v1/conversations/{cid}/items/{iid}"),
    # Anthropic
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    # Ollama
    ("GET", "/"),
    ("HEAD", "/"),
    ("GET", "/api/version"),
    ("GET", "/api/tags"),
    ("GET", "/api/ps"),
    ("POST", "/api/show"),
    ("POST", "/api/chat"),
    ("POST", "/api/generate"),
    ("POST", "/api/embed"),
    ("POST", "/api/embeddings"),
    # Ollama's push to a registry, which Hearth lacks: it answers so, and changes nothing
    ("POST", "/api/push"),
    # llama-server's own: reranking (Jina's and Cohere's body too) and the vocabulary
    ("POST", "/v1/rerank"),
    ("POST", "/rerank"),
    ("POST", "/tokenize"),
    ("POST", "/detokenize"),
    # llama-server's own completions: a raw prompt, and fill in the middle
    ("POST", "/completion"),
    ("POST", "/infill"),
    ("GET", "/props"),
    ("POST", "/apply-template"),
    ("POST", "/embedding"),
    ("POST", "/embeddings"),
    ("GET", "/models"),
    # What is loaded and how busy it is (no paths, nothing changed)
    ("GET", "/api/stats"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
)

# Everything that reads the disk, reaches the Hub or a provider, or changes what the worker holds.
_ADMIN_ROUTES = (
    # local models: their files, loading, importing, deleting
    ("GET", "/api/models"),
    ("POST", "/api/models/load"),
    ("POST", "/api/models/unload"),
    ("POST", "/api/models/import"),
    ("DELETE", "/api/models/{name:path}"),
    ("GET", "/api/models/{name:path}/settings"),
    ("PUT", "/api/models/{name:path}/settings"),
    ("GET", "/api/folders"),
    ("POST", "/api/folders"),
    ("DELETE", "/api/folders"),
    ("DELETE", "/api/delete"),
    # Ollama's model building: new names for local models with their own defaults, models from files sent here
    ("POST", "/api/create"),
    ("POST", "/api/copy"),
    ("HEAD", "/api/blobs/{digest}"),
    ("POST", "/api/blobs/{digest}"),
    ("GET", "/api/fit"),
    ("GET", "/api/hardware"),
    # other apps' models: found on the disk, registered in place
    ("GET", "/api/other-apps"),
    ("POST", "/api/other-apps/accept"),
    # the worker itself: its process, and every request as it finishes (models, timings)
    ("GET", "/api/worker"),
    ("GET", "/api/log/stream"),
    # the Hub and downloads
    ("GET", "/api/hub/search"),
    ("GET", "/api/hub/variants"),
    ("GET", "/api/hub/recommended"),
    ("GET", "/api/downloads"),
    ("POST", "/api/downloads"),
    ("POST", "/api/downloads/{job_id}/{action}"),
    ("POST", "/api/pull"),
    # remote providers (their keys, their bills)
    ("GET", "/api/remotes"),
    ("POST", "/api/remotes"),
    ("DELETE", "/api/remotes/{name}"),
    # document collections: folders on disk, read and searched
    ("GET", "/api/docs/collections"),
    ("POST", "/api/docs/collections"),
    ("GET", "/api/docs/collections/{name}"),
    ("DELETE", "/api/docs/collections/{name}"),
    ("POST", "/api/docs/collections/{name}/index"),
    ("POST", "/api/docs/collections/{name}/{action}"),
    ("PUT", "/api/docs/collections/{name}/model"),
    ("PUT", "/api/docs/collections/{name}/shared"),
    ("POST", "/api/docs/search"),
    ("POST", "/api/docs/context"),
)

#: Every route of the app, as (method, path template) -> what it needs.
ROUTE_ACCESS: dict[tuple[str, str], Access] = {
    **{route: Access.OPEN for route in _OPEN_ROUTES},
    **{route: Access.INFERENCE for route in _INFERENCE_ROUTES},
    **{route: Access.ADMIN for route in _ADMIN_ROUTES},
}

_EXACT = {route: access for route, access in ROUTE_ACCESS.items() if "{" not in route[1]}
_PATTERNS: tuple[tuple[str, re.Pattern[str], Access], ...] = tuple(
    (method, compile_path(path)[0], access) for (method, path), access in ROUTE_ACCESS.items() if "{" in path
)


def route_access(method: str, path: str) -> Access:
    """What a request for ``method path`` needs; the admin key for a path in no class (a route added
    without a class stays closed, and a caller without the admin key learns nothing from its 404)."""
    methods = (method, "GET") if method == "HEAD" else (method,)
    for m in methods:
        found = _EXACT.get((m, path))
        if found is not None:
            return found
    for m, pattern, access in _PATTERNS:
        if m in methods and pattern.match(path):
            return access
    return Access.ADMIN


def host_name(value: str) -> str:
    """The name in a ``Host`` header, lower case, without port or brackets: ``[::1]:8765`` -> ``::1``.

    A bracketed address followed by anything but a port (``[::1].evil.example``), or a name followed by anything
    but a port (``127.0.0.1:80@evil.example``, ``localhost:abc``), is no host: it is returned whole, so that no
    allowlist matches it.
    """
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1 :] if end > 0 else ""
        if end > 0 and (rest == "" or (rest.startswith(":") and rest[1:].isdigit())):
            return value[1:end]
        return value
    if value.count(":") == 1:
        name, port = value.split(":", 1)
        if not port.isdigit():
            return value
        value = name
    return value.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostAllowlist:
    """The ``Host`` header values a request may carry (DNS rebinding: a page that rebinds its own name to
    this machine still sends its own name as the Host).

    Allowed: loopback names and addresses, the bound address, the names given with ``--allowed-host``.
    Bound to every interface, the server is meant to be reached by other machines: by address always
    (an address cannot be rebound), and by any name when a key guards it.
    """

    def __init__(self, settings: ServerSettings) -> None:
        self.names = frozenset(host_name(h) for h in settings.allowed_hosts if h.strip())
        if not settings.is_wildcard:
            self.names |= {host_name(settings.host)}
        self.any_address = settings.is_wildcard
        self.any_name = settings.is_wildcard and settings.has_key

    def allows(self, host: str) -> bool:
        name = host_name(host)
        if self.any_name or name in self.names or is_loopback_host(name):
            return True
        return self.any_address and _is_ip(name)


#: The origins of apps installed on this machine, which no web site can send (Ollama lets them in by default too):
#: Electron apps' own pages (``app://obsidian.md``, ``file://``), Tauri apps' and VS Code's webviews.
APP_SCHEMES = frozenset(("app", "file", "tauri", "vscode-webview", "vscode-file"))


class OriginAllowlist:
    """The ``Origin`` header values a request may carry (as Ollama's OLLAMA_ORIGINS): the ``--cors-origin``
    list ("*" allows every origin), pages served from this machine (http or https on a loopback name or
    0.0.0.0, any port) and desktop apps' pages (:data:`APP_SCHEMES`). ``null`` (sandboxed frames, a browser's
    ``file://`` pages) is refused unless "*" is listed."""

    def __init__(self, cors_origins: tuple[str, ...]) -> None:
        self.any = "*" in cors_origins
        self.listed = frozenset(o.strip().rstrip("/").lower() for o in cors_origins)

    def allows(self, origin: str) -> bool:
        origin = origin.strip().rstrip("/").lower()
        if self.any or origin in self.listed:
            return True
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        if parts.scheme in APP_SCHEMES:
            return True
        if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc or parts.path or parts.query:
            return False
        # the host as a Host header's is read (urlsplit takes "[::1].evil.example" for ::1, "127.0.0.1:80.evil" for 127.0.0.1)
        host = host_name(parts.netloc)
        return is_loopback_host(host) or host == "0.0.0.0"


class KeyCheck(Enum):
    """The outcome of checking a request's key against a route's needs."""

    ALLOWED = "allowed"
    MISSING = "missing"  # no key, or a wrong one: 401
    INFERENCE_ONLY = "inference_only"  # a right key, but not the admin key the route needs: 403


class KeyRing:
    """The keys the server accepts. Without admin keys the API keys open everything (``--api-key`` as it
    always was); with admin keys, the API keys only run models and the admin keys open every route.
    Inference routes with admin keys but no API keys need no key (``--admin-key`` alone guards only
    the admin routes)."""

    def __init__(self, settings: ServerSettings) -> None:
        api = tuple(k.encode() for k in settings.api_keys)
        self.split = bool(settings.admin_keys)
        self.admin = tuple(k.encode() for k in settings.admin_keys) if self.split else api
        self.inference = api if self.split else ()

    def check(self, access: Access, tokens: list[bytes]) -> KeyCheck:
        """Whether ``tokens`` (the request's bearer token and x-api-key) may use a route that needs ``access``."""
        if access is Access.OPEN or not self.admin:
            return KeyCheck.ALLOWED
        if _matches(tokens, self.admin):
            return KeyCheck.ALLOWED
        inference_key = _matches(tokens, self.inference)
        if access is Access.INFERENCE:
            if self.split and not self.inference:
                return KeyCheck.ALLOWED
            return KeyCheck.ALLOWED if inference_key else KeyCheck.MISSING
        return KeyCheck.INFERENCE_ONLY if inference_key else KeyCheck.MISSING

    def holds_admin(self, tokens: list[bytes]) -> bool:
        """Whether ``tokens`` carry admin rights: the admin key (or, without admin keys, an API key), or
        any request where no key is set (loopback, one user: every request is the user's own)."""
        return not self.admin or _matches(tokens, self.admin)

    def owns_loads(self, tokens: list[bytes]) -> bool:
        """Whether ``tokens`` may change how a model is loaded for everyone from an inference route (load
        options, a shorter keep-alive): admin rights, or any caller where no inference key is set (an admin
        key alone leaves the inference routes to the loopback user, who drives them as Ollama's clients do)."""
        return self.holds_admin(tokens) or (self.split and not self.inference)


# Where the gate records, in the ASGI scope, whether the request holds admin rights (see holds_admin).
ADMIN_SCOPE_KEY = "hearth.admin"
# ... and whether it may change a model's load for everyone (see owns_loads).
LOADS_SCOPE_KEY = "hearth.loads"


def holds_admin(scope) -> bool:
    """Whether the request of ``scope`` (a request's ``.scope``) was made with admin rights: the routes
    every key may use read it to refuse the few things in them only the admin may do (a model's load
    settings, unloading it, collections not shared). False where the gate did not say."""
    return scope.get(ADMIN_SCOPE_KEY, False) is True


def owns_loads(scope) -> bool:
    """Whether the request of ``scope`` may change a model's load settings or shorten its keep-alive from an
    inference route (:meth:`KeyRing.owns_loads`). False where the gate did not say."""
    return scope.get(LOADS_SCOPE_KEY, False) is True


def _matches(tokens: list[bytes], keys: tuple[bytes, ...]) -> bool:
    # Every pair compared in constant time (no early answer that times how much of a key matched).
    found = False
    for token in tokens:
        for key in keys:
            found |= hmac.compare_digest(token, key)
    return found
