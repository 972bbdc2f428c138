"""`hearth remote`: OpenAI-compatible servers elsewhere (a vLLM or SGLang cluster, another Hearth)
whose models Hearth lists and serves as ``NAME/MODEL``."""

from __future__ import annotations

import argparse
import json
import os
import sys

from engine import validation as valid


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "remote",
        help="add, list or remove remote providers (vLLM, SGLang, any OpenAI-compatible server)",
        description=(
            "Remote providers are OpenAI-compatible servers elsewhere, such as a vLLM or SGLang cluster. "
            "Their models appear in `hearth models`, the app and the local API as NAME/MODEL."
        ),
    )
    actions = p.add_subparsers(dest="remote_command", metavar="ACTION", required=True)
    add = actions.add_parser(
        "add",
        help="add a provider",
        description="Add a provider by name and base URL, and list the models it serves.",
    )
    add.add_argument("name", metavar="NAME", help="a short name; its models become NAME/MODEL")
    add.add_argument("url", metavar="URL", help="its OpenAI base URL, e.g. http://gpu-head:8000/v1")
    add.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="read its API key from this environment variable (kept in the OS keyring, else in a file only you can read)",
    )
    add.add_argument(
        "--timeout",
        type=valid.number(valid.SECONDS),
        default=None,
        help="seconds it may take to start answering or between two chunks (default 120)",
    )
    add.set_defaults(run=run_add)
    ls = actions.add_parser("list", help="list providers and their models", description="List providers and their models.")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(run=run_list)
    rm = actions.add_parser("rm", help="remove a provider and its key", description="Remove a provider and its key.")
    rm.add_argument("name", metavar="NAME")
    rm.set_defaults(run=run_rm)


def _key_from_env(var: str | None) -> str | None:
    from engine.errors import InvalidRequest

    if var is None:
        return None
    key = os.environ.get(var, "").strip()
    if not key:
        raise InvalidRequest(f"The environment variable {var} is empty or not set; put the API key in it first.")
    return key


def _where_key(provider, store) -> str:
    if provider.key_store == "keyring":
        return "its key is in the OS keyring"
    if provider.key_store == "file":  # no keyring here: say that the key sits unencrypted on the disk
        return (
            f"no OS keyring is usable here, so its key is in plain text in {store.file_keys.path}, "
            "readable only by you"
        )
    return "no API key"


def run_add(args: argparse.Namespace) -> int:
    from engine.remote.providers import ProviderStore
    from engine.remote.registry import RemoteRegistry

    key = _key_from_env(args.api_key_env)
    store = ProviderStore()
    provider = store.add(args.name, args.url, api_key=key, timeout=args.timeout)
    print(f"Added '{provider.name}' at {provider.base_url}; {_where_key(provider, store)}.")
    status = _probe(RemoteRegistry(store), provider.name)
    if status.error is not None:
        print(f"hearth: warning: {status.error}", file=sys.stderr)
    elif status.models:
        print(f"It serves {len(status.models)} model(s): {', '.join(m.id for m in status.models)}")
    else:
        print("It lists no models yet.")
    return 0


def _probe(registry, name: str):
    import asyncio

    async def run():
        try:
            return await registry.status(await registry.access(registry.providers()[name]), fresh=True)
        finally:
            await registry.aclose()

    return asyncio.run(run())


def run_list(args: argparse.Namespace) -> int:
    from engine.remote.providers import ProviderStore
    from engine.remote.registry import probe_all

    store = ProviderStore()
    statuses = probe_all(store) if store.list() else []
    if args.json:
        print(json.dumps([s.to_json() for s in statuses], indent=2))
        return 0
    if not statuses:
        print("No remote providers. Add one with `hearth remote add NAME URL [--api-key-env VAR]`.")
        return 0
    width = max(len(s.provider.name) for s in statuses)
    for s in statuses:
        p = s.provider
        key = {"keyring": "key in keyring", "file": "key in file", None: "no key"}[p.key_store]
        state = f"{len(s.models)} model(s)" if s.error is None else s.state
        print(f"{p.name:<{width}}  {p.base_url}  {key}  {state}")
        for m in s.models:
            print(f"{'':<{width}}    {m.id}")
        if s.error is not None:
            print(f"{'':<{width}}    {s.error}")
    return 0


def run_rm(args: argparse.Namespace) -> int:
    from engine.remote.providers import ProviderStore

    provider = ProviderStore().remove(args.name)
    print(f"Removed '{provider.name}' ({provider.base_url}) and its key.")
    return 0
