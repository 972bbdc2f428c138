"""`hearth models`: the models on this machine."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "models",
        aliases=["list", "ls"],  # `ollama list`, `ollama ls`
        help="list local models (and remote providers' models)",
        description="List the models on this machine, and those of the remote providers (`hearth remote`) as NAME/MODEL. "
        "Models of other apps (Ollama, LM Studio, Jan, GPT4All, the Hugging Face cache) are listed with their origin "
        "once --scan has added them; their files stay where they are.",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--scan",
        action="store_true",
        help="look for the models of Ollama, LM Studio, Jan, GPT4All and the Hugging Face cache, and use them in place",
    )
    p.add_argument("--yes", "-y", action="store_true", help="with --scan: use what is found without asking")
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


def _scan(args: argparse.Namespace, registry) -> int:
    """`hearth models --scan`: find other apps' models, and register them with --yes or a yes on a terminal."""
    from engine.catalog.other_apps import scan_other_apps, summary
    from engine.catalog.other_apps_sync import accept, new_models

    found = new_models(registry, scan_other_apps())
    if args.json and not args.yes:
        print(json.dumps([f.to_dict() | {"registered": False} for f in found], indent=2))
        return 0
    if not found:
        if args.json:
            print("[]")
        else:
            print("No new models from other apps were found.")
        return 0
    if not args.json:
        print(summary(found))
    if not args.yes:
        if not sys.stdin.isatty():
            print("Pass --yes to use them in Hearth (their files stay where they are).")
            return 1
        if input("Use them in Hearth? [y/N] ").strip().lower() not in ("y", "yes"):
            print("Nothing added.")
            return 1
    result = accept(registry, found)
    skipped = {f.name: reason for f, reason in result.skipped}
    if args.json:
        print(json.dumps([f.to_dict() | {"registered": f.name not in skipped} for f in found], indent=2))
        return 0
    for name, reason in skipped.items():
        print(f"note: {name} was skipped: {reason}", file=sys.stderr)
    print(f"Added {len(result.registered)} models; their files stay where they are. List them with `hearth models`.")
    return 0


def _origin_details(m) -> dict:
    """An other app's model: its mmproj and, for Ollama's, the defaults and which chat template is used."""
    if not m.origin:
        return {}
    info = m.origin_info or {}
    out = {"mmproj": info.get("mmproj")}
    if m.origin == "ollama":
        out |= {"defaults": info.get("defaults") or {}, "template_source": info.get("template_source")}
    return out


def capabilities_of(m) -> list[str]:
    """What a local model takes in besides text (``vision``, ``audio``), from its projector's header."""
    if m.mmproj is None:
        return []
    from engine.catalog.pairing import projector_senses

    return projector_senses(m.mmproj)


def run(args: argparse.Namespace) -> int:
    from engine.backend_choice import choose_backend
    from engine.catalog.other_apps import ORIGINS
    from engine.catalog.other_apps_sync import refresh
    from engine.catalog.registry import ModelRegistry
    from engine.commands.show import model_capabilities

    registry = ModelRegistry()
    if args.scan:
        return _scan(args, registry)
    refresh(registry)  # models the other apps pulled or deleted since the last look
    from engine.catalog.model_folders import sync_folders

    sync_folders(registry)  # and those in the model folders (an offline folder's are left out)
    models = registry.list()
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
                        "origin": m.origin,
                        "origin_label": ORIGINS.get(m.origin) if m.origin else None,
                        "made_from": m.derived_from,
                        "backend": choose_backend(m.format).backend,
                        "mmproj": str(m.mmproj) if m.mmproj else None,
                        "capabilities": model_capabilities(m),
                        **_origin_details(m),
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
    width = max([len(m.name) for m in models] + [len(m.id) for _, m in remote_models] + [len("NAME")])
    if models or remote_models:
        print(f"{'NAME':<{width}}  {'FORMAT':<11} {'QUANT':<8} {'SIZE':>9}  {'BACKEND':<9}  FROM".rstrip())
    for m in models:
        backend = choose_backend(m.format).backend
        origin = f"  {ORIGINS.get(m.origin, m.origin)}" if m.origin else f"  {m.derived_from}" if m.derived_from else ""
        senses = "".join(f"  [{c}]" for c in capabilities_of(m))  # "[vision]", "[audio]": a projector paired with it
        print(f"{m.name:<{width}}  {m.format:<11} {m.quantization or '-':<8} {human_size(m.size_bytes):>9}  {backend:<9}{origin}{senses}")
    for provider, m in remote_models:
        print(f"{m.id:<{width}}  {'remote':<11} {'-':<8} {'-':>9}  {provider.name} at {provider.base_url}")
    _remote_notes(remote)
    return 0
