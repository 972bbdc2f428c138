"""Ollama's model-building endpoints: ``POST /api/create``, ``POST /api/copy`` and ``HEAD``/``POST /api/blobs``.

What ``ollama create`` and ``ollama cp`` (and every client of the same API) do, on Hearth's registry:

- ``create`` from a local model (``from``) registers a new name for its files with its own defaults: the
  Modelfile's ``PARAMETER``s (over the base model's), ``SYSTEM``, ``MESSAGE``s, ``TEMPLATE`` (Ollama's Go template,
  translated as an Ollama model's is) and ``LICENSE``; ``create`` of a model's own name gives it those defaults;
- ``create`` from files (``files``: file name -> ``sha256:...``) builds a model from GGUF files sent first to
  ``POST /api/blobs/sha256:...``: the model file (split ones as their parts) and a multimodal projector;
- ``create`` from a Hub repo that is not here (``hf.co/owner/repo:VARIANT``) pulls it first, as Ollama pulls a
  ``FROM`` it lacks;
- ``copy`` registers another name for a model, with its defaults.

A model made from another shares its files (engine.catalog.registry.ModelRegistry.derive): removing either
leaves them while the other uses them. A name that is taken is replaced only when a model made so holds it.
Every route here changes the registry, and needs the admin key where keys are set (engine.server.access).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import Field, StrictBool
from starlette.requests import ClientDisconnect

from engine.catalog.modelfile import Modelfile, layered, parse
from engine.catalog.registry import LocalModel, ModelRegistry, short_name
from engine.errors import HearthError, InvalidRequest, ModelLoadError, ModelNotFound
from engine.remote.providers import split_model_id
from engine.remote.routing import local_spelling
from engine.server.api_models import NullLeftOutBody
from engine.server.dialect import error_route, ollama_error
from engine.server.errors import error_info
from engine.server.ollama_routes import NDJSON
from engine.validation import model_name

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api", route_class=error_route(ollama_error, json_body=True))
# the blob upload reads its body as it comes (a model file), never as JSON
upload_router = APIRouter(prefix="/api", route_class=error_route(ollama_error))

_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")
#: Bytes an upload gathers before they are hashed and written off the event loop.
_WRITE_EVERY = 4 << 20
#: Free disk space an upload leaves, beyond its own size.
DISK_MARGIN_BYTES = 1 << 30
#: Most files one model is built from (a split GGUF's parts and a projector).
MAX_FILES = 256


class _NoRoom(HearthError):
    status = 507
    code = "insufficient_storage"


class CreateBody(NullLeftOutBody):
    model: str | None = None
    name: str | None = None  # Ollama's older spelling
    from_: str | None = Field(None, alias="from")
    files: dict[str, str] | None = None
    adapters: dict[str, str] | None = None
    template: str | None = None
    license: str | list[str] | None = None
    system: str | None = None
    parameters: dict[str, Any] | None = None
    messages: list[Any] | None = None
    stream: StrictBool = True
    quantize: str | None = None
    quantization: str | None = None  # Ollama's older spelling
    modelfile: str | None = None  # Ollama's clients before 0.5 sent the Modelfile's text


class CopyBody(NullLeftOutBody):
    source: str = Field(min_length=1)
    destination: str = Field(min_length=1)


def _name(given: str | None, field: str = "model") -> str:
    """The registry name a created model gets: as given, without Ollama's ``:latest`` (``/api/tags`` adds it back).

    Raises:
        InvalidRequest: none given, or one that cannot name a model.
    """
    if not given:
        raise InvalidRequest(f"'{field}' is required; name the model to create.", param=field)
    return model_name(local_spelling(given.strip()), name=field)


def blob_folder(registry: ModelRegistry) -> Path:
    return registry.home / "blobs"


def blob_path(registry: ModelRegistry, digest: str, *, param: str = "digest") -> Path:
    """Where the blob ``sha256:HEX`` is kept.

    Raises:
        InvalidRequest: ``digest`` is not ``sha256:`` and 64 lower-case hex digits.
    """
    m = _DIGEST.fullmatch(digest)
    if m is None:
        raise InvalidRequest(f"'{digest}' is not a digest; give 'sha256:' and the file's 64 hex digits.", param=param)
    return blob_folder(registry) / f"sha256-{m.group(1)}"


@upload_router.head("/blobs/{digest}")
async def blob_exists(request: Request, digest: str) -> Response:
    path = blob_path(request.app.state.manager.registry, digest)
    return Response(status_code=200 if await asyncio.to_thread(path.is_file) else 404)


def _gather(f, h, pieces: list[bytes]) -> None:
    for piece in pieces:
        h.update(piece)
        f.write(piece)


@upload_router.post("/blobs/{digest}", status_code=201)
async def create_blob(request: Request, digest: str) -> Response:
    """A file for ``/api/create`` to build a model from, kept when its SHA-256 is ``digest`` (201; 200 when it is
    here already, its body left unread)."""
    path = blob_path(request.app.state.manager.registry, digest)
    if await asyncio.to_thread(path.is_file):
        return Response(status_code=200)
    await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread(sweep_blobs, path.parent)
    length = request.headers.get("content-length", "")
    if length.isdigit():
        free = (await asyncio.to_thread(shutil.disk_usage, path.parent)).free
        if int(length) + DISK_MARGIN_BYTES > free:
            raise _NoRoom(f"The file is {int(length):,} bytes and the disk has {free:,} free; free some space and send it again.")
    part = path.with_name(f".upload-{uuid.uuid4().hex}")
    h = hashlib.sha256()
    try:
        with await asyncio.to_thread(part.open, "wb") as f:
            pieces: list[bytes] = []
            held = 0
            async for chunk in request.stream():
                pieces.append(chunk)
                held += len(chunk)
                if held >= _WRITE_EVERY:
                    await asyncio.to_thread(_gather, f, h, pieces)
                    pieces, held = [], 0
            await asyncio.to_thread(_gather, f, h, pieces)
    except ClientDisconnect:  # the client left: nobody to answer, nothing kept
        await asyncio.to_thread(part.unlink, missing_ok=True)
        return Response(status_code=400)
    except OSError as exc:
        await asyncio.to_thread(part.unlink, missing_ok=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _NoRoom("The disk filled while the file was arriving; free some space and send it again.") from None
        raise
    try:
        if h.hexdigest() != path.name.removeprefix("sha256-"):
            raise InvalidRequest(
                f"The file's SHA-256 is {h.hexdigest()}, not the digest it was sent to; send it to "
                f"/api/blobs/sha256:{h.hexdigest()}.", param="digest",
            )  # fmt: skip
        await asyncio.to_thread(os.replace, part, path)
    finally:
        await asyncio.to_thread(part.unlink, missing_ok=True)
    return Response(status_code=201)


#: Seconds a blob no ``create`` took is kept, and an upload's part file that stopped growing.
BLOB_SECONDS = 24 * 3600
PART_SECONDS = 3600


def sweep_blobs(folder: Path) -> None:
    """Delete what uploads left in ``folder``: blobs no ``create`` took within a day, and part files of uploads that
    stopped an hour ago (a worker killed mid-upload), as Ollama prunes the blobs no model uses."""
    import time

    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        keep = BLOB_SECONDS if entry.name.startswith("sha256-") else PART_SECONDS if entry.name.startswith(".upload-") else None
        try:
            if keep is not None and entry.is_file(follow_symlinks=False) and now - entry.stat().st_mtime > keep:
                os.unlink(entry.path)
        except OSError:
            continue


def _license(given: str | list[str] | None) -> list[str] | None:
    if given is None:
        return None
    texts = [given] if isinstance(given, str) else given
    if not all(isinstance(t, str) for t in texts):
        raise InvalidRequest("'license' must be a string or a list of strings.", param="license")
    return texts


def _asked(body: CreateBody) -> tuple[Modelfile, dict[str, str] | None]:
    """What ``body`` asks for, as a Modelfile, and the files to build from (None: ``from`` a model).

    Raises:
        InvalidRequest: what Hearth cannot do (quantizing, adapters), or neither a model nor files to build from.
    """
    if body.quantize or body.quantization:
        raise InvalidRequest(
            "Hearth does not quantize models; quantize the GGUF with llama.cpp's llama-quantize first, or pull a "
            "quantized variant.", param="quantize",
        )  # fmt: skip
    if body.adapters:
        raise InvalidRequest("LoRA adapters are not supported; merge the adapter into the model's GGUF first.", param="adapters")
    if body.modelfile is not None and not body.from_ and body.files is None:  # the Modelfile's text: older clients
        asked = parse(body.modelfile)
        bases = [asked.base or "", *asked.more]
        digests = [re.fullmatch(r"@(sha256[:-][0-9a-f]{64})", base) for base in bases]
        if all(digests):  # files those clients sent to /api/blobs first (a model, and its projector)
            files = {f"file-{i}.gguf": d.group(1).replace("-", ":", 1) for i, d in enumerate(digests) if d is not None}
            return replace(asked, base=None, more=()), files
        base = bases[0]
        if any(digests) or base.startswith(("/", ".", "~")) or base.lower().endswith(".gguf") or re.match(r"[A-Za-z]:[\\/]", base):
            raise InvalidRequest(
                f"FROM {base[:80]} names a file on the client's machine; send it with a current Ollama client, or "
                "`hearth create` on this one.", param="modelfile",
            )  # fmt: skip
        return asked, None
    if not body.from_ and body.files is None:
        raise InvalidRequest("Neither 'from' nor 'files' was given; name a model to build on, or send GGUF files.", param="from")
    asked = Modelfile(
        base=body.from_ or None, parameters=body.parameters or {}, system=body.system, template=body.template,
        messages=body.messages, license=_license(body.license),
    )  # fmt: skip
    return asked, (body.files if not body.from_ else None)


_NOT_IN_NAMES = frozenset('<>:"|?*')


def _file_name(given: str) -> str:
    name = given.replace("\\", "/").rsplit("/", 1)[-1]
    if (
        name in ("", ".", "..") or len(name.encode()) > 255 or name[-1] in ". " or any(c in _NOT_IN_NAMES for c in name)
        or any(ord(c) < 32 for c in name)
    ):  # fmt: skip
        raise InvalidRequest(f"'{given[:80]}' cannot name a file; give the file's own name.", param="files")
    return name


def _is_gguf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"GGUF"


def _is_projector(path: Path) -> bool:
    from engine.catalog.gguf_header import read_gguf_file

    try:
        kv, _ = read_gguf_file(path)
    except (OSError, ValueError):
        return False
    return kv.get("general.type") == "mmproj" or kv.get("general.architecture") == "clip"


_SPLIT = re.compile(r"^(.*)-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def _model_file(models: list[str]) -> str:
    """The file a model loads from among ``models`` (the GGUF files that are not a projector): the one file, or
    the first part of a split model whose every part is there.

    Raises:
        InvalidRequest: none, several models, or a split model with parts missing or of another split.
    """
    splits = {m: _SPLIT.match(m) for m in models}
    if len(models) == 1 and splits[models[0]] is None:
        return models[0]
    parts = [found for found in splits.values() if found is not None]
    sets = {(p.group(1), int(p.group(3))) for p in parts}
    if len(parts) != len(models) or len(sets) != 1:
        raise InvalidRequest(
            f"'files' holds {len(models)} models ({', '.join(models) or 'none'}); send one model's file (or every part "
            "of a split one) and at most one projector.", param="files",
        )  # fmt: skip
    ((prefix, count),) = sets
    numbers = sorted(int(p.group(2)) for p in parts)
    if numbers != list(range(1, count + 1)):
        missing = sorted(set(range(1, count + 1)) - set(numbers))
        raise InvalidRequest(
            f"'files' holds {len(numbers)} of the {count} parts of {prefix}"
            + (f" (part {missing[0]} is missing)" if missing else " (a part twice)")
            + "; send every part.", param="files",
        )  # fmt: skip
    return next(m for m, found in splits.items() if found is not None and int(found.group(2)) == 1)


def _place_files(registry: ModelRegistry, name: str, files: dict[str, str]) -> tuple[Path, Path | None]:
    """The blobs ``files`` names, moved into a folder of their own under Hearth's models, each under its file
    name: ``(model file, projector or None)``.

    Raises:
        InvalidRequest: no files, a blob not sent or named twice, a file that is no GGUF, not one model among them,
            or files that could not be moved (each blob then stays where it was).
    """
    if not files:
        raise InvalidRequest("'files' is empty; send the model's GGUF file to /api/blobs first and name it here.", param="files")
    if len(files) > MAX_FILES:
        raise InvalidRequest(f"'files' names {len(files)} files; a model is built from at most {MAX_FILES}.", param="files")
    blobs: dict[str, Path] = {}
    for given, digest in files.items():
        file = _file_name(given)
        if file in blobs:
            raise InvalidRequest(f"'files' names two files '{file}'; give each file once.", param="files")
        blob = blob_path(registry, digest, param="files")
        if blob in blobs.values():
            raise InvalidRequest(f"'files' names {digest} twice; each file is sent, and named, once.", param="files")
        if not blob.is_file():
            raise InvalidRequest(
                f"No file was sent for '{given}' ({digest}); send it to POST /api/blobs/{digest} first.", param="files"
            )
        if not _is_gguf(blob):
            raise InvalidRequest(
                f"'{given}' is not a GGUF file; Hearth builds models from GGUF files (convert others with llama.cpp's "
                "convert_hf_to_gguf.py).", param="files",
            )  # fmt: skip
        blobs[file] = blob
    projectors = [f for f, blob in blobs.items() if _is_projector(blob)]
    if len(projectors) > 1:
        raise InvalidRequest(f"'files' holds {len(projectors)} projectors ({', '.join(projectors)}); send one.", param="files")
    model = _model_file(sorted(f for f in blobs if f not in projectors))
    stem = short_name(name.replace(":", "-"))
    folder = registry.home / "models" / "created" / stem
    n = 1
    while folder.exists():
        n += 1
        folder = folder.with_name(f"{stem}-{n}")
    moved: list[tuple[Path, Path]] = []
    try:
        folder.mkdir(parents=True)
        for file, blob in blobs.items():
            os.replace(blob, folder / file)
            moved.append((folder / file, blob))
    except OSError as exc:
        for placed, blob in moved:
            os.replace(placed, blob)
        shutil.rmtree(folder, ignore_errors=True)
        raise InvalidRequest(
            f"The files could not be moved into Hearth's models folder ({exc.strerror or exc}); check the disk, then send "
            "the create again.", param="files",
        ) from None
    return folder / model, (folder / projectors[0]) if projectors else None


def _put_back(registry: ModelRegistry, files: dict[str, str], folder: Path) -> None:
    """The files of a model that could not be registered, back among the blobs (a client may send ``create`` again)."""
    for given, digest in files.items():
        placed = folder / _file_name(given)
        if placed.exists():
            os.replace(placed, blob_path(registry, digest))
    shutil.rmtree(folder, ignore_errors=True)


def _create(registry: ModelRegistry, asked: Modelfile, files: dict[str, str] | None, name: str, base: LocalModel | None) -> LocalModel:
    """The registry's work of ``create`` (in a thread: it reads headers and moves files)."""
    if base is not None:
        return registry.derive(base, name, layered(base.origin_info or {}, asked))
    existing = registry.made_again(name)
    info = layered({"created": True}, asked)
    path, projector = _place_files(registry, name, files or {})
    if projector is not None:
        info["mmproj"] = str(projector)
    try:  # Ollama's create replaces a name made so before
        model = registry.register(path, name=name, source="upload", origin_info=info, replace=True)
    except BaseException as exc:
        _put_back(registry, files or {}, path.parent)
        if isinstance(exc, ModelLoadError):
            raise InvalidRequest(
                f"'{path.name}' is not a model Hearth can read ({exc.reason.split('; ')[0]}); send a whole GGUF model file.",
                param="files",
            ) from None
        raise
    if existing is not None:
        registry.release_files(existing)  # the files of the model it replaces, if nothing else uses them
    return model


def _lines(statuses: list[str]) -> AsyncIterator[bytes]:
    async def lines() -> AsyncIterator[bytes]:
        for status in statuses:
            yield json.dumps({"status": status}).encode() + b"\n"

    return lines()


def _progress(model: LocalModel, from_files: bool) -> list[str]:
    layer = model.sha256 or hashlib.sha256(str(model.path).encode()).hexdigest()
    first = "parsing GGUF" if from_files else f"using existing layer sha256:{layer}"
    return [first, "writing manifest", "success"]


def _hub_base(name: str, missing: ModelNotFound) -> tuple[str, str | None]:
    """``(repo, variant)`` of a ``from`` that no local model has, when it names a Hub repo (Ollama pulls a ``FROM``
    it lacks; ``hf.co/owner/repo:VARIANT`` as Ollama's clients write it) or a model of Ollama's library that Hearth
    lists (``llama3.2``).

    Raises:
        ModelNotFound: ``missing``, when the name is no Hub repo either.
    """
    from engine.server.ollama_models import pull_target

    try:
        return pull_target(name)  # a Hub repo, or a model of Ollama's library that Hearth lists (`llama3.2`)
    except InvalidRequest:
        raise missing from None


#: Creates from the Hub going on: each runs to its end when its client leaves, as a pull does.
_UNDER_WAY: set[asyncio.Task] = set()


async def _pull_then_create(request: Request, body: CreateBody, name: str, asked: Modelfile, hub: tuple[str, str | None]):
    """``create`` from a Hub model not here yet: pulled first (Ollama's progress lines), then made from. Both go on
    to the end when the client leaves mid-download, streamed or not."""
    from engine.server.ollama_models import pull_lines

    registry = request.app.state.manager.registry
    pulled: dict[str, str] = {}
    lines = pull_lines(request, hub[0], hub[1], pulled)
    first = [await anext(lines), await anext(lines)]  # the listing is fetched here: a missing repo is an HTTP error
    progress: asyncio.Queue[dict | None] = asyncio.Queue()
    failed: list[Exception] = []

    async def work() -> None:
        try:
            for item in first:
                progress.put_nowait(item)
            async for item in lines:
                if item.get("status") != "success":  # the create's own "success" ends the lines
                    progress.put_nowait(item)
            base = await asyncio.to_thread(registry.resolve, pulled["name"])
            model = await asyncio.to_thread(_create, registry, asked, None, name, base)
            for status in _progress(model, False):
                progress.put_nowait({"status": status})
        except Exception as exc:  # a Hub or disk fault, or one of Hearth's: the last line, or the answer, says it
            if not isinstance(exc, HearthError):
                log.exception("creating %s from %s failed", name, pulled.get("name", hub[0]))
            failed.append(exc)
            progress.put_nowait({"error": error_info(exc).message})
        finally:
            await lines.aclose()
            progress.put_nowait(None)

    task = asyncio.create_task(work())
    _UNDER_WAY.add(task)
    task.add_done_callback(_UNDER_WAY.discard)
    if not body.stream:
        while await progress.get() is not None:
            pass
        if failed:
            raise failed[0]
        return {"status": "success"}

    async def stream() -> AsyncIterator[bytes]:
        while (item := await progress.get()) is not None:
            yield json.dumps(item).encode() + b"\n"

    return StreamingResponse(stream(), media_type=NDJSON)


@router.post("/create")
async def create(request: Request, body: CreateBody):
    name = _name(body.model or body.name)
    asked, files = _asked(body)
    registry = request.app.state.manager.registry
    base = None
    if files is None and asked.base:
        try:
            base = await asyncio.to_thread(_registered, registry, asked.base)
        except ModelNotFound as missing:
            remotes = request.app.state.remotes
            providers = set(await asyncio.to_thread(remotes.providers)) if remotes is not None else set()
            if split_model_id(asked.base, providers) is not None:  # (its name says so: no key is read)
                raise InvalidRequest(
                    f"'{asked.base}' is a remote provider's model; make a model from a local one (a Hub repo of that "
                    f"name: hf.co/{asked.base}).", param="from",
                ) from None
            hub = _hub_base(asked.base, missing)
            await asyncio.to_thread(layered, {}, asked)  # what it asks for, and its name, are checked before anything is fetched
            await asyncio.to_thread(registry.made_again, name)
            return await _pull_then_create(request, body, name, asked, hub)
    model = await asyncio.to_thread(_create, registry, asked, files, name, base)
    if not body.stream:
        return {"status": "success"}
    return StreamingResponse(_lines(_progress(model, files is not None)), media_type=NDJSON)


def _registered(registry: ModelRegistry, name: str) -> LocalModel:
    """The registered model ``name`` means (as Ollama's clients spell it too): as the registry has it, never as this
    worker serves it (a projector paired for this run only, with ``--mmproj``, stays out of what is made from it).

    Raises:
        ModelNotFound: no registered model has that name (a file served by its path has none).
    """
    from engine.pool import not_served_message

    for each in dict.fromkeys((name, local_spelling(name))):
        try:
            return registry.resolve(each)
        except ModelNotFound:
            continue
    raise ModelNotFound(name, not_served_message(name))


@router.post("/copy")
async def copy(request: Request, body: CopyBody) -> Response:
    manager = request.app.state.manager
    try:
        source = await asyncio.to_thread(_registered, manager.registry, body.source)
    except ModelNotFound:
        raise ModelNotFound(body.source, f"There is no model '{body.source}' to copy; `ollama list` (/api/tags) names them.") from None
    name = _name(body.destination, "destination")
    if name == source.name:
        return Response(status_code=200)
    await asyncio.to_thread(manager.registry.derive, source, name, dict(source.origin_info or {}))
    return Response(status_code=200)


__all__ = ["CreateBody", "CopyBody", "blob_path", "router", "upload_router"]
