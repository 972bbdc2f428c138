"""App-wide settings as JSON values in the store's app_settings table; the key the app gives other
apps (``api_key``) in the secret store instead (the OS keyring, else a file only the user can read)."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, fields
from pathlib import Path

from sqlalchemy import delete, select

from app.store.chat_store import ChatStore
from app.store.records import AppSettings
from app.store.schema import SettingRow
from engine.remote.keys import SecretStore

log = logging.getLogger(__name__)

SECRET_SERVICE = "hearth-app"
SECRETS_FILE = "app-secrets.json"
API_KEY = "api_key"  # the field of AppSettings, and its name in the secret store


def app_secrets(folder: Path) -> SecretStore:
    """The app's secrets: the OS keyring (service ``hearth-app``), else ``app-secrets.json`` in ``folder``."""
    return SecretStore(SECRET_SERVICE, folder / SECRETS_FILE)


class SettingsStore:
    """Reads and writes :class:`AppSettings`; unknown or broken values fall back to defaults.

    An API key an older Hearth kept in the table moves to the secret store the first time a
    store opens it, and leaves the table (and the database file's free pages).

    Args:
        store: The chat store whose app_settings table holds the settings.
        secrets: Where the API key goes (default: :func:`app_secrets` of the store's folder).
    """

    def __init__(self, store: ChatStore, *, secrets: SecretStore | None = None) -> None:
        self._store = store
        self.secrets = secrets or app_secrets(store.path.parent)
        self._move_key_out_of_table()

    def _move_key_out_of_table(self) -> None:
        with self._store.session() as s:
            row = s.get(SettingRow, API_KEY)
            raw = row.value if row is not None else None
        if raw is None:
            return
        try:
            key = json.loads(raw)
        except json.JSONDecodeError:
            key = ""
        if isinstance(key, str) and key:
            try:
                self.secrets.put(API_KEY, key)
            except OSError as exc:  # kept where it was: better in the table than lost
                log.warning("could not move the API key to the secret store: %s", exc)
                return
        with self._store.engine.begin() as connection:
            connection.exec_driver_sql("PRAGMA secure_delete=ON")  # overwrite it, not just unlink it
            connection.execute(delete(SettingRow).where(SettingRow.key == API_KEY))
        with self._store.engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")  # and no copy left in the WAL
        log.info("moved the API key from the settings table to the %s secret store", SECRET_SERVICE)

    def load(self) -> AppSettings:
        with self._store.session() as s:
            raw = {row.key: row.value for row in s.scalars(select(SettingRow))}
        defaults = AppSettings()
        values = {}
        for f in fields(AppSettings):
            if f.name == API_KEY or f.name not in raw:
                continue
            try:
                value = json.loads(raw[f.name])
            except json.JSONDecodeError:
                log.warning("ignoring a broken setting %s", f.name)
                continue
            default = getattr(defaults, f.name)
            if isinstance(default, tuple):
                value = tuple(str(v) for v in value) if isinstance(value, list) else default
            elif isinstance(default, bool):
                value = bool(value)
            elif isinstance(default, int):
                value = int(value) if isinstance(value, int | float) else default
            elif isinstance(default, str):
                value = str(value)
            values[f.name] = value
        values[API_KEY] = self.secrets.get(API_KEY) or ""
        return AppSettings(**values)

    def save(self, settings: AppSettings) -> None:
        """Keep ``settings``; the API key in the secret store (an empty one is deleted there).

        Raises:
            OSError: the API key could be kept neither in the keyring nor in its file.
        """
        data = asdict(settings)
        key = data.pop(API_KEY)
        if key:
            if self.secrets.get(API_KEY) != key:
                self.secrets.put(API_KEY, key)
        else:
            self.secrets.delete(API_KEY)
        with self._store.session() as s, s.begin():
            for name, value in data.items():
                encoded = json.dumps(list(value) if isinstance(value, tuple) else value)
                row = s.get(SettingRow, name)
                if row is None:
                    s.add(SettingRow(key=name, value=encoded))
                else:
                    row.value = encoded
