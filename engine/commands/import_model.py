"""`hearth import PATH`: register a GGUF file or a model folder already on this machine."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import",
        help="add a local GGUF file or model folder",
        description="Register a GGUF file (the first part, for split models) or a folder with config.json and "
        "safetensors. The files stay where they are.",
    )
    p.add_argument("path", help="the .gguf file or the model folder")
    p.add_argument("--name", help="the name to use for it (default: made from the file name)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from engine.catalog.registry import ModelRegistry
    from engine.commands.models import human_size

    model = ModelRegistry().register(args.path, name=args.name, source="import")
    details = ", ".join(x for x in (model.format, model.quantization, human_size(model.size_bytes)) if x)
    print(f"Imported {model.name} ({details}) from {model.path}")
    return 0
