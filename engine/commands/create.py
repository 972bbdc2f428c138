"""`hearth create NAME [-f Modelfile]` and `hearth cp SOURCE DESTINATION`: a model made from another with its own
settings, as `ollama create` and `ollama cp` make one (engine.catalog.modelfile)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "create",
        help="make a model from a Modelfile (another model, or a GGUF file, with its own settings)",
        description="Make the model NAME from a Modelfile, as `ollama create` does: FROM a local model (its files are "
        "shared) or a GGUF file (read where it is, as `hearth import` reads it), with PARAMETER, SYSTEM, TEMPLATE "
        "(Ollama's Go template), MESSAGE and LICENSE lines. Every request to NAME takes them as its defaults. "
        "Making NAME again replaces it.",
    )
    p.add_argument("name", metavar="NAME", help="the new model's name (letters, digits, '.', '_', '-', one ':TAG')")
    p.add_argument("--file", "-f", default="Modelfile", help="the Modelfile ('-': read it from standard input; default: ./Modelfile)")
    p.set_defaults(run=run_create)
    c = sub.add_parser(
        "cp",
        help="copy a model under another name (its settings too; the files are shared)",
        description="Register DESTINATION as another name for SOURCE, with its settings, as `ollama cp` does. The files "
        "are shared: removing either model leaves them while the other uses them.",
    )
    c.add_argument("source", metavar="SOURCE")
    c.add_argument("destination", metavar="DESTINATION")
    c.set_defaults(run=run_copy)


def _read(file: str) -> tuple[str, Path]:
    """The Modelfile's text and the folder a relative ``FROM ./file.gguf`` is read from."""
    from engine.errors import InvalidRequest
    from engine.paths import user_path

    if file == "-":
        return sys.stdin.read(), Path.cwd()
    path = user_path(file, param="file")
    try:
        data = path.read_bytes()
        # as Ollama reads one: UTF-8, or UTF-16 with its byte-order mark (Windows editors and PowerShell write it)
        return data.decode("utf-16" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig"), path.parent
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "it is not UTF-8 or UTF-16 text"
        raise InvalidRequest(f"Could not read the Modelfile {path} ({reason}); give its path with -f.") from None


def run_create(args: argparse.Namespace) -> int:
    from engine.catalog.modelfile import create_model, parse
    from engine.catalog.registry import ModelRegistry
    from engine.remote.routing import local_spelling
    from engine.validation import model_name

    name = model_name(local_spelling(args.name), name="NAME")
    text, folder = _read(args.file)
    asked = parse(text)
    model = create_model(ModelRegistry(), name, asked, folder=folder)
    print(f"Created {model.name} from {model.derived_from or model.path}")
    return 0


def run_copy(args: argparse.Namespace) -> int:
    from engine.catalog.registry import ModelRegistry
    from engine.errors import ModelNotFound
    from engine.remote.routing import local_spelling
    from engine.validation import model_name

    registry = ModelRegistry()
    try:
        source = registry.resolve(args.source)
    except ModelNotFound:
        source = registry.resolve(local_spelling(args.source))  # as Ollama's clients write it: name:latest
    name = model_name(local_spelling(args.destination), name="DESTINATION")
    if name != source.name:
        registry.derive(source, name, dict(source.origin_info or {}))
    print(f"Copied {source.name} to {name}")
    return 0
