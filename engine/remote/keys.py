"""Where Hearth's secrets live: the OS keyring where one is usable, else a file only the user can read
(mode 0600). One :class:`SecretStore` per service: the remote providers' API keys (``hearth-remote``),
the MCP servers' secret values (``hearth-mcp``) and the key the app gives other apps (``hearth-app``).
Secrets are never written to the files that name them, nor shown."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

SERVICE = "hearth-remote"
# Real OS keyrings (Secret Service, macOS Keychain, Windows Credential Locker, KWallet) have a
# priority of about 5; the fail and null backends 0 or less; keyrings.alt's plaintext and encrypted
# files below 1 (one is no better than our own 0600 file, the other asks for a password).
MIN_PRIORITY = 1.0


class KeyStore(Protocol):
    """Holds one secret per provider name."""

    kind: str  # keyring | file

    def get(self, name: str) -> str | None: ...

    def set(self, name: str, key: str) -> None: ...

    def delete(self, name: str) -> None: ...


class KeyringKeys:
    """Keys in a ``keyring`` backend, under one service name (``hearth-remote`` by default)."""

    kind = "keyring"

    def __init__(self, backend: Any, service: str = SERVICE) -> None:
        self.backend = backend
        self.service = service

    def get(self, name: str) -> str | None:
        return self.backend.get_password(self.service, name)

    def set(self, name: str, key: str) -> None:
        self.backend.set_password(self.service, name, key)

    def delete(self, name: str) -> None:
        from keyring.errors import PasswordDeleteError

        try:
            self.backend.delete_password(self.service, name)
        except PasswordDeleteError:
            pass


class FileKeys:
    """Keys in a JSON file that only its owner can read or write (created 0600, rewritten atomically)."""

    kind = "file"

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("cannot read the keys file %s: %s", self.path, exc)
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _write(self, keys: dict[str, str]) -> None:
        write_private_text(self.path, json.dumps(keys, indent=2))

    def get(self, name: str) -> str | None:
        return self._read().get(name)

    def set(self, name: str, key: str) -> None:
        keys = self._read()
        keys[name] = key
        self._write(keys)

    def delete(self, name: str) -> None:
        keys = self._read()
        if keys.pop(name, None) is not None:
            self._write(keys)


def write_private_text(path: Path, text: str) -> None:
    """Replace ``path`` atomically with ``text`` in a file only its owner can read or write (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        if hasattr(os, "fchmod"):  # a leftover temp file keeps its old mode through O_CREAT
            os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


class SecretStore:
    """The secrets of one service: in the OS keyring where one is usable, else (or when the keyring
    refuses one, e.g. locked) in ``file``, mode 0600. :meth:`put` says which of the two holds a
    secret (``keyring`` or ``file``); callers that record it read it back from there.

    Args:
        service: The keyring's service name (``hearth-remote``, ``hearth-mcp``, ``hearth-app``).
        file: The fallback file.
        keys: Where new secrets go instead of the OS keyring (tests hand in their own backend).
    """

    def __init__(self, service: str, file: Path, *, keys: KeyStore | None = None) -> None:
        self.service = service
        self.file = FileKeys(file)
        self._keys = keys

    def _new_store(self) -> KeyStore:
        if self._keys is not None:
            return self._keys
        backend = usable_keyring()
        return KeyringKeys(backend, self.service) if backend is not None else self.file

    def store(self, kind: str | None) -> KeyStore | None:
        """The store of ``kind`` (``keyring`` or ``file``); None when it is not reachable from here."""
        if kind is None:
            return None
        if self._keys is not None and self._keys.kind == kind:
            return self._keys
        if kind == "file":
            return self.file
        backend = usable_keyring()
        return KeyringKeys(backend, self.service) if backend is not None else None

    def put(self, name: str, secret: str) -> str:
        """Keep ``secret`` as ``name``; returns the kind of store that holds it.

        Raises:
            OSError: neither the keyring nor the file could keep it.
        """
        store = self._new_store()
        try:
            store.set(name, secret)
        except Exception as exc:  # a locked keyring: the user-only file still keeps it safe
            if store is self.file:
                raise
            log.warning("the keyring refused a secret of %s (%s); keeping it in %s", self.service, exc, self.file.path)
            self.file.set(name, secret)
            return self.file.kind
        if store is not self.file:
            self.file.delete(name)  # an older copy in the file, from when the keyring was locked
        return store.kind

    def get(self, name: str, kind: str | None = None) -> str | None:
        """The secret ``name`` from the store of ``kind``, or (None) from the keyring, else the file;
        None when there is none or its keyring cannot be read (logged)."""
        stores = [self.store(kind)] if kind is not None else [self.store("keyring"), self.file]
        for store in stores:
            if store is None:
                continue
            try:
                secret = store.get(name)
            except Exception as exc:  # a locked or broken keyring: go on without it
                log.warning("cannot read a secret of %s from the %s: %s", self.service, store.kind, exc)
                continue
            if secret is not None:
                return secret
        return None

    def delete(self, name: str, kind: str | None = None) -> None:
        """Forget ``name`` in the store of ``kind``, or in both when None (failures are logged)."""
        stores = [self.store(kind)] if kind is not None else [self.store("keyring"), self.file]
        for store in stores:
            if store is None:
                continue
            try:
                store.delete(name)
            except Exception as exc:
                log.warning("could not delete a secret of %s from the %s: %s", self.service, store.kind, exc)


def usable_keyring() -> Any | None:
    """The OS keyring backend ``keyring`` would use, or None where there is no real one."""
    try:
        import keyring

        backend = keyring.get_keyring()
        priority = float(getattr(backend, "priority", 0) or 0)
    except Exception as exc:  # a broken keyring install must never stop Hearth from working
        log.info("no usable keyring: %s", exc)
        return None
    if priority < MIN_PRIORITY:
        return None
    return backend


__all__ = ["FileKeys", "KeyStore", "KeyringKeys", "SERVICE", "SecretStore", "usable_keyring", "write_private_text"]
