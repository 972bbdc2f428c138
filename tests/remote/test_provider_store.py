"""The providers file and where keys go: the OS keyring where one is usable, else a 0600 file.

No OS keyring runs on this machine (no Secret Service), so the keyring path is checked with a
keyring backend of our own, handed to the store through its constructor."""

from __future__ import annotations

import json
import stat

import pytest
from keyring.backend import KeyringBackend
from keyring.errors import KeyringLocked

from engine.errors import InvalidRequest, ProviderNotFound
from engine.remote.keys import SERVICE, KeyringKeys, usable_keyring
from engine.remote.providers import ProviderStore, normalize_url, split_model_id


class MemoryKeyring(KeyringBackend):
    priority = 5

    def __init__(self, *, locked: bool = False) -> None:
        super().__init__()
        self.secrets: dict[tuple[str, str], str] = {}
        self.locked = locked

    def get_password(self, service, username):
        return self.secrets.get((service, username))

    def set_password(self, service, username, password):
        if self.locked:
            raise KeyringLocked("the keyring is locked")
        self.secrets[(service, username)] = password

    def delete_password(self, service, username):
        self.secrets.pop((service, username))


def test_the_key_goes_to_the_keyring_and_nowhere_else(tmp_path):
    ring = MemoryKeyring()
    store = ProviderStore(tmp_path / "remotes.json", keys=KeyringKeys(ring))
    provider = store.add("cluster", "http://gpu-head:8000", api_key="s3cret")
    assert provider.key_store == "keyring" and provider.base_url == "http://gpu-head:8000/v1"
    assert ring.secrets == {(SERVICE, "cluster"): "s3cret"}
    assert "s3cret" not in (tmp_path / "remotes.json").read_text()
    assert not (tmp_path / "remote-keys.json").exists()
    # Another process (the worker) reading the same file finds the key through the keyring.
    access = ProviderStore(tmp_path / "remotes.json", keys=KeyringKeys(ring)).access(store.get("cluster"))
    assert access.api_key == "s3cret" and access.headers() == {"Authorization": "Bearer s3cret"}
    assert "s3cret" not in repr(access)
    store.remove("cluster")
    assert ring.secrets == {} and store.list() == []


def test_a_locked_keyring_falls_back_to_a_file_only_the_user_can_read(tmp_path):
    store = ProviderStore(tmp_path / "remotes.json", keys=KeyringKeys(MemoryKeyring(locked=True)))
    provider = store.add("cluster", "https://api.example.com/openai/v1/", api_key="s3cret")
    assert provider.key_store == "file" and provider.base_url == "https://api.example.com/openai/v1"
    keys = tmp_path / "remote-keys.json"
    assert json.loads(keys.read_text()) == {"cluster": "s3cret"}
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    assert store.api_key(provider) == "s3cret"


def test_without_a_usable_keyring_keys_go_to_the_file(tmp_path):
    # The tests run with keyring's fail backend (see conftest): what a machine without one gets.
    assert usable_keyring() is None
    store = ProviderStore(tmp_path / "remotes.json")
    assert store.add("open", "http://127.0.0.1:8000/v1").key_store is None
    assert store.add("keyed", "http://127.0.0.1:8001/v1", api_key="k").key_store == "file"
    assert stat.S_IMODE((tmp_path / "remote-keys.json").stat().st_mode) == 0o600
    assert [p.name for p in store.list()] == ["open", "keyed"]


def test_hearth_remote_add_says_a_key_without_a_keyring_is_kept_in_plain_text(tmp_path, monkeypatch, capsys):
    from engine.cli import main

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    monkeypatch.setenv("TEST_PROVIDER_KEY", "s3cret")
    assert main(["remote", "add", "keyed", "http://127.0.0.1:9/v1", "--api-key-env", "TEST_PROVIDER_KEY"]) == 0
    said = capsys.readouterr().out
    assert "no OS keyring is usable here, so its key is in plain text in" in said
    assert str(tmp_path / "remote-keys.json") in said


def test_bad_names_urls_and_duplicates_are_refused_with_a_sentence(tmp_path):
    store = ProviderStore(tmp_path / "remotes.json")
    store.add("a", "http://h:1/v1")
    for name, url, words in (
        ("a", "http://h:2/v1", "named 'a' exists"),
        ("x/y", "http://h:1/v1", "cannot name a provider"),
        ("", "http://h:1/v1", "cannot name a provider"),
        ("b", "h:1/v1", "is not a server address"),
        ("b", "http://user:pw@h:1/v1", "not in the URL"),
        ("b", "http://127.0.0.1:abc/v1", "is not a server address"),
        ("b", "http://h:99999/v1", "is not a server address"),
        ("b", "http://[::1/v1", "is not a server address"),
    ):
        with pytest.raises(InvalidRequest, match=words):
            store.add(name, url)
    with pytest.raises(InvalidRequest, match="timeout"):
        store.add("b", "http://h:1/v1", timeout=0)
    with pytest.raises(ProviderNotFound, match="no remote provider named 'zz'"):
        store.remove("zz")
    assert [p.name for p in store.list()] == ["a"]


def test_a_provider_stored_with_an_unusable_address_is_listed_with_its_error(tmp_path):
    import asyncio

    from engine.remote.registry import RemoteRegistry

    path = tmp_path / "remotes.json"
    path.write_text(json.dumps({"providers": [{"name": "odd", "base_url": "http://127.0.0.1:abc/v1"}]}))
    store = ProviderStore(path)
    assert [p.name for p in store.list()] == ["odd"]

    async def listing():
        registry = RemoteRegistry(store)
        try:
            return await registry.statuses(fresh=True), await registry.models()
        finally:
            await registry.aclose()

    statuses, models = asyncio.run(listing())
    assert models == []
    assert statuses[0].error is not None and "odd" in str(statuses[0].error)


def test_an_unreadable_providers_file_is_no_providers_not_a_crash(tmp_path):
    path = tmp_path / "remotes.json"
    path.write_text("{not json")
    assert ProviderStore(path).list() == []
    path.write_text(json.dumps({"providers": [{"name": "ok", "base_url": "http://h:1/v1"}, {"oops": 1}]}))
    assert [p.name for p in ProviderStore(path).list()] == ["ok"]


def test_model_ids_split_only_on_a_known_provider():
    names = {"cluster"}
    assert split_model_id("cluster/meta-llama/Llama-3.1-70B", names) == ("cluster", "meta-llama/Llama-3.1-70B")
    assert split_model_id("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_K_M", names) is None
    assert split_model_id("cluster/", names) is None and split_model_id("cluster", names) is None
    assert normalize_url(" http://h:8000/ ") == "http://h:8000/v1"


def test_a_provider_cannot_take_the_owner_of_a_local_model_name(tmp_path, starter_path):
    """The demonstrated case: a local import named HuggingFaceTB/smollm2:Q4, then a provider named
    HuggingFaceTB (whose models would be HuggingFaceTB/...): refused when added, in any case."""
    from engine.catalog.registry import ModelRegistry

    store = ProviderStore(tmp_path / "remotes.json")  # the registry of the same data folder
    store.add("HuggingFaceTB", "http://h:1/v1")  # no local model has that owner yet
    store.remove("HuggingFaceTB")
    registry = ModelRegistry(tmp_path, register_starter=False)
    try:
        registry.register(starter_path, name="HuggingFaceTB/smollm2:Q4")
    finally:
        registry.close()
    for name in ("HuggingFaceTB", "huggingfacetb"):
        with pytest.raises(InvalidRequest) as err:
            store.add(name, "http://h:1/v1")
        assert str(err.value) == (
            f"The local model 'HuggingFaceTB/smollm2:Q4' has '{name}' before its '/', so a provider named "
            f"'{name}' would share its names; choose another provider name."
        )
        assert err.value.param == "name"
    store.add("HuggingFace", "http://h:1/v1")  # another owner is fine
    assert [p.name for p in store.list()] == ["HuggingFace"]


def test_a_provider_cannot_take_a_name_ollama_clients_write_before_a_local_model(tmp_path):
    """`hf.co/MODEL` is a local model on /api/chat; a provider named hf.co would answer it on /v1."""
    store = ProviderStore(tmp_path / "remotes.json")
    for name in ("hf.co", "HF.co", "huggingface.co"):
        with pytest.raises(InvalidRequest, match=f"a provider cannot be named '{name}'") as err:
            store.add(name, "http://h:1/v1")
        assert err.value.param == "name"
    assert store.list() == []


def test_hearth_chat_takes_a_local_name_before_a_providers(tmp_path, starter_path, monkeypatch):
    """`hearth chat --model OWNER/NAME`: a local model of that name answers, even with a provider OWNER."""
    from engine.catalog.registry import ModelRegistry
    from engine.commands.chat import _open_remote

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    ProviderStore().add("acme", "http://127.0.0.1:9/v1")  # before the local model took the owner
    registry = ModelRegistry(tmp_path, register_starter=False)
    try:
        registry.register(starter_path, name="acme/smollm2:Q4")
    finally:
        registry.close()
    assert _open_remote("acme/smollm2:Q4") is None  # the local model: opened by open_model
    chat, _ = _open_remote("acme/other-model")
    try:
        assert chat.name == "acme/other-model" and chat.remote_id == "other-model"
    finally:
        chat.close()
