"""`hearth show MODEL`: what a local model is, as `ollama show` says it: its chat template, parameters and
system prompt, context, capabilities, quantization, where its file is and which app it belongs to."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "show",
        help="show a model's template, parameters, context and capabilities",
        description="Show what MODEL is: its architecture, parameters, context, quantization and capabilities "
        "(vision, audio, tools, thinking, embedding), the chat template and system prompt it answers with, its "
        "default and saved load settings, where its file is and which app it belongs to.",
    )
    p.add_argument("model", metavar="MODEL", help="a model name, as `hearth models` lists it")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--template", action="store_true", help="print the chat template only")
    only.add_argument("--modelfile", action="store_true",
                      help="print the Modelfile that makes it (`hearth create NAME -f` reads it back)")  # fmt: skip
    only.add_argument("--parameters", action="store_true", help="print its own parameters only, a line each")
    only.add_argument("--system", action="store_true", help="print its system prompt only")
    only.add_argument("--license", action="store_true", help="print its license only")
    only.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def _template(m, kv: dict[str, Any]) -> str | None:
    """The chat template the model renders with: an Ollama model's translated one, else its file's (``kv``)."""
    info = m.origin_info or {}
    template = info.get("template") if info.get("template_source") == "ollama" else None
    template = template or kv.get("tokenizer.chat_template") or kv.get("chat_template") or None
    return template if isinstance(template, str) else None


def model_capabilities(m, kv: dict[str, Any] | None = None) -> list[str]:
    """What the local model ``m`` can do besides complete text, as `hearth show` and `hearth models --json` say it:
    ``tools``, ``thinking``, ``insert``, ``embedding``, ``vision``, ``audio`` (``kv``: its header, if read already)."""
    from engine.commands.models import capabilities_of
    from engine.server.ollama_models import capabilities, model_header

    kv = model_header(m) if kv is None else kv
    caps = capabilities(m, _template(m, kv) or "")
    if kv.get(f"{m.architecture}.attention.causal") is False:  # an encoder: vectors or scores, never text
        caps = ["embedding"]
    return sorted(set(caps + capabilities_of(m)) - {"completion"})


def describe(m, registry) -> dict[str, Any]:
    """Everything `hearth show` says of the local model ``m`` (``--json``'s stable keys)."""
    from engine.catalog.other_apps import ORIGINS
    from engine.server.ollama_models import model_header

    kv = model_header(m)
    info = m.origin_info or {}
    template = _template(m, kv)
    defaults = dict(info.get("defaults") or {}) if isinstance(info.get("defaults"), dict) else {}
    system = defaults.pop("system", None)
    messages = defaults.pop("messages", None)
    saved = _saved_settings(registry, m.name)
    return {
        "name": m.name,
        "architecture": m.architecture,
        "parameters": m.parameters,
        "context_length": m.context_length,
        "quantization": m.quantization,
        "format": m.format,
        "size_bytes": m.size_bytes,
        "capabilities": model_capabilities(m, kv),
        "template": template,
        "template_source": info.get("template_source") or ("gguf" if template else None),
        "system": system if isinstance(system, str) else None,
        "messages": messages if isinstance(messages, list) else [],  # a Modelfile's MESSAGE lines
        "made_from": m.derived_from,  # the model it was made from (`hearth create`, `ollama create`, `cp`)
        "parameters_default": defaults,  # the owner's (an Ollama Modelfile's PARAMETER lines)
        "load_settings": saved,  # saved with `hearth load --save` or the app's Settings…
        "path": str(m.path),
        "mmproj": str(m.mmproj) if m.mmproj else None,
        "source": m.source,
        "origin": m.origin,
        "origin_label": ORIGINS.get(m.origin, m.origin) if m.origin else None,
    }


def _saved_settings(registry, name: str) -> dict[str, Any]:
    from engine.load_settings import LoadSettingsStore

    return {k: v for k, v in LoadSettingsStore(registry.home).get(name).to_dict().items() if v is not None}


def shown_lines(d: dict[str, Any]) -> list[str]:
    """What `hearth show` prints of :func:`describe`'s answer, a line each."""
    from engine.commands.models import human_size

    def row(label: str, value: Any) -> str:
        return f"  {label:<14}{value}"

    n = d["parameters"] or 0
    params = f"{n / 1e9:.1f} B" if n >= 1e9 else f"{n / 1e6:.0f} M" if n else "-"
    owner = d["origin_label"] or {"hub": "Hearth (downloaded)", "starter": "Hearth (the starter model)"}.get(
        d["source"], "Hearth (imported)")  # fmt: skip
    out = ["Model", row("name", d["name"]), row("architecture", d["architecture"] or "-"), row("parameters", params),
           row("context", f"{d['context_length']:,} tokens" if d["context_length"] else "-"),
           row("quantization", d["quantization"] or "-"), row("size", human_size(d["size_bytes"] or 0)),
           row("file", d["path"]), row("belongs to", owner)]  # fmt: skip
    if d["made_from"]:
        out.append(row("made from", d["made_from"]))
    if d["mmproj"]:
        out.append(row("projector", d["mmproj"]))
    out += ["", "Capabilities", *(f"  {c}" for c in d["capabilities"] or ["-"])]
    if d["parameters_default"]:
        out += ["", "Parameters", *(row(k, json.dumps(v)) for k, v in sorted(d["parameters_default"].items()))]
    if d["load_settings"]:
        out += ["", "Load settings (saved)", *(row(k, v) for k, v in sorted(d["load_settings"].items()))]
    if d["system"]:
        out += ["", "System", *(f"  {line}" for line in d["system"].splitlines())]
    if d["messages"]:
        out += ["", "Messages", *(f"  {m.get('role')}: {m.get('content')}" for m in d["messages"] if isinstance(m, dict))]
    if d["template"]:
        source = {"ollama": "Ollama's, translated", "gguf": "the GGUF file's"}.get(d["template_source"] or "", "")
        out += ["", f"Template ({source})" if source else "Template"]
        out += [f"  {line}" for line in d["template"].splitlines()]
    return out


def run(args: argparse.Namespace) -> int:
    from engine.catalog.registry import ModelRegistry

    registry = ModelRegistry()
    model = registry.resolve(args.model)
    d = describe(model, registry)
    if args.json:
        print(json.dumps(d, indent=2))
    elif args.template:
        print(d["template"] or "")
    elif args.modelfile or args.parameters or args.system or args.license:
        from engine.server.ollama_models import model_header, modelfile, own_settings, parameters_text

        kv = model_header(model)
        given = kv.get("tokenizer.chat_template") or kv.get("chat_template") or ""
        template, system, defaults, messages, license_ = own_settings(model, given if isinstance(given, str) else "")
        if args.modelfile:
            print(modelfile(model, template, system, defaults, messages, license_), end="")
        else:
            print(parameters_text(defaults) if args.parameters else system if args.system else "\n".join(license_))
    else:
        print("\n".join(shown_lines(d)))
    return 0


__all__ = ["describe", "register", "shown_lines"]
