"""Where remote providers' API keys live: the OS keyring where one is usable, else a file only the
user can read (mode 0600). Keys are never written to the providers file or shown."""

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
    """Keys in a ``keyring`` backend, under the service name ``hearth-remote``."""

    kind = "keyring"

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def get(self, name: str) -> str | None:
        return self.backend.get_password(SERVICE, name)

    def set(self, name: str, key: str) -> None:
        self.backend.set_password(SERVICE, name, key)

    def delete(self, name: str) -> None:
        from keyring.errors import PasswordDeleteError

        try:
            self.backend.delete_password(SERVICE, name)
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
            log.warning("cannot read the remote keys file %s: %s", self.path, exc)
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _write(self, keys: dict[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if hasattr(os, "fchmod"):  # a leftover temp file keeps its old mode through O_CREAT
                os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(keys, f, indent=2)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, self.path)

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


__all__ = ["FileKeys", "KeyStore", "KeyringKeys", "SERVICE", "usable_keyring"]
