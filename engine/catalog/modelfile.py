"""Ollama's Modelfile: a model made from another (or from a GGUF file) with its own settings.

``FROM`` names the model (or the file), then ``PARAMETER name value`` (one line each; ``stop`` may repeat),
``SYSTEM``, ``TEMPLATE`` (Ollama's Go template), ``MESSAGE role text`` and ``LICENSE``. A value is the rest of its
line, a ``"quoted"`` one, or a ``\"\"\"triple-quoted\"\"\"`` one over several lines; ``#`` starts a comment line and
instructions are read in any case. :func:`parse` reads the text; :func:`layered` puts what a Modelfile sets over
the settings of the model it is made from, as Ollama layers them (used by ``hearth create`` and by Ollama's
``POST /api/create``, whose fields are a Modelfile's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.catalog.registry import LocalModel, ModelRegistry
from engine.errors import InvalidRequest
from engine.model_defaults import MESSAGE_ROLES, PARAMETERS, checked_messages, checked_parameters

#: Most characters a Modelfile may hold (its system text and template included).
MAX_MODELFILE_CHARS = 1 << 20
_INTS = frozenset({"top_k", "seed", "num_predict", "repeat_last_n", "num_ctx", "num_keep", "num_batch", "num_gpu",
                   "main_gpu", "num_thread", "mirostat"})  # fmt: skip
_BOOLS = frozenset({"penalize_newline", "numa", "low_vram", "vocab_only", "use_mmap", "use_mlock"})
_INSTRUCTIONS = ("from", "parameter", "system", "template", "message", "license", "adapter")


@dataclass(frozen=True, slots=True)
class Modelfile:
    """What a Modelfile (or ``/api/create``'s fields) asks for; None: not given."""

    base: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)
    system: str | None = None
    template: str | None = None
    messages: Sequence[Mapping[str, Any]] | None = None
    license: Sequence[str] | None = None
    adapters: Sequence[str] = ()


def _value(rest: str, lines: list[str], i: int, where: str) -> tuple[str, int]:
    """The value starting at ``rest`` (the text after the instruction on line ``i``), and the line after it."""
    text = rest.strip()
    if text.startswith('"""'):
        body = text[3:]
        j = i
        while '"""' not in body:
            j += 1
            if j >= len(lines):
                raise InvalidRequest(f"{where}: a value opened with \"\"\" is never closed; close it with \"\"\".")
            body += "\n" + lines[j]
        value, _, after = body.partition('"""')
        if after.strip():
            raise InvalidRequest(f"{where}: text after the closing \"\"\" ('{after.strip()[:40]}'); put it on a line of its own.")
        return value, j + 1
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return text[1:-1].replace('\\"', '"'), i + 1
    return text, i + 1


def _typed(name: str, text: str, where: str) -> Any:
    """A PARAMETER's text as the value Ollama's option of that name takes."""
    try:
        if name in _INTS:
            return int(text)
        if name in _BOOLS:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if name == "stop":
            return text
        return float(text)
    except ValueError:
        kind = "a whole number" if name in _INTS else "true or false" if name in _BOOLS else "a number"
        raise InvalidRequest(f"{where}: PARAMETER {name} must be {kind}, got '{text[:40]}'.") from None


def parse(text: str) -> Modelfile:
    """The Modelfile ``text``.

    Raises:
        InvalidRequest: a line it cannot read, naming it (no ``FROM``, an unknown instruction or parameter, a
            value of the wrong kind, a quote never closed).
    """
    if len(text) > MAX_MODELFILE_CHARS:
        raise InvalidRequest(f"The Modelfile is over {MAX_MODELFILE_CHARS:,} characters; shorten it.")
    lines = text.replace("\r\n", "\n").split("\n")
    base: str | None = None
    parameters: dict[str, Any] = {}
    system = template = None
    messages: list[dict[str, str]] = []
    licenses: list[str] = []
    adapters: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        where = f"Modelfile line {i + 1}"
        if not line or line.startswith("#"):
            i += 1
            continue
        word, _, rest = line.partition(" ")
        instruction = word.lower()
        if instruction not in _INSTRUCTIONS:
            raise InvalidRequest(f"{where}: '{word[:40]}' is not an instruction; use FROM, PARAMETER, SYSTEM, TEMPLATE, MESSAGE, "
                                 "LICENSE or ADAPTER.")  # fmt: skip
        if instruction == "parameter":
            name, _, rest = rest.strip().partition(" ")
            if name not in PARAMETERS:
                raise InvalidRequest(f"{where}: '{name[:40]}' is not a Modelfile parameter; docs/api.md lists them.")
            value, i = _value(rest, lines, i, where)
            typed = _typed(name, value, where)
            if name == "stop":
                parameters.setdefault("stop", []).append(typed)
            else:
                parameters[name] = typed
            continue
        if instruction == "message":
            role, _, rest = rest.strip().partition(" ")
            if role.lower() not in MESSAGE_ROLES:
                raise InvalidRequest(f"{where}: a MESSAGE's role must be system, user or assistant, got '{role[:40]}'.")
            value, i = _value(rest, lines, i, where)
            messages.append({"role": role.lower(), "content": value})
            continue
        value, i = _value(rest, lines, i, where)
        if instruction == "from":
            base = value
        elif instruction == "system":
            system = value
        elif instruction == "template":
            template = value
        elif instruction == "license":
            licenses.append(value)
        else:
            adapters.append(value)
    if not base:
        raise InvalidRequest("The Modelfile has no FROM line; start it with FROM and the model (or GGUF file) to build on.")
    return Modelfile(base, parameters, system, template, messages or None, licenses or None, tuple(adapters))


def layered(base_info: Mapping[str, object], asked: Modelfile) -> dict[str, object]:
    """``base_info`` (a registry entry's ``origin_info``) with what ``asked`` sets, as Ollama layers a Modelfile over
    its ``FROM``: parameters over the base's, each of system, messages, template and license in place of the
    base's where given (an empty text is not given, as in Ollama).

    Raises:
        InvalidRequest: a parameter, message or license Hearth cannot keep, or a template it cannot translate.
    """
    from engine.catalog.go_template import UnsupportedTemplate
    from engine.catalog.other_apps_sync import template_info
    from engine.chat_template import ChatTemplateError

    if asked.adapters:
        raise InvalidRequest("LoRA adapters are not supported; merge the adapter into the model's GGUF first.", param="adapters")
    info = dict(base_info)
    given = info.get("defaults")
    defaults: dict[str, Any] = dict(given) if isinstance(given, Mapping) else {}
    defaults.update(checked_parameters(asked.parameters))
    if asked.system:
        defaults["system"] = asked.system
    if asked.messages is not None:
        defaults["messages"] = checked_messages(list(asked.messages))
    if defaults:
        info["defaults"] = defaults
    if asked.license is not None:
        if not all(isinstance(t, str) for t in asked.license):
            raise InvalidRequest("'license' must be a string or a list of strings.", param="license")
        info["license"] = [t for t in asked.license if t]
    template = asked.template or (info.get("ollama_template") if asked.system else None)
    if isinstance(template, str) and template:
        try:
            info.update(template_info(template, defaults.get("system")))
        except (UnsupportedTemplate, ChatTemplateError) as exc:
            raise InvalidRequest(
                f"The template cannot be used ({exc}); leave it out to use the model's own.", param="template"
            ) from None
        info.pop("template_note", None)
    return info


def _file(base: str, folder: Path) -> Path | None:
    """The file (or model folder) ``FROM`` names, read from ``folder`` when relative; None: it names a model."""
    looks = base.startswith(("/", "./", "../", "~", ".\\", "..\\")) or base.lower().endswith(".gguf")
    path = Path(base).expanduser()
    path = path if path.is_absolute() else folder / path
    return path if looks or (path.exists() and ("/" in base or "\\" in base)) else None


def create_model(registry: ModelRegistry, name: str, asked: Modelfile, *, folder: Path) -> LocalModel:
    """Register ``name`` as the Modelfile ``asked`` makes it (``hearth create``): ``FROM`` a local model, made from it
    (:meth:`ModelRegistry.derive`: the files shared), or ``FROM`` a GGUF file or model folder (relative to ``folder``),
    read where it is as ``hearth import`` reads it (a projector beside it paired). A name made so before is
    replaced; another model's name is refused.

    Raises:
        ModelNotFound: ``FROM`` names no local model.
        ModelLoadError: the file is not a model Hearth can read.
        InvalidRequest: the name is another model's, or a setting Hearth cannot keep.
    """
    from engine.catalog.pairing import check_projector, projector_beside
    from engine.remote.routing import local_spelling

    base = asked.base or ""
    path = _file(base, folder)
    if path is None:
        found = registry.resolve(local_spelling(base))
        return registry.derive(found, name, layered(found.origin_info or {}, asked))
    if not path.exists():
        raise InvalidRequest(f"FROM {base}: there is no file at {path}; give the path of a GGUF file or a model folder.")
    existing = registry.get(name)
    if existing is not None and not existing.created:
        raise InvalidRequest(f"A model named '{name}' is already registered; remove it first or pick another name.")
    info = layered({"created": True}, asked)
    projector = projector_beside(path)
    if projector is not None:
        try:
            info["mmproj"] = str(check_projector(projector))
        except InvalidRequest:  # a file named mmproj* that is not one: the model alone
            pass
    model = registry.register(path, name=name, source="import", origin_info=info, replace=existing is not None)
    if existing is not None:
        registry.release_files(existing)  # an upload it replaces, when nothing else uses its files
    return model


__all__ = ["MAX_MODELFILE_CHARS", "Modelfile", "create_model", "layered", "parse"]
