"""Ollama's Modelfile: a model made from another (or from a GGUF file) with its own settings.

``FROM`` names the model (or the file), then ``PARAMETER name value`` (one line each; ``stop`` may repeat),
``SYSTEM``, ``TEMPLATE`` (Ollama's Go template), ``MESSAGE role text`` and ``LICENSE``. A value is the rest of its
line, a ``"quoted"`` one, or a ``\"\"\"triple-quoted\"\"\"`` one over several lines; ``#`` starts a comment line and
instructions are read in any case. :func:`parse` reads the text; :func:`layered` puts what a Modelfile sets over
the settings of the model it is made from, as Ollama layers them (used by ``hearth create`` and by Ollama's
``POST /api/create``, whose fields are a Modelfile's).
"""

from __future__ import annotations

import re
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
_BOOLS = frozenset({"penalize_newline", "numa", "low_vram", "vocab_only", "use_mmap", "use_mlock", "f16_kv", "logits_all"})
_TRUE, _FALSE = ("1", "t", "T", "TRUE", "true", "True"), ("0", "f", "F", "FALSE", "false", "False")
#: Parameters Ollama no longer takes: read, and left out (Ollama warns and drops them).
_DROPPED = frozenset({"f16_kv", "logits_all"})
_INSTRUCTIONS = ("from", "parameter", "system", "template", "message", "license", "adapter", "draft", "renderer", "parser",
                 "requires")  # fmt: skip
_WORD = re.compile(r"([A-Za-z]+)(?:[ \t]+|$)")
_NAME = re.compile(r"([A-Za-z0-9_]+)(?:[ \t]+|$)")


@dataclass(frozen=True, slots=True)
class Modelfile:
    """What a Modelfile (or ``/api/create``'s fields) asks for; None: not given. ``more``: the ``FROM`` lines after
    the first (``ollama show --modelfile`` writes a model's projector so)."""

    base: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)
    system: str | None = None
    template: str | None = None
    messages: Sequence[Mapping[str, Any]] | None = None
    license: Sequence[str] | None = None
    adapters: Sequence[str] = ()
    more: Sequence[str] = ()


def _complete(text: str) -> bool:
    """Whether ``text`` (stripped) is a whole value: unquoted, or closed as it was opened (``\"`` or ``\"\"\"``)."""
    if text.startswith('"""'):
        return len(text) >= 6 and text.endswith('"""')
    if text.startswith('"'):
        return len(text) >= 2 and text.endswith('"')
    return True


def _value(rest: str, lines: list[str], i: int, where: str) -> tuple[str, int]:
    """The value starting at ``rest`` (the text after the instruction on line ``i``), and the line after it, as
    Ollama reads one: it ends at the first line end where what came is whole (unquoted, or its quotes closed);
    the quotes go, three or one, and what is inside stays as written (backslashes and blanks too)."""
    text, j = rest, i
    while not _complete(text.strip()):
        j += 1
        if j >= len(lines):
            raise InvalidRequest(f"{where}: a quoted value is never closed; close it with the quotes it opened with.")
        text += "\n" + lines[j]
    text = text.strip()
    quotes = 3 if text.startswith('"""') else 1 if text.startswith('"') else 0
    return (text[quotes:-quotes] if quotes else text), j + 1


def written(text: str) -> str:
    """``text`` as a Modelfile value that :func:`parse` reads back as it is: as Ollama writes one (as it is, unless it
    holds a line end or starts or ends with a blank or a quote; then in quotes, three where it holds a quote). A text
    with a line inside it that ends in a quote (a Python docstring's) has no spelling a reader takes back whole, in
    Ollama's format as in Hearth's reading of it: it is written in three quotes, as Ollama writes it. Line ends are
    written as ``\\n``: a reader takes ``\\r\\n`` and ``\\r`` for one too."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")

    def reads_back(value: str) -> bool:
        lines = value.split("\n")
        try:
            got, after = _value(lines[0], lines, 0, "")
        except InvalidRequest:
            return False
        return got == text and after == len(lines)

    plain = [text] if text and text.strip() == text and not text.startswith('"') and "\n" not in text else []
    quoted = [f'"""{text}"""', f'"{text}"'] if '"' in text else [f'"{text}"', f'"""{text}"""']
    return next((value for value in (*plain, *quoted) if reads_back(value)), f'"""{text}"""')


def _typed(name: str, text: str, where: str) -> Any:
    """A PARAMETER's text as the value Ollama's option of that name takes."""
    try:
        if name in _INTS:
            return int(text)
        if name in _BOOLS:
            if text not in _TRUE + _FALSE:
                raise ValueError(text)
            return text in _TRUE
        if name == "stop":
            return text
        return float(text)
    except ValueError:
        kind = "a whole number" if name in _INTS else "true or false" if name in _BOOLS else "a number"
        raise InvalidRequest(f"{where}: PARAMETER {name} must be {kind}, got '{text[:40]}'.") from None


def parse(text: str) -> Modelfile:
    """The Modelfile ``text``, read as Ollama reads one (a byte-order mark, CR or CRLF line ends, tabs between
    words). ``REQUIRES``, ``RENDERER`` and ``PARSER`` (Ollama's own) are read and left out: Hearth renders with the
    model's template.

    Raises:
        InvalidRequest: a line it cannot read, naming it (no ``FROM``, an unknown instruction or parameter, a
            value of the wrong kind, a quote never closed, a ``DRAFT`` model).
    """
    if len(text) > MAX_MODELFILE_CHARS:
        raise InvalidRequest(f"The Modelfile is over {MAX_MODELFILE_CHARS:,} characters; shorten it.")
    lines = re.split(r"\r\n|\r|\n", text.removeprefix("\ufeff"))
    bases: list[str] = []
    parameters: dict[str, Any] = {}
    system = template = None
    messages: list[dict[str, str]] = []
    licenses: list[str] = []
    adapters: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t")
        where = f"Modelfile line {i + 1}"
        if not line or line.startswith("#"):
            i += 1
            continue
        word = _WORD.match(line)
        instruction = word.group(1).lower() if word else ""
        if word is None or instruction not in _INSTRUCTIONS:
            shown = line.split()[0][:40]
            raise InvalidRequest(f"{where}: '{shown}' is not an instruction; use FROM, PARAMETER, SYSTEM, TEMPLATE, MESSAGE, "
                                 "LICENSE or ADAPTER.")  # fmt: skip
        rest = line[word.end() :]
        if instruction == "parameter":
            name = _NAME.match(rest)
            if name is None or name.group(1) not in PARAMETERS | _DROPPED:
                shown = rest.split()[0][:40] if rest.split() else ""
                raise InvalidRequest(f"{where}: '{shown}' is not a Modelfile parameter; docs/api.md lists them.")
            value, i = _value(rest[name.end() :], lines, i, where)
            key = name.group(1)
            typed = _typed(key, value, where)
            if key in _DROPPED:
                continue
            if key == "stop":
                parameters.setdefault("stop", []).append(typed)
            else:
                parameters[key] = typed
            continue
        if instruction == "message":
            role = _WORD.match(rest)
            if role is None or role.group(1).lower() not in MESSAGE_ROLES:
                shown = rest.split()[0][:40] if rest.split() else ""
                raise InvalidRequest(f"{where}: a MESSAGE's role must be system, user or assistant, got '{shown}'.")
            value, i = _value(rest[role.end() :], lines, i, where)
            messages.append({"role": role.group(1).lower(), "content": value})
            continue
        value, i = _value(rest, lines, i, where)
        if instruction == "from":
            bases.append(value)
        elif instruction == "system":
            system = value
        elif instruction == "template":
            template = value
        elif instruction == "license":
            licenses.append(value)
        elif instruction == "adapter":
            adapters.append(value)
        elif instruction == "draft":
            raise InvalidRequest(f"{where}: a DRAFT model is not taken from a Modelfile; give it with --draft-model when "
                                 "the model is served.")  # fmt: skip
    if not bases or not bases[0]:
        raise InvalidRequest("The Modelfile has no FROM line; start it with FROM and the model (or GGUF file) to build on.")
    return Modelfile(bases[0], parameters, system, template, messages or None, licenses or None, tuple(adapters),
                     tuple(bases[1:]))  # fmt: skip


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
    """The file (or model folder) ``FROM`` names, read from ``folder`` when relative, as Ollama's client looks first for
    a path; None: it names a model."""
    looks = base in (".", "..") or base.startswith(("/", "./", "../", "~", ".\\", "..\\")) or base.lower().endswith(".gguf")
    path = Path(base).expanduser()
    path = path if path.is_absolute() else folder / path
    return path if looks or path.exists() else None


def _in_folder(path: Path) -> Path:
    """The model a folder ``FROM`` names holds: itself with a config.json (safetensors), else its one GGUF model
    (or the first part of a split one), as Ollama reads a folder of GGUF files.

    Raises:
        InvalidRequest: neither, or several GGUF models.
    """
    from engine.catalog.variants import is_projector

    if not path.is_dir() or (path / "config.json").is_file():
        return path
    models = sorted(p for p in path.glob("*.gguf") if not is_projector(p.name))
    firsts = [p for p in models if not re.search(r"-\d{5}-of-\d{5}\.gguf$", p.name, re.I) or "-00001-of-" in p.name]
    if len(firsts) != 1:
        raise InvalidRequest(
            f"{path} holds {len(firsts)} GGUF models and no config.json; name the model's file in FROM."
        )
    return firsts[0]


def _files(asked: Modelfile, folder: Path) -> tuple[Path, Path | None] | None:
    """The model file and projector the ``FROM`` lines name (``ollama show --modelfile`` writes a projector as a
    second ``FROM``); None: they name a model.

    Raises:
        InvalidRequest: a file that is not there, or more files than a model and its projector.
    """
    from engine.catalog.pairing import check_projector

    bases = [asked.base or "", *asked.more]
    paths = [_file(base, folder) for base in bases]
    if paths[0] is None:
        return None
    for base, path in zip(bases, paths, strict=True):
        if path is None or not path.exists():
            raise InvalidRequest(f"FROM {base}: there is no file at {path or base}; give the path of a GGUF file or a model folder.")
    found = [p for p in paths if p is not None]
    projectors = []
    for path in found[1:]:
        try:
            projectors.append(check_projector(path))
        except InvalidRequest:
            raise InvalidRequest(f"FROM {path}: a second FROM must be the model's projector (mmproj); this is a model.") from None
    if len(projectors) > 1:
        raise InvalidRequest("The Modelfile names more than one projector; keep the one that belongs to the model.")
    return _in_folder(found[0]), (projectors[0] if projectors else None)


def create_model(registry: ModelRegistry, name: str, asked: Modelfile, *, folder: Path) -> LocalModel:
    """Register ``name`` as the Modelfile ``asked`` makes it (``hearth create``): ``FROM`` a local model, made from it
    (:meth:`ModelRegistry.derive`: the files shared), or ``FROM`` a GGUF file or model folder (relative to ``folder``),
    read where it is as ``hearth import`` reads it (its projector paired: a second ``FROM``, else the one beside it).
    A name made so before is replaced; another model's name is refused, as is one that differs from another's only in
    case.

    Raises:
        ModelNotFound: ``FROM`` names no local model.
        ModelLoadError: the file is not a model Hearth can read.
        InvalidRequest: the name is another model's, or a setting Hearth cannot keep.
    """
    from engine.catalog.pairing import check_projector, projector_beside
    from engine.remote.routing import local_spelling

    named = _files(asked, folder)
    if named is None:
        found = registry.resolve(local_spelling(asked.base or ""))
        return registry.derive(found, name, layered(found.origin_info or {}, asked))
    path, projector = named
    existing = registry.made_again(name)
    info = layered({"created": True}, asked)
    if projector is None and (beside := projector_beside(path)) is not None:
        try:
            projector = check_projector(beside)
        except InvalidRequest:  # a file named mmproj* that is not one: the model alone
            projector = None
    if projector is not None:
        info["mmproj"] = str(projector)
    model = registry.register(path, name=name, source="import", origin_info=info, replace=existing is not None)
    if existing is not None:
        registry.release_files(existing)  # an upload it replaces, when nothing else uses its files
    return model


__all__ = ["MAX_MODELFILE_CHARS", "Modelfile", "create_model", "layered", "parse"]
