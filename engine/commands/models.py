"""`hearth models`: the models on this machine."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "models",
        help="list local models (and remote providers' models)",
        description="List the models on this machine, and those of the remote providers (`hearth remote`) as NAME/MODEL.",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"


def _remote_statuses() -> list:
    """Every remote provider's models (a provider that does not answer within a few seconds is skipped)."""
    from engine.remote.providers import ProviderStore

    store = ProviderStore()
    if not store.list():
        return []
    from engine.remote.registry import probe_all

    return probe_all(store)


def _remote_notes(statuses: list) -> None:
    for s in statuses:
        if s.error is not None:
            print(f"note: {s.error} Its models are not listed.", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from engine.backend_choice import choose_backend
    from engine.catalog.registry import ModelRegistry

    models = ModelRegistry().list()
    remote = _remote_statuses()
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "name": m.name,
                        "path": str(m.path),
                        "format": m.format,
                        "quantization": m.quantization,
                        "size_bytes": m.size_bytes,
                        "architecture": m.architecture,
                        "context_length": m.context_length,
                        "source": m.source,
                        "backend": choose_backend(m.format).backend,
                    }
                    for m in models
                ]
                + [
                    {
                        "name": m.id,
                        "provider": s.provider.name,
                        "provider_url": s.provider.base_url,
                        "remote_id": m.remote_id,
                        "format": "remote",
                        "context_length": m.context_length,
                        "source": "remote",
                        "backend": "remote",
                    }
                    for s in remote
                    for m in s.models
                ],
                indent=2,
            )
        )
        _remote_notes(remote)
        return 0
    remote_models = [(s.provider, m) for s in remote for m in s.models]
    if not models and not remote_models:
        print("No local models. Get one with `hearth pull REPO`.")
    width = max([len(m.name) for m in models] + [len(m.id) for _, m in remote_models], default=0)
    for m in models:
        backend = choose_backend(m.format).backend
        print(f"{m.name:<{width}}  {m.format:<11} {m.quantization or '-':<8} {human_size(m.size_bytes):>9}  {backend}")
    for provider, m in remote_models:
        print(f"{m.id:<{width}}  {'remote':<11} {'-':<8} {'-':>9}  {provider.name} at {provider.base_url}")
    _remote_notes(remote)
    return 0
