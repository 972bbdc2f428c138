"""The app's data at rest: the chat database private to its owner, the key other apps use kept in the
secret store (never in the database), and a database a newer Hearth made refused with a sentence."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys

import pytest
from keyring.backend import KeyringBackend

from app.store import AppSettings, ChatSettings, ChatStore, SettingsStore
from app.store.chat_store import DB_NAME
from app.store.recovery import StoreTooNew
from app.store.settings_store import SECRET_SERVICE, SECRETS_FILE
from engine.remote.keys import KeyringKeys, SecretStore, usable_keyring

KEY = "sk-hearth-abcdefghijklmnop"
NEWER = "This chat database was made by a newer Hearth; update Hearth to open it."


class MemoryKeyring(KeyringBackend):
    priority = 5

    def __init__(self) -> None:
        super().__init__()
        self.secrets: dict[tuple[str, str], str] = {}

    def get_password(self, service, username):
        return self.secrets.get((service, username))

    def set_password(self, service, username, password):
        self.secrets[(service, username)] = password

    def delete_password(self, service, username):
        self.secrets.pop((service, username))


def table_rows(folder) -> dict[str, str]:
    db = sqlite3.connect(folder / DB_NAME)
    try:
        return dict(db.execute("SELECT key, value FROM app_settings"))
    finally:
        db.close()


def database_bytes(folder) -> bytes:
    return b"".join(p.read_bytes() for p in folder.glob(DB_NAME + "*"))


@pytest.mark.skipif(os.name == "nt", reason="POSIX modes; Windows keeps the profile private")
def test_the_chat_database_is_readable_by_its_owner_only(tmp_path):
    old_umask = os.umask(0o022)
    try:
        store = ChatStore(tmp_path)
        store.create_chat(ChatSettings(model="m"))
    finally:
        os.umask(old_umask)
    try:
        for path in tmp_path.glob(DB_NAME + "*"):  # with its -wal and -shm files
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name
    finally:
        store.close()


def test_the_api_key_goes_to_the_secret_store_and_never_to_the_database(tmp_path):
    # The tests run with keyring's fail backend (see conftest): the user-only file is what holds it.
    assert usable_keyring() is None
    store = ChatStore(tmp_path)
    try:
        settings = SettingsStore(store)
        settings.save(AppSettings(expose_api=True, api_key=KEY))
        assert SettingsStore(store).load().api_key == KEY
        assert "api_key" not in table_rows(tmp_path) and table_rows(tmp_path)["expose_api"] == "true"
        secrets = tmp_path / SECRETS_FILE
        assert json.loads(secrets.read_text()) == {"api_key": KEY}
        if os.name != "nt":
            assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
        settings.save(AppSettings(expose_api=True, api_key=""))  # no key: none kept anywhere
        assert json.loads(secrets.read_text()) == {} and SettingsStore(store).load().api_key == ""
    finally:
        store.close()
    assert KEY.encode() not in database_bytes(tmp_path)


def test_with_an_os_keyring_the_key_is_kept_there_only(tmp_path):
    ring = MemoryKeyring()
    store = ChatStore(tmp_path)
    try:
        secrets = SecretStore(SECRET_SERVICE, tmp_path / SECRETS_FILE, keys=KeyringKeys(ring, SECRET_SERVICE))
        SettingsStore(store, secrets=secrets).save(AppSettings(api_key=KEY))
        assert ring.secrets == {(SECRET_SERVICE, "api_key"): KEY}
        assert not (tmp_path / SECRETS_FILE).exists()
        assert SettingsStore(store, secrets=secrets).load().api_key == KEY
    finally:
        store.close()


def test_a_key_an_older_hearth_kept_in_the_table_moves_to_the_secret_store_once(tmp_path):
    store = ChatStore(tmp_path)
    store.close()
    db = sqlite3.connect(tmp_path / DB_NAME)
    with db:  # what an older Hearth wrote: every setting in the table, the key among them
        db.executemany(
            "INSERT INTO app_settings (key, value) VALUES (?, ?)",
            [("api_key", json.dumps(KEY)), ("expose_api", "true"), ("port", "11500")],
        )
    db.close()

    store = ChatStore(tmp_path)
    try:
        loaded = SettingsStore(store).load()
        assert (loaded.api_key, loaded.expose_api, loaded.port) == (KEY, True, 11500)
        assert set(table_rows(tmp_path)) == {"expose_api", "port"}
        assert json.loads((tmp_path / SECRETS_FILE).read_text()) == {"api_key": KEY}
        # Once: a later start finds nothing to move, and the key where it went.
        (tmp_path / SECRETS_FILE).write_text(json.dumps({"api_key": "sk-changed-since"}))
        assert SettingsStore(store).load().api_key == "sk-changed-since"
    finally:
        store.close()
    assert KEY.encode() not in database_bytes(tmp_path)  # overwritten, not just unlinked


def stamp_newer(folder) -> bytes:
    store = ChatStore(folder)
    store.create_chat(ChatSettings(model="m"), title="Kept as it is")
    store.close()
    db = sqlite3.connect(folder / DB_NAME)
    with db:
        db.execute("UPDATE alembic_version SET version_num = '0099_from_a_newer_hearth'")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return (folder / DB_NAME).read_bytes()


def test_a_database_from_a_newer_hearth_is_refused_with_a_sentence_and_left_as_it_is(tmp_path):
    before = stamp_newer(tmp_path)
    with pytest.raises(StoreTooNew) as caught:
        ChatStore(tmp_path)
    assert str(caught.value) == NEWER and caught.value.revision == "0099_from_a_newer_hearth"
    assert (tmp_path / DB_NAME).read_bytes() == before
    assert not list(tmp_path.glob("chats.damaged-*"))  # not taken for a damaged one


def test_the_app_started_on_a_newer_database_says_so_and_exits(tmp_path):
    before = stamp_newer(tmp_path)
    env = {**os.environ, "HEARTH_HOME": str(tmp_path), "QT_QPA_PLATFORM": "offscreen"}
    code = "import sys; from app.application import run_app; sys.exit(run_app())"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    assert NEWER in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / DB_NAME).read_bytes() == before
