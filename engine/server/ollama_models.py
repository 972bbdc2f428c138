"""Ollama's model endpoints: ``GET /api/version``, ``/api/tags``, ``/api/ps``, ``POST /api/show``,
``/api/pull`` (a Hub download through the catalog, with Ollama's progress lines) and
``DELETE /api/delete``. Models are listed as Ollama lists them, with a tag (``:latest`` where Hearth's name has
none); either form names them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from pydantic import StrictBool

from engine import __version__
from engine.errors import DownloadError, HearthError, InvalidRequest
from engine.infill import file_has_markers
from engine.remote.client import RemoteModel
from engine.remote.routing import local_spelling
from engine.server import remote_routes
from engine.server.api_models import NullLeftOutBody
from engine.server.dialect import error_route, ollama_error
from engine.server.errors import error_info
from engine.server.ollama_routes import NDJSON, resolve
from engine.starter import STARTER_NAME, STARTER_REPO

router = APIRouter(prefix="/api", route_class=error_route(ollama_error, json_body=True))
root_router = APIRouter(route_class=error_route(ollama_error, json_body=True))

# The Ollama API level these endpoints follow; clients compare it against the features they need.
OLLAMA_API_VERSION = "0.12.11"
_FOREVER = datetime(2318, 1, 1, tzinfo=UTC)  # what Ollama shows for a model kept loaded for good


class ModelBody(NullLeftOutBody):
    model: str | None = None
    name: str | None = None  # Ollama's older spelling
    verbose: StrictBool = False

    @property
    def target(self) -> str:
        value = self.model or self.name
        if not value:
            raise InvalidRequest("'model' is required; name a model.", param="model")
        return value


class PullBody(ModelBody):
    stream: StrictBool = True
    insecure: StrictBool = False


def _iso(moment: datetime | None) -> str:
    moment = moment or datetime.fromtimestamp(0, UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat().replace("+00:00", "Z")


def _digest(m) -> str:
    return m.sha256 or hashlib.sha256(f"{m.name}\0{m.path}".encode()).hexdigest()


def _size_label(n: int | None) -> str:
    if not n:
        return ""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}".replace(".0", "")
    return str(n)


def _details(m) -> dict:
    family = m.architecture or ""
    return {
        "parent_model": "",
        "format": m.format,
        "family": family,
        "families": [family] if family else None,
        "parameter_size": _size_label(m.parameters),
        "quantization_level": m.quantization or "",
    }


def tagged(name: str) -> str:
    """A model's name as Ollama lists one, ``NAME:TAG``: an untagged name gets ``:latest`` (clients match the
    names they are given against ``/api/tags`` so, and Hearth takes either form)."""
    return name if ":" in name.rpartition("/")[2] else f"{name}:latest"


def _entry(m) -> dict:
    return {
        "name": tagged(m.name),
        "model": tagged(m.name),
        "modified_at": _iso(m.since),
        "size": m.size_bytes,
        "digest": _digest(m),
        "details": _details(m),
    }


@root_router.get("/")
async def root() -> PlainTextResponse:
    return PlainTextResponse("Hearth is running (the Ollama API is under /api)")


# Ollama's clients check the server with HEAD /; one operation per method keeps the OpenAPI ids unique.
root_router.add_api_route("/", root, methods=["HEAD"], include_in_schema=False)


@router.get("/version")
async def version() -> dict:
    return {"version": OLLAMA_API_VERSION, "hearth": __version__}


def _remote_entry(m: RemoteModel) -> dict:
    """A remote provider's model as Ollama lists one (no size or family here: the provider has them)."""
    return {
        "name": tagged(m.id),
        "model": tagged(m.id),
        "modified_at": _iso(datetime.fromtimestamp(m.created, UTC) if m.created else None),
        "size": 0,
        "digest": hashlib.sha256(m.id.encode()).hexdigest(),
        "details": {"parent_model": "", "format": "remote", "family": "", "families": None,
                    "parameter_size": "", "quantization_level": ""},  # fmt: skip
    }


@router.get("/tags")
async def tags(request: Request) -> dict:
    local = [_entry(m) for m in await asyncio.to_thread(request.app.state.manager.available)]
    return {"models": local + [_remote_entry(m) for m in await remote_routes.remote_models(request)]}


@router.get("/ps")
async def ps(request: Request) -> dict:
    manager = request.app.state.manager
    wall_minus_mono = time.time() - time.monotonic()
    out = []
    for lm in manager.loaded():
        ttl = manager.ttl(lm)
        expires = (
            _FOREVER
            if ttl is None
            else datetime.fromtimestamp(wall_minus_mono + lm.last_used, UTC) + timedelta(seconds=ttl)
        )
        try:
            info = lm.backend.info
            n_ctx, gpu_share = info.n_ctx, info.gpu_share
        except Exception:  # a backend mid-close
            n_ctx, gpu_share = None, 0.0
        out.append(
            {
                **_entry(lm.model),
                "size": lm.size_estimate,
                "size_vram": round(lm.size_estimate * gpu_share),  # `ollama ps` shows "100% CPU" from it
                "expires_at": _iso(expires),
                "context_length": n_ctx,
            }
        )
    return {"models": out}


def model_header(m) -> dict[str, Any]:
    """Key/values of the model's files (GGUF header, or config.json), for ``model_info`` and the template."""
    path = Path(m.path)
    try:
        if m.format == "gguf":
            from engine.catalog.gguf_header import _file_chunks, read_gguf_kv

            return read_gguf_kv(_file_chunks(path), stop_at_tokenizer=False)
        info: dict[str, Any] = {}
        for name in ("config.json", "tokenizer_config.json"):
            if (path / name).is_file():
                info.update(json.loads((path / name).read_text()))
        return info
    except (OSError, ValueError):
        return {}


def capabilities(m, template: str) -> list[str]:
    """What an Ollama client may ask of the model: every chat model calls tools (through its own
    template's format, else Hearth's generic one; docs/tools.md); thinking where its template has it; insert
    (fill in the middle) where its vocabulary has the markers (engine.infill)."""
    from engine.tools.reasoning import template_thinks

    insert = file_has_markers(Path(m.path))  # fill in the middle: /api/generate's suffix
    if not m.has_chat_template and m.format == "gguf" and not template:
        return ["completion", "insert"] if insert else ["embedding"]  # a base code model has no chat template
    caps = ["completion", "tools"]
    if template_thinks(template):
        caps.append("thinking")
    if insert:
        caps.append("insert")
    from engine.server.media import capabilities as media_capabilities

    return caps + media_capabilities(m.mmproj)  # "vision", "audio" with a projector


def _shown_value(value: object) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


def parameters_text(defaults: dict) -> str:
    """A model's Modelfile parameters as Ollama's ``/api/show`` gives them: a line each (``stop`` a line a value), the
    name in 30 columns."""
    lines = []
    for name, value in defaults.items():
        if name not in ("system", "messages"):
            lines += [f"{name:<30} {_shown_value(one)}" for one in (value if isinstance(value, list) else [value])]
    return "\n".join(lines)


def _quoted(text: object) -> str:
    """A Modelfile value as Ollama writes one, so that a Modelfile reader (Hearth's :func:`~engine.catalog.modelfile.parse`
    too) reads it back."""
    if isinstance(text, bool):
        return str(text).lower()
    if not isinstance(text, str):
        return str(text)
    from engine.catalog.modelfile import written

    return written(text)


def modelfile(m, template: str, system: str, defaults: dict, messages: list, license_: list[str]) -> str:
    """The Modelfile that makes the model (``ollama show --modelfile``): ``FROM`` its name (a path is for the admin
    key), the model it was made from, or its file's name; then its template, system, parameters, messages, licenses."""
    lines = ["# Served by Hearth", f"FROM {m.derived_from or m.name}"]
    own = m.origin_info or {}
    if template and isinstance(own.get("ollama_template"), str):
        lines.append(f"TEMPLATE {_quoted(template)}")
    if system:
        lines.append(f"SYSTEM {_quoted(system)}")
    for name, value in defaults.items():
        if name not in ("system", "messages"):
            lines += [f"PARAMETER {name} {_quoted(one)}" for one in (value if isinstance(value, list) else [value])]
    lines += [f"MESSAGE {mm.get('role')} {_quoted(str(mm.get('content', '')))}" for mm in messages]
    lines += [f"LICENSE {_quoted(text)}" for text in license_]
    return "\n".join(lines) + "\n"


def own_settings(m, template: str) -> tuple[str, str, dict[str, Any], list[dict], list[str]]:
    """What the model's Modelfile says, as ``/api/show`` and `hearth show --modelfile` give it: its template (one of
    Ollama's, in Go, as given; else ``template``, its file's), system prompt, parameters, messages and licenses."""
    own = m.origin_info or {}
    if isinstance(own.get("ollama_template"), str):  # a template of Ollama's (Go): shown as given
        template = own["ollama_template"]
    given = own.get("defaults")
    defaults: dict[str, Any] = given if isinstance(given, dict) else {}
    system = defaults.get("system")
    system = system if isinstance(system, str) else ""
    messages = [mm for mm in defaults.get("messages") or () if isinstance(mm, dict)]
    license_ = [t for t in own.get("license") or () if isinstance(t, str)]
    return template, system, defaults, messages, license_


@router.post("/show")
async def show(request: Request, body: ModelBody) -> dict:
    m = await resolve(request, body.target)
    kv = await asyncio.to_thread(model_header, m)
    template = kv.get("tokenizer.chat_template") or kv.get("chat_template") or ""
    if not isinstance(template, str):
        template = ""
    # as Ollama shows them: every key but the template, its arrays (the vocabulary's among them: Hearth does not read
    # those, verbose or not) as null
    info = {
        k: v if isinstance(v, (str, int, float, bool)) else None
        for k, v in kv.items()
        if k != "tokenizer.chat_template" and k != "chat_template"
    }
    info.setdefault("general.architecture", m.architecture or "")
    if m.parameters:
        info["general.parameter_count"] = m.parameters
    if m.context_length and m.architecture:
        info.setdefault(f"{m.architecture}.context_length", m.context_length)
    rendered = m.chat_template or template  # what the model renders with: its capabilities are read from it
    template, system, defaults, messages, license_ = own_settings(m, template)
    details = _details(m)
    details["parent_model"] = m.derived_from or ""
    return {
        "modelfile": modelfile(m, template, system, defaults, messages, license_),
        "parameters": parameters_text(defaults),
        "template": template,
        **({"system": system} if system else {}),
        **({"license": "\n".join(license_)} if license_ else {}),
        **({"messages": messages} if messages else {}),
        "details": details,
        "model_info": info,
        "capabilities": await asyncio.to_thread(capabilities, m, rendered),  # reads the vocabulary's bytes
        "modified_at": _iso(m.since),
    }


@router.delete("/delete")
async def delete(request: Request, body: ModelBody) -> Response:
    manager = request.app.state.manager
    m = await resolve(request, body.target)
    await asyncio.to_thread(manager.unload, m.name)
    await asyncio.to_thread(manager.registry.remove, m.name, delete_files=True)
    return Response(status_code=200)


class _NotOffered(HearthError):
    status = 404
    code = "not_found"


@router.post("/push", include_in_schema=False)
async def push(request: Request) -> Response:
    """Ollama's push to a registry, which Hearth has not: an answer in Ollama's shape that says so."""
    raise _NotOffered("Hearth has no /api/push: its models stay on this machine; share a model's GGUF file instead.")


def pull_target(name: str) -> tuple[str, str | None]:
    """``(repo, variant)`` from an Ollama pull name: ``owner/repo[:VARIANT]``, also as ``hf.co/owner/repo``;
    ``:latest`` (or no variant) means the variant the advisor recommends for this machine.

    Raises:
        InvalidRequest: the name is not a Hub repo.
    """
    from engine.commands.pull import split_spec

    spec = name.strip()
    for prefix in ("https://", "hf.co/", "huggingface.co/"):
        spec = spec.removeprefix(prefix)
    repo, variant = split_spec(spec)
    if variant is None and repo.endswith(":latest"):
        repo = repo.removesuffix(":latest")
    if variant is not None and variant.lower() == "latest":
        variant = None
    from engine.catalog.recommended import ollama_library_repo

    library = ollama_library_repo(spec)  # Ollama's library name of a model Hearth lists (`llama3.2`): its repo
    if library is not None:
        return library
    from engine.catalog.hub import check_repo_id

    try:
        check_repo_id(repo)
    except InvalidRequest as exc:
        raise InvalidRequest(
            f"'model' names no Hugging Face repo ('{name}') nor a model of Ollama's library that Hearth lists; pull models "
            "as owner/repo or owner/repo:VARIANT (e.g. a GGUF repo).",
            param="model",
        ) from exc
    return repo, variant


def _choose(catalog, repo: str, variant: str | None):
    """The listing and the variant to fetch (the advisor's pick when none is named)."""
    from engine.catalog.advisor import advise
    from engine.hardware import detect_hardware

    listing = catalog.hub.repo(repo)
    if variant is None and len(listing.variants) > 1:
        advice = advise(listing.variants, catalog.hub.model_shape(listing), detect_hardware(), context_length=None)
        if advice.recommended is None:
            raise InvalidRequest(f"None of {listing.repo}'s variants fits this machine; pull {listing.repo}:VARIANT to get one anyway.")
        variant = advice.recommended
    return listing, listing.variant(variant)


def _ended(status) -> bool:
    return status.state.value in ("completed", "failed", "cancelled", "paused")


async def _installed(request: Request, name: str) -> bool:
    """Whether ``name`` is a local model Hearth serves now (its file there), as Ollama answers a pull of a model it has."""
    try:
        m = await resolve(request, name)
    except HearthError:
        if local_spelling(name).lower() not in (STARTER_NAME, STARTER_REPO.lower()):
            return False
        # the bundled starter, removed: registered again from the package, as a pull of it fetches it again
        registry = request.app.state.manager.registry
        return await asyncio.to_thread(registry.ensure_starter) is not None
    return Path(m.path).exists()


async def _have_lines() -> AsyncIterator[dict]:
    yield {"status": "pulling manifest"}
    yield {"status": "success"}


async def pull_lines(
    request: Request, repo: str, variant: str | None, pulled: dict[str, str] | None = None
) -> AsyncGenerator[dict, None]:
    """Ollama's progress objects for a download, ending with ``{"status": "success"}``; ``pulled`` gets the name of
    the model fetched (``"name"``) once it is chosen.

    Raises:
        HearthError: the repo or variant cannot be fetched (before anything was downloaded, or when it fails).
    """
    catalog = request.app.state.catalog
    registry = request.app.state.manager.registry
    yield {"status": "pulling manifest"}
    listing, chosen = await asyncio.to_thread(_choose, catalog, repo, variant)
    name = f"{listing.repo}:{chosen.name}"
    if pulled is not None:
        pulled["name"] = name
    existing = await asyncio.to_thread(registry.get, name)
    if existing is None or not existing.path.exists():
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def on_event(status) -> None:
            loop.call_soon_threadsafe(events.put_nowait, status)

        downloads = await asyncio.to_thread(lambda: catalog.downloads)
        job = await asyncio.to_thread(downloads.start, listing.repo, chosen.name, listing=listing)
        unsubscribe = job.subscribe(on_event)
        weights = max(chosen.files, key=lambda f: f.size)
        digest = f"sha256:{weights.sha256 or hashlib.sha256(name.encode()).hexdigest()}"
        status = job.status()
        try:
            while not _ended(status):
                yield {"status": f"pulling {digest[7:19]}", "digest": digest, "total": status.bytes_total, "completed": status.bytes_done}
                try:
                    status = await asyncio.wait_for(events.get(), timeout=1.0)
                except TimeoutError:
                    status = job.status()
        finally:
            unsubscribe()
        if status.state.value != "completed":
            raise DownloadError(status.error or f"The download of {name} was {status.state.value}; pull it again to resume.")
        yield {"status": f"pulling {digest[7:19]}", "digest": digest, "total": status.bytes_total, "completed": status.bytes_total}
    yield {"status": "verifying sha256 digest"}
    yield {"status": "writing manifest"}
    yield {"status": "success"}


def _line(payload: dict) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode() + b"\n"


@router.post("/pull")
async def pull(request: Request, body: PullBody):
    if await _installed(request, body.target):  # a model Hearth has (as /api/tags names it): nothing to fetch
        lines = _have_lines()
    else:
        repo, variant = pull_target(body.target)
        lines = pull_lines(request, repo, variant)
    first = [await anext(lines)]
    first.append(await anext(lines))  # the listing is fetched here: a missing repo is an HTTP error, not a line
    if not body.stream:
        async for _ in lines:
            pass
        return {"status": "success"}

    async def stream() -> AsyncIterator[bytes]:
        for item in first:
            yield _line(item)
        try:
            async for item in lines:
                yield _line(item)
        except HearthError as exc:
            yield _line({"error": error_info(exc).message})

    return StreamingResponse(stream(), media_type=NDJSON)


__all__ = ["router", "root_router", "OLLAMA_API_VERSION", "pull_lines", "pull_target", "capabilities", "model_header"]
