"""Remote providers: OpenAI-compatible servers the user added by name (a vLLM or SGLang cluster,
another Hearth, any hosted service). Stored in ``remotes.json`` in the data folder; their keys in
the OS keyring, else in a file only the user can read (see :mod:`engine.remote.keys`)."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from engine.errors import InvalidRequest, ProviderNotFound
from engine.remote.keys import SERVICE, KeyStore, SecretStore, write_private_text

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 120.0  # seconds a provider may take between two chunks of an answer
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")
# What an Ollama client writes before a local model's name (``hf.co/owner/repo``): a provider of that
# name would answer ``hf.co/MODEL`` on /v1 while /api/chat ran the local model.
LOCAL_MODEL_HOSTS = ("hf.co", "huggingface.co")
_AUTO = object()


@dataclass(frozen=True, slots=True)
class RemoteProvider:
    """One provider as stored (no key).

    Attributes:
        name: What the user calls it; model ids are ``name/remote-model-id``.
        base_url: Its OpenAI base URL, e.g. ``http://gpu-head:8000/v1``.
        key_store: Where its API key is (``keyring`` or ``file``), None when it needs none.
        timeout: Seconds it may take to start answering or between two chunks.
        added_at: Unix time it was added.
    """

    name: str
    base_url: str
    key_store: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    added_at: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True)
class ProviderAccess:
    """A provider with its key, for sending requests. Its repr never shows the key."""

    provider: RemoteProvider
    api_key: str | None = None

    @property
    def name(self) -> str:
        return self.provider.name

    @property
    def base_url(self) -> str:
        return self.provider.base_url

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def __repr__(self) -> str:
        return f"ProviderAccess({self.provider.name!r}, {self.provider.base_url!r}, key={'yes' if self.api_key else 'no'})"


def normalize_url(url: str) -> str:
    """The provider's OpenAI base URL: ``http(s)://host[:port]/path`` without a trailing slash;
    a bare host gets ``/v1`` (where vLLM, SGLang, llama.cpp and Hearth serve the API).

    Raises:
        InvalidRequest: not an http(s) URL with a host.
    """
    text = url.strip()
    bad = InvalidRequest(
        f"'{url}' is not a server address; give its base URL, e.g. http://gpu-head:8000/v1.", param="url"
    )
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        raise bad from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad
    if parts.username or parts.password:
        raise InvalidRequest("Put the API key in --api-key-env, not in the URL.", param="url")
    path = parts.path.rstrip("/") or "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def check_name(name: str) -> str:
    """Raises InvalidRequest unless ``name`` is a usable provider name."""
    if not NAME_RE.fullmatch(name or ""):
        raise InvalidRequest(
            f"'{name}' cannot name a provider; use up to 40 letters, digits, '.', '_' or '-' (no '/').",
            param="name",
        )
    if name.lower() in LOCAL_MODEL_HOSTS:
        raise InvalidRequest(
            f"'{name}/MODEL' names a local model in Ollama's dialect, so a provider cannot be named '{name}'; "
            "choose another name.",
            param="name",
        )
    return name


class ProviderStore:
    """The providers file and the keys, read and written by the CLI and the worker alike.

    Args:
        path: The providers file (default: ``remotes.json`` in the data folder).
        local_models: The local models whose names a new provider must not take over (default: the
            model registry of the data folder that holds ``path``).
        keys: Where new keys go (default: the OS keyring where usable, else ``remote-keys.json``
            beside ``path``, mode 0600).
    """

    def __init__(
        self,
        path: Path | None = None,
        *,
        keys: KeyStore | None = None,
        local_models: Callable[[], Iterable[Any]] | None = None,
    ) -> None:
        if path is None:
            from engine.paths import hearth_home

            path = hearth_home() / "remotes.json"
        self.path = path
        self._local_models = local_models
        self.secrets = SecretStore(SERVICE, path.with_name("remote-keys.json"), keys=keys)
        self.file_keys = self.secrets.file

    # -- keys ---------------------------------------------------------------------------------
    def api_key(self, provider: RemoteProvider) -> str | None:
        """The provider's key, or None (no key, or its keyring is not reachable from here)."""
        if provider.key_store is None:
            return None
        if self.secrets.store(provider.key_store) is None:
            log.warning("the key of remote provider %s is in a keyring this process cannot use", provider.name)
            return None
        return self.secrets.get(provider.name, provider.key_store)

    def access(self, provider: RemoteProvider) -> ProviderAccess:
        return ProviderAccess(provider, self.api_key(provider))

    # -- the providers file -------------------------------------------------------------------
    def signature(self) -> tuple[int, int, int] | None:
        """Changes whenever the providers file does (None: no file yet). Each save replaces the
        file, so its inode changes even when two saves fall within the clock's resolution."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def list(self) -> list[RemoteProvider]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            log.warning("cannot read %s: %s", self.path, exc)
            return []
        out = []
        for entry in data.get("providers", []) if isinstance(data, dict) else []:
            try:
                out.append(
                    RemoteProvider(
                        name=str(entry["name"]),
                        base_url=str(entry["base_url"]),
                        key_store=entry.get("key_store"),
                        timeout=float(entry.get("timeout") or DEFAULT_TIMEOUT),
                        added_at=float(entry.get("added_at") or 0.0),
                    )
                )
            except (KeyError, TypeError, ValueError):
                log.warning("skipping an unreadable provider entry in %s: %r", self.path, entry)
        return out

    def get(self, name: str) -> RemoteProvider:
        """Raises ProviderNotFound."""
        for p in self.list():
            if p.name == name:
                return p
        raise ProviderNotFound(name)

    def _save(self, providers: list[RemoteProvider]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_private_text(self.path, json.dumps({"providers": [asdict(p) for p in providers]}, indent=2))

    def add(self, name: str, url: str, *, api_key: str | None = None, timeout: float | None = None) -> RemoteProvider:
        """Store a new provider (and its key). Every way of adding one (`hearth remote add`, the API's
        ``POST /api/remotes``, the app's providers table) comes here.

        Raises:
            InvalidRequest: a bad name, URL or timeout, the name is taken, or a local model's name has
                it as its owner (the provider's ``name/...`` ids would collide with the local model's).
        """
        check_name(name)
        base_url = normalize_url(url)
        if timeout is not None and not 0 < timeout <= 86_400:
            raise InvalidRequest("The timeout must be between 0 and 86400 seconds.", param="timeout")
        providers = self.list()
        if any(p.name == name for p in providers):
            raise InvalidRequest(
                f"A remote provider named '{name}' exists; remove it first with `hearth remote rm {name}`.",
                param="name",
            )
        shadowed = self._local_model_under(name)
        if shadowed is not None:
            raise InvalidRequest(
                f"The local model '{shadowed}' has '{name}' before its '/', so a provider named '{name}' "
                "would share its names; choose another provider name.",
                param="name",
            )
        kind = None
        if api_key:
            kind = self._store_key(name, api_key)
        provider = RemoteProvider(name=name, base_url=base_url, key_store=kind, timeout=timeout or DEFAULT_TIMEOUT)
        self._save([*providers, provider])
        return provider

    def _local_model_under(self, name: str) -> str | None:
        """A local model name (or Hub repo, which names a model too) whose owner, the part before '/',
        is ``name`` (compared without case: such names are easily confused), or None."""
        if self._local_models is not None:
            models = list(self._local_models())
        else:
            from engine.catalog.registry import ModelRegistry

            registry = ModelRegistry(self.path.parent, register_starter=False)
            try:
                models = registry.list()
            finally:
                registry.close()
        names = [m.name for m in models] + [m.repo for m in models if getattr(m, "repo", None)]
        for taken in names:
            owner, sep, _ = taken.partition("/")
            if sep and owner.lower() == name.lower():
                return taken
        return None

    def _store_key(self, name: str, api_key: str) -> str:
        return self.secrets.put(name, api_key)

    def remove(self, name: str) -> RemoteProvider:
        """Forget a provider and its key. Raises ProviderNotFound."""
        providers = self.list()
        provider = next((p for p in providers if p.name == name), None)
        if provider is None:
            raise ProviderNotFound(name)
        self._save([p for p in providers if p.name != name])
        if provider.key_store is not None:
            self.secrets.delete(name, provider.key_store)
        return provider


def split_model_id(model_id: str, names: set[str] | list[str]) -> tuple[str, str] | None:
    """``(provider, remote model id)`` when ``model_id`` is ``provider/model`` for a known provider."""
    provider, sep, remote = model_id.partition("/")
    if sep and remote and provider in names:
        return provider, remote
    return None


__all__ = [
    "DEFAULT_TIMEOUT",
    "LOCAL_MODEL_HOSTS",
    "ProviderAccess",
    "ProviderStore",
    "RemoteProvider",
    "check_name",
    "normalize_url",
    "split_model_id",
]
