"""App-wide settings as JSON values in the store's app_settings table."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, fields

from sqlalchemy import select

from app.store.chat_store import ChatStore
from app.store.records import AppSettings
from app.store.schema import SettingRow

log = logging.getLogger(__name__)


class SettingsStore:
    """Reads and writes :class:`AppSettings`; unknown or broken values fall back to defaults."""

    def __init__(self, store: ChatStore) -> None:
        self._store = store

    def load(self) -> AppSettings:
        with self._store.session() as s:
            raw = {row.key: row.value for row in s.scalars(select(SettingRow))}
        defaults = AppSettings()
        values = {}
        for f in fields(AppSettings):
            if f.name not in raw:
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
        return AppSettings(**values)

    def save(self, settings: AppSettings) -> None:
        data = asdict(settings)
        with self._store.session() as s, s.begin():
            for key, value in data.items():
                encoded = json.dumps(list(value) if isinstance(value, tuple) else value)
                row = s.get(SettingRow, key)
                if row is None:
                    s.add(SettingRow(key=key, value=encoded))
                else:
                    row.value = encoded
