"""`hearth models`: the models on this machine."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list local models", description="List the models on this machine.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"


def run(args: argparse.Namespace) -> int:
    from engine.backends.choice import choose_backend
    from engine.catalog.registry import ModelRegistry

    models = ModelRegistry().list()
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
                ],
                indent=2,
            )
        )
        return 0
    if not models:
        print("No local models. Get one with `hearth pull REPO`.")
        return 0
    width = max(len(m.name) for m in models)
    for m in models:
        backend = choose_backend(m.format).backend
        print(f"{m.name:<{width}}  {m.format:<11} {m.quantization or '-':<8} {human_size(m.size_bytes):>9}  {backend}")
    return 0
