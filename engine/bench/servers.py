"""What a server under test is: its engine and version, the model it serves, and that model's file.

Hearth answers ``/health`` with its version and ``/api/models`` + ``/api/stats`` with the loaded model,
its backend, quantization and file; vLLM answers ``/version``; llama.cpp's ``llama-server`` answers
``/props``; llama-cpp-python's server names itself in ``/openapi.json``. Anything else is "unknown".
Every probe but the first has a short timeout and may fail quietly: it only adds facts.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engine.bench.errors import BenchError, ServerUnreachable

log = logging.getLogger(__name__)

UNKNOWN = "unknown"
BACKEND_PACKAGES = {"llamacpp": "llama-cpp-python", "paged": "torch", "mlx": "mlx-lm"}
LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "::"}


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """One server of a run, as far as it could be found out; ``"unknown"`` where it could not."""

    label: str
    url: str
    kind: str = UNKNOWN
    version: str = UNKNOWN
    model: str = UNKNOWN
    backend: str = UNKNOWN
    backend_version: str = UNKNOWN
    quantization: str = UNKNOWN
    model_file: str = UNKNOWN
    model_sha256: str = UNKNOWN
    model_size_bytes: int | None = None
    pid: int | None = None
    started_by_bench: bool = False
    details: tuple[tuple[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["details"] = dict(self.details)
        return out


def is_local(url: str) -> bool:
    return (urlsplit(url).hostname or "") in LOOPBACK


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _get(client, url: str) -> Any:
    """JSON from ``url``, or None when it does not answer 200 with JSON."""
    import httpx

    try:
        r = client.get(url)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    try:
        return r.json()
    except ValueError:
        return None


def probe_server(
    url: str, *, label: str, api_key: str | None, model: str | None, timeout: float = 10.0
) -> ServerInfo:
    """Find out what answers at ``url`` (an OpenAI base URL ending in /v1) and which model to ask for.

    Args:
        url: The server's OpenAI base URL.
        label: Its name in the report.
        api_key: Bearer token, if the server wants one.
        model: The model to request: Hearth loads it if needed; another server gets it when it lists it
            (or lists nothing), else its first listed model. None picks Hearth's loaded model or the first.
        timeout: Seconds to wait for the server's first answer.

    Raises:
        ServerUnreachable: nothing answers at ``url``.
        BenchError: the server refuses the API key, or no model can be chosen.
    """
    import httpx

    url = url.rstrip("/")
    root = url.removesuffix("/v1")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(timeout=timeout, headers=headers) as client:
        try:
            r = client.get(f"{url}/models")
        except httpx.TimeoutException:
            raise ServerUnreachable(url, f"no answer within {timeout:g} s") from None
        except httpx.HTTPError as exc:
            reason = type(exc).__name__ if not str(exc) else str(exc)
            raise ServerUnreachable(url, reason) from None
        if r.status_code in (401, 403):
            raise BenchError(
                f"The server at {url} refuses the API key (HTTP {r.status_code}); pass --api-key."
            )
        listed: list[str] = []
        if r.status_code == 200:
            try:
                listed = [m["id"] for m in r.json().get("data", []) if isinstance(m, dict) and "id" in m]
            except (ValueError, AttributeError):
                listed = []
        client.timeout = httpx.Timeout(5.0)
        info = ServerInfo(label=label, url=url)
        health = _get(client, f"{root}/health")
        stats = (
            _get(client, f"{root}/api/stats") if isinstance(health, dict) and "version" in health else None
        )
        if isinstance(stats, dict) and "loaded" in stats:
            info = _hearth_info(client, info, root, health, stats, model)
        else:
            info = _peer_info(client, info, root)
    if info.kind == "hearth":
        chosen = info.model if info.model != UNKNOWN else (listed[0] if listed else None)
    elif model is not None and (model in listed or not listed):
        chosen = model
    else:  # a peer serving one model under another name (llama_cpp.server lists its file path)
        chosen = listed[0] if listed else None
    if chosen is None:
        raise BenchError(f"The server at {url} lists no model; name one with --model.")
    return replace(info, model=chosen)


def _hearth_info(
    client, info: ServerInfo, root: str, health: dict, stats: dict, model: str | None
) -> ServerInfo:
    loaded = [m for m in stats.get("loaded", []) if isinstance(m, dict)]
    name = model
    shown: dict = {}
    if name is None and loaded:
        name, shown = _chat_model(client, root, [str(m.get("name")) for m in loaded])
    elif name is not None:
        shown = _show(client, root, name)
    entry: dict = {}
    models = _get(client, f"{root}/api/models")
    if isinstance(models, dict):
        for m in models.get("models", []):
            if name is not None and m.get("name") == name:
                entry = m
    match = next((m for m in loaded if m.get("name") in (name, entry.get("name"))), None)
    if match is None and not entry and len(loaded) == 1 and name and Path(name).is_file():
        match = loaded[0]  # loaded by path: the server lists it under a short name of the file
    backend = match.get("backend") if match else None
    engine_stats = (stats.get("models") or {}).get(
        (match or {}).get("name") or entry.get("name", name) or "", {}
    )
    backend = backend or engine_stats.get("backend") or UNKNOWN
    details = tuple(
        (k, engine_stats[k])
        for k in ("slots", "n_ctx_per_sequence")
        if isinstance(engine_stats, dict) and k in engine_stats
    )
    return replace(
        info,
        kind="hearth",
        version=str(health.get("version", UNKNOWN)),
        model=name or UNKNOWN,
        backend=backend,
        backend_version=str(engine_stats.get("backend_version", UNKNOWN)),
        quantization=str(entry.get("quantization") or (shown.get("details") or {}).get("quantization_level") or UNKNOWN),
        model_file=str(entry.get("path") or (name if name and Path(name).is_file() else UNKNOWN)),
        model_sha256=str(entry.get("sha256") or UNKNOWN),
        model_size_bytes=entry.get("size_bytes"),
        details=details,
    )


def _show(client, root: str, name: str) -> dict:
    """Hearth's ``POST /api/show`` for ``name`` (an inference route: no admin key needed), or {}."""
    import httpx

    try:
        r = client.post(f"{root}/api/show", json={"model": name})
        return r.json() if r.status_code == 200 and isinstance(r.json(), dict) else {}
    except (httpx.HTTPError, ValueError):
        return {}


def _chat_model(client, root: str, names: list[str]) -> tuple[str, dict]:
    """The first of the loaded ``names`` that writes answers (a reranker or embedding model does not), with
    its ``/api/show``.

    Raises:
        BenchError: none of them does.
    """
    shown = {n: _show(client, root, n) for n in names}
    for n in names:
        if not shown[n] or "completion" in (shown[n].get("capabilities") or ()):
            return n, shown[n]
    raise BenchError(
        f"The server at {root} has no chat model loaded ({', '.join(names)} only rank or embed); name one with --model."
    )


def _peer_info(client, info: ServerInfo, root: str) -> ServerInfo:
    version = _get(client, f"{root}/version")
    if isinstance(version, dict) and "version" in version:
        return replace(
            info,
            kind="vllm",
            version=str(version["version"]),
            backend="vllm",
            backend_version=str(version["version"]),
        )
    props = _get(client, f"{root}/props")
    if isinstance(props, dict) and ("default_generation_settings" in props or "build_info" in props):
        build = str(props.get("build_info", UNKNOWN))
        path = props.get("model_path")
        return replace(
            info,
            kind="llama.cpp",
            version=build,
            backend="llama.cpp",
            backend_version=build,
            model_file=str(path) if path else UNKNOWN,
            details=(("total_slots", props.get("total_slots")),),
        )
    spec = _get(client, f"{root}/openapi.json")
    if isinstance(spec, dict) and isinstance(spec.get("info"), dict):
        title = str(spec["info"].get("title", ""))
        ver = str(spec["info"].get("version", UNKNOWN))
        if "llama.cpp python" in title.lower():
            return replace(
                info, kind="llama-cpp-python", version=ver, backend="llama.cpp", backend_version=ver
            )
        return replace(info, kind=title or UNKNOWN, version=ver)
    return info


def complete_local_facts(info: ServerInfo, *, model_file: Path | None = None) -> ServerInfo:
    """Fill in what only this machine can tell: the model file's hash and quantization, and the
    backend version when the server runs from this very Python environment.

    ``model_file`` names the file the server serves when the server cannot say (a peer).
    """
    path: Path | None = model_file
    if path is None and info.model_file != UNKNOWN and (info.pid is not None or is_local(info.url)):
        path = Path(info.model_file)
    if path is not None and path.is_file():
        if info.model_sha256 == UNKNOWN:
            info = replace(info, model_sha256=file_sha256(path))
        info = replace(info, model_file=str(path), model_size_bytes=path.stat().st_size)
        if info.quantization == UNKNOWN:
            info = replace(info, quantization=_quantization(path))
    if info.kind == "hearth" and info.backend_version == UNKNOWN and _same_python(info.pid):
        package = BACKEND_PACKAGES.get(info.backend)
        if package:
            try:
                info = replace(info, backend_version=f"{package} {importlib.metadata.version(package)}")
            except importlib.metadata.PackageNotFoundError:
                pass
    return info


def _quantization(path: Path) -> str:
    try:
        from engine.catalog.metadata import read_model_metadata

        return read_model_metadata(path).quantization or UNKNOWN
    except Exception:  # metadata is a nicety here: a file we cannot read is still benchmarked
        log.debug("no metadata for %s", path, exc_info=True)
        return UNKNOWN


def _same_python(pid: int | None) -> bool:
    """Whether process ``pid`` runs from this Python environment (so its packages are the ones we see)."""
    if pid is None:
        return False
    import psutil

    try:
        proc = psutil.Process(pid)
        argv0 = (proc.cmdline() or [""])[0]
        exe = proc.exe()
    except (psutil.Error, OSError):
        return False
    here = os.path.dirname(os.path.abspath(sys.executable))
    if os.path.isabs(argv0):
        return os.path.dirname(argv0) == here
    return os.path.dirname(exe) == os.path.dirname(os.path.realpath(sys.executable))
