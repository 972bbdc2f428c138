"""`hearth import PATH`: register a GGUF file or a model folder already on this machine."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import",
        help="add a local GGUF file or model folder",
        description="Register a GGUF file (the first part, for split models) or a folder with config.json and "
        "safetensors. The files stay where they are. An mmproj*.gguf projector beside a GGUF file (LM Studio's "
        "layout) is paired with it, so the model sees; --mmproj names another.",
    )
    p.add_argument("path", help="the .gguf file or the model folder")
    p.add_argument("--name", help="the name to use for it (default: made from the file name)")
    p.add_argument("--mmproj", metavar="PATH", help="the multimodal projector (mmproj*.gguf) that lets it see")
    p.add_argument("--no-mmproj", action="store_true", help="do not pair a projector found beside it")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from engine.catalog.pairing import import_model
    from engine.catalog.registry import ModelRegistry
    from engine.commands.models import human_size
    from engine.errors import InvalidRequest
    from engine.paths import user_path

    if args.mmproj and args.no_mmproj:
        raise InvalidRequest("Give either --mmproj or --no-mmproj, not both.")
    mmproj = user_path(args.mmproj, param="mmproj") if args.mmproj is not None else None
    model = import_model(ModelRegistry(), user_path(args.path), name=args.name, mmproj=mmproj, pair=not args.no_mmproj)
    details = ", ".join(x for x in (model.format, model.quantization, human_size(model.size_bytes)) if x)
    print(f"Imported {model.name} ({details}) from {model.path}")
    if model.mmproj is not None:
        print(f"It sees: paired with the projector {model.mmproj}")
    return 0
